"""Factories and conversions: tensor() dtype inference, zeros / ones / full / empty /
arange / linspace / rand / randn and the *_like variants, seeded randomness, memory shared
with numpy both ways, tolist / item, and repr text as PyTorch prints it."""
from __future__ import annotations

import math

import numpy as np
import pytest

import eager
from torch_parity import dtype_name, require_torch

# data -> the dtype PyTorch infers (numpy would say float64 for Python floats)
INFERRED = [
    ([1, 2, 3], "int64"), ([1.0, 2], "float32"), ([True, False], "bool"),
    ([[1, 2.5], [3, 4]], "float32"), ([True, 2], "int64"), ([], "float32"), ([[]], "float32"),
    (3.5, "float32"), (7, "int64"), (False, "bool"), (((1, 2), (3, 4)), "int64"),
    ([[[1], [2]], [[3], [4]]], "int64"), (np.array([1, 2], np.int32), "int32"),
    (np.array([0.5], np.float16), "float16"), (np.arange(3.0), "float64"),
]


@pytest.mark.parametrize("data, dtype", INFERRED, ids=range(len(INFERRED)))
def test_tensor_infers_dtype_and_copies_the_data(data, dtype):
    t = eager.tensor(data)
    assert t.dtype.name == dtype
    np.testing.assert_array_equal(t.numpy(), np.array(data))
    assert t.shape == np.array(data).shape


@pytest.mark.parametrize("data, dtype", INFERRED, ids=range(len(INFERRED)))
def test_tensor_inference_matches_torch(data, dtype):
    torch = require_torch()
    assert dtype_name(torch.tensor(data).dtype) == dtype


def test_tensor_of_a_tensor_or_array_copies():
    a = np.arange(4.0)
    t = eager.tensor(a)
    u = eager.tensor(t, dtype=eager.int32)
    a[0] = t[1] = 9
    assert t.tolist() == [0.0, 9.0, 2.0, 3.0] and u.tolist() == [0, 1, 2, 3]
    assert u.dtype is eager.int32


@pytest.mark.parametrize("make, shape, dtype, value", [
    (lambda: eager.zeros(2, 3), (2, 3), "float32", 0),
    (lambda: eager.zeros((2, 3)), (2, 3), "float32", 0),
    (lambda: eager.ones([4], dtype=eager.int32), (4,), "int32", 1),
    (lambda: eager.ones(()), (), "float32", 1),
    (lambda: eager.zeros(0, 3, dtype=eager.bool), (0, 3), "bool", 0),
    (lambda: eager.full((2, 2), 7), (2, 2), "int64", 7),
    (lambda: eager.full((3,), 1.5), (3,), "float32", 1.5),
    (lambda: eager.full((1,), True), (1,), "bool", True),
    (lambda: eager.full([2], 2, dtype=eager.float16), (2,), "float16", 2),
    (lambda: eager.zeros_like(eager.ones(2, 5, dtype=eager.int32)), (2, 5), "int32", 0),
    (lambda: eager.ones_like(eager.zeros(3), dtype=eager.float64), (3,), "float64", 1),
    (lambda: eager.full_like(eager.zeros(2, dtype=eager.int64), 4), (2,), "int64", 4),
], ids=range(12))
def test_filled_factories(make, shape, dtype, value):
    t = make()
    assert (tuple(t.shape), t.dtype.name) == (shape, dtype)
    np.testing.assert_array_equal(t.numpy(), np.full(shape, value, dtype))


@pytest.mark.parametrize("make", [eager.empty, eager.rand, eager.randn])
def test_empty_rand_randn_shapes_and_like(make):
    t = make(3, 0, 2, dtype=eager.float64)
    assert (tuple(t.shape), t.dtype) == ((3, 0, 2), eager.float64)
    like = {eager.empty: eager.empty_like, eager.rand: eager.rand_like,
            eager.randn: eager.randn_like}[make](eager.zeros(2, 5, dtype=eager.float16))
    assert (tuple(like.shape), like.dtype) == ((2, 5), eager.float16)


ARANGES = [(5,), (1, 2.5, 0.5), (0, 1, 0.1), (10, 0, -3), (-1.5, 1), (0, 0), (1, 10, 4),
           (0.0, 1.0, 1 / 3), (-3, -7, -1.5)]


@pytest.mark.parametrize("args", ARANGES, ids=repr)
def test_arange_matches_numpy(args):
    t = eager.arange(*args)
    floats = any(isinstance(a, float) for a in args)
    assert t.dtype is (eager.float32 if floats else eager.int64)
    np.testing.assert_allclose(t.numpy(), np.arange(*args), rtol=1e-6)


@pytest.mark.parametrize("args", ARANGES, ids=repr)
def test_arange_matches_torch(args):
    torch = require_torch()
    want = torch.arange(*args)
    got = eager.arange(*args)
    assert dtype_name(got.dtype) == dtype_name(want.dtype)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_arange_with_dtype():
    assert eager.arange(4, dtype=eager.float64).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert eager.arange(0.5, 3, dtype=eager.int32).dtype is eager.int32


@pytest.mark.parametrize("start, end, steps", [(0, 1, 5), (-1, 1, 1), (0, 1, 0), (2, -3, 7)])
def test_linspace_matches_numpy(start, end, steps):
    t = eager.linspace(start, end, steps)
    assert t.dtype is eager.float32
    np.testing.assert_allclose(t.numpy(), np.linspace(start, end, steps), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("make", [lambda: eager.rand(50), lambda: eager.randn(4, 5),
                                  lambda: eager.randint(0, 10, (20,)), lambda: eager.randperm(9)])
def test_manual_seed_makes_random_factories_reproducible(make):
    eager.manual_seed(0)
    first = make().numpy().copy()
    second = make().numpy().copy()
    eager.manual_seed(0)
    np.testing.assert_array_equal(make().numpy(), first)
    assert not np.array_equal(second, first)


def test_random_values_have_the_right_distribution():
    eager.manual_seed(1234)
    u, n = eager.rand(20000).numpy(), eager.randn(20000).numpy()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
    assert abs(n.mean()) < 0.03 and abs(n.std() - 1) < 0.03
    assert sorted(eager.randperm(7).tolist()) == list(range(7))
    r = eager.randint(-3, 4, (1000,)).numpy()
    assert r.min() == -3 and r.max() == 3


# sharing memory with numpy -----------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bool", "int32", "int64", "float16", "float32", "float64"])
def test_from_numpy_shares_memory_both_ways(dtype):
    a = np.zeros((2, 3), dtype)
    t = eager.from_numpy(a)
    assert t.dtype.name == dtype
    a[0, 1] = 1
    assert t[0, 1].item() == 1
    t[1, 2] = 1
    assert a[1, 2] == 1


def test_from_numpy_of_a_strided_array_shares_memory():
    a = np.arange(12.0).reshape(3, 4)
    t = eager.from_numpy(a[:, ::2])
    assert t.stride() == (4, 2)
    t.mul_(-1)
    np.testing.assert_array_equal(a[:, ::2], -np.arange(12.0).reshape(3, 4)[:, ::2])
    np.testing.assert_array_equal(a[:, 1::2], np.arange(12.0).reshape(3, 4)[:, 1::2])


def test_from_numpy_rejects_unsupported_dtypes():
    from eager._missing import NotSupportedYet
    with pytest.raises(NotSupportedYet, match="uint16"):  # named, no kernels yet
        eager.from_numpy(np.zeros(2, np.uint16))
    with pytest.raises(TypeError, match="object"):
        eager.from_numpy(np.zeros(2, object))


def test_numpy_shares_memory_both_ways():
    t = eager.zeros(2, 3)
    n = t.numpy()
    n[0, 0] = 5
    assert t[0, 0].item() == 5
    t.add_(1)
    assert n[1, 2] == 1
    view = t.t()[1:]
    view.numpy()[0, 0] = -7  # a non-contiguous view's array writes the base too
    assert t[0, 1].item() == -7


@pytest.mark.parametrize("t, value", [
    (eager.tensor([[1, 2], [3, 4]]), [[1, 2], [3, 4]]), (eager.tensor(2.5), 2.5),
    (eager.tensor([True]), [True]), (eager.zeros(0, 2), []), (eager.tensor(3), 3),
], ids=range(5))
def test_tolist(t, value):
    assert t.tolist() == value
    assert type(t.tolist()) is type(value)


@pytest.mark.parametrize("dtype, kind", [(eager.int64, int), (eager.int32, int),
                                         (eager.float32, float), (eager.float16, float),
                                         (eager.bool, bool)])
def test_item_gives_a_python_number(dtype, kind):
    value = eager.ones(1, 1, dtype=dtype).item()
    assert type(value) is kind and value == 1
    assert math.isclose(float(eager.tensor([[0.25]])), 0.25)


# repr ---------------------------------------------------------------------------------------
REPRS = [  # each spelled the same for eager and torch
    lambda lib: lib.tensor([1, 2, 3]),
    lambda lib: lib.tensor([[1.5, 2.25], [3.0, -4.125]]),
    lambda lib: lib.tensor([1.0, 2.0]),
    lambda lib: lib.tensor([[1.0, -20.0], [300.0, 4.0]]),
    lambda lib: lib.tensor([True, False]),
    lambda lib: lib.tensor(3.5),
    lambda lib: lib.tensor(7),
    lambda lib: lib.tensor(True),
    lambda lib: lib.tensor([]),
    lambda lib: lib.zeros(0, 3),
    lambda lib: lib.zeros(0, dtype=lib.int64),
    lambda lib: lib.tensor([1, 2], dtype=lib.int32),
    lambda lib: lib.tensor([1.5, 2.0], dtype=lib.float64),
    lambda lib: lib.zeros(2, 2, dtype=lib.float16),
    lambda lib: lib.tensor([1.0, 2.0], requires_grad=True),
    lambda lib: lib.tensor([1.0, 2.0], requires_grad=True) * 2,
    lambda lib: lib.tensor([0.001, 1000.0]),
    lambda lib: lib.tensor([1e-5, 1.0]),
    lambda lib: lib.tensor([123456789.0, 1.0]),
    lambda lib: lib.tensor([float("nan"), float("inf"), -float("inf"), 1.5]),
    lambda lib: lib.tensor([[[1, 2], [3, 4]], [[5, 6], [7, 8]]]),
    lambda lib: lib.tensor([-0.0, 0.5]),
    lambda lib: lib.arange(12.0).reshape(3, 4) / 7,
    lambda lib: lib.empty(2, 3, device="meta"),
    lambda lib: lib.empty(2, dtype=lib.int32, device="meta"),
    lambda lib: lib.zeros(0, dtype=lib.bool),
    lambda lib: lib.zeros(2, 0, dtype=lib.float16),
    lambda lib: lib.tensor([[True, False]]),
    lambda lib: lib.tensor([1, -2000, 30]),
    lambda lib: lib.tensor([1.0, 2000.0]),
    lambda lib: lib.tensor([0.0, -0.0]),
    lambda lib: lib.arange(30.0),  # wraps at 80 columns
    lambda lib: lib.arange(2000.0),  # summarised
    lambda lib: lib.arange(3000).reshape(3, 1000),
    lambda lib: lib.arange(24.0).reshape(2, 3, 4) - 11.5,
    lambda lib: lib.tensor([0.1, 0.25], dtype=lib.float16),
    lambda lib: lib.arange(40.0).reshape(2, 20).requires_grad_(),  # suffix on its own line
]


@pytest.mark.parametrize("make", REPRS, ids=range(len(REPRS)))
def test_repr_matches_torch(make):
    torch = require_torch()
    assert repr(make(eager)) == repr(make(torch)).replace("torch.", "eager.")
