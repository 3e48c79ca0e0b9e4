"""PyTorch semantics that public programs (pytorch/examples, torchvision, makemore, HF
transformers) rely on, each compared with PyTorch: copies where PyTorch copies, dtype
promotion of the bitwise operators, membership and isin, and the smaller Tensor
methods."""
import contextlib
import warnings

import numpy as np
import pytest

import eager
from ir.ops import TENSORS_ONLY
from torch_parity import require_torch

RNG = np.random.default_rng(30)


def _pair(torch, array, requires_grad=False):
    return (eager.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


# repeat, tile, repeat_interleave: a new tensor, never a view ----------------------------
REPEATS = {
    "repeat-new-leading-dim": lambda x: x.repeat(2, 1, 1),
    "repeat-ones": lambda x: x.repeat(1, 1),
    "repeat-columns": lambda x: x.repeat(1, 3),
    "tile-ones": lambda x: x.tile((1,)),
    "repeat_interleave-once": lambda x: x.repeat_interleave(1, dim=0),
    "repeat_interleave-twice": lambda x: x.repeat_interleave(2, dim=1),
}


@pytest.mark.parametrize("name", REPEATS)
def test_repeat_copies_as_pytorch_does_so_an_in_place_op_on_it_works(name):
    torch = require_torch()
    fn = REPEATS[name]
    a = RNG.standard_normal((2, 3))
    (x, tx), (xg, txg) = _pair(torch, a), _pair(torch, a, requires_grad=True)
    y, ty = fn(x), fn(tx)
    assert y.stride() == ty.stride()
    y.mul_(2.0)  # fast_neural_style's normalize_batch divides its repeat in place
    np.testing.assert_array_equal(x.numpy(), a)  # the input is untouched
    np.testing.assert_allclose(y.numpy(), ty.mul_(2.0).numpy())
    w = RNG.standard_normal(tuple(ty.shape))
    fn(xg).mul_(1.0).backward(eager.tensor(w))
    fn(txg).mul_(1.0).backward(torch.tensor(w))
    np.testing.assert_allclose(xg.grad.numpy(), txg.grad.numpy())


def test_a_reshape_that_copies_is_no_view_so_it_can_be_written_in_place_with_gradients():
    torch = require_torch()
    a = RNG.standard_normal((2, 3))
    (x, tx) = _pair(torch, a, requires_grad=True)
    y, ty = x.t().reshape(6), tx.t().reshape(6)
    assert ty._base is None
    y.mul_(3.0).sum().backward()
    ty.mul_(3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


# membership: `in`, isin ------------------------------------------------------------------
def test_in_asks_whether_some_element_equals_the_value_as_pytorch_does():
    torch = require_torch()
    x, tx = _pair(torch, np.array([[1, 2], [3, 4]]))
    for value in (3, 5, 2.0, 2.5, True):
        assert (value in x) == (value in tx)
    assert (eager.tensor([1, 2]) in x) == (torch.tensor([1, 2]) in tx)
    assert (eager.tensor(3) in x) == (torch.tensor(3) in tx)
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar, but you passed in "
                                           "a <class 'str'>"):
        "a" in x  # noqa: B015


ISIN = {
    "ints-in-floats": (np.array([1, 2, 3, 2]), np.array([2.0, 3.5])),
    "floats-with-nan": (np.array([[np.nan, 1.0], [0.5, -0.0]]), np.array([np.nan, 0.0, 1.0])),
    "empty-test-set": (np.array([1, 2]), np.zeros(0, np.int64)),
    "number-in-tensor": (2, np.array([[1, 2]])),
    "tensor-in-number": (np.array([1, 2, 2]), 2),
}


@pytest.mark.parametrize("name", ISIN)
@pytest.mark.parametrize("invert", [False, True])
def test_isin_matches_pytorch(name, invert):
    torch = require_torch()
    a, b = ISIN[name]

    def lift(lib, v):
        return lib.tensor(v) if isinstance(v, np.ndarray) else v
    got = eager.isin(lift(eager, a), lift(eager, b), invert=invert)
    want = torch.isin(lift(torch, a), lift(torch, b), invert=invert)
    assert got.dtype is eager.bool and got.tolist() == want.tolist()


def test_isin_needs_a_tensor():
    with pytest.raises(TypeError, match="expected at least one Tensor argument"):
        eager.isin(1, 2)


# small methods and functions -----------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "bool"])
def test_is_floating_point_as_a_function_and_a_method(dtype):
    torch = require_torch()
    x, tx = eager.zeros(2, dtype=getattr(eager, dtype)), torch.zeros(2, dtype=getattr(torch, dtype))
    assert eager.is_floating_point(x) == torch.is_floating_point(tx) == x.is_floating_point()


@pytest.mark.parametrize("fmt, shape, permuted", [
    ("contiguous_format", (2, 3, 4), (1, 0, 2)), ("preserve_format", (3, 4), None),
    ("channels_last", (2, 3, 4, 5), None), ("channels_last_3d", (2, 3, 2, 4, 5), None),
    ("channels_last", (2, 3, 4, 5), (0, 1, 3, 2))])
def test_clone_with_a_memory_format_gives_pytorchs_strides_values_and_gradients(fmt, shape,
                                                                                  permuted):
    torch = require_torch()
    a = RNG.standard_normal(shape)
    x, tx = _pair(torch, a, requires_grad=True)
    src, tsrc = (x, tx) if permuted is None else (x.permute(*permuted), tx.permute(*permuted))
    y = eager.clone(src, memory_format=getattr(eager, fmt))
    ty = tsrc.clone(memory_format=getattr(torch, fmt))
    if fmt != "preserve_format":  # (kiln's copies are row-major: see eager/memory_formats.py)
        assert y.stride() == ty.stride()
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    w = RNG.standard_normal(tuple(ty.shape))
    y.mul_(1.0).backward(eager.tensor(w))  # a clone is no view: it may be written in place
    ty.mul_(1.0).backward(torch.tensor(w))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_clone_refuses_a_memory_format_it_cannot_apply():
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last format"):
        eager.ones(2, 3).clone(memory_format=eager.channels_last)
    with pytest.raises(TypeError, match="'memory_format' must be torch.memory_format"):
        eager.ones(2, 3).clone(memory_format=eager.float32)


def test_erfinv_and_its_in_place_form_match_pytorch_with_gradients():
    torch = require_torch()
    a = np.array([-1.0, -0.999, -0.7, -0.3, 0.0, 1e-30, 0.5, 0.7, 0.71, 0.99, 1.0, 1.5, np.nan])
    for dtype in ("float32", "float64"):
        x = eager.tensor(a, dtype=getattr(eager, dtype))
        tx = torch.tensor(a, dtype=getattr(torch, dtype))
        np.testing.assert_allclose(eager.erfinv(x).numpy(), torch.erfinv(tx).numpy(),
                                   rtol=1e-6 if dtype == "float32" else 1e-12)
        np.testing.assert_allclose(x.clone().erfinv_().numpy(), tx.clone().erfinv_().numpy(),
                                   rtol=1e-6 if dtype == "float32" else 1e-12)
    assert eager.tensor([0, 1]).erfinv().tolist() == torch.tensor([0, 1]).erfinv().tolist()
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        eager.tensor([0]).erfinv_()
    x, tx = _pair(torch, a[2:10], requires_grad=True)
    (eager.erfinv(x) * 2).sum().backward()
    (torch.erfinv(tx) * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10)
    w = x.detach().clone().requires_grad_(True)
    y = w * 1.0
    y.erfinv_()
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tx.grad.numpy() / 2, rtol=1e-10)


# indexing with ranges and lists -----------------------------------------------------------
INDICES = {
    "range": range(3), "stepped-range": range(0, 4, 2), "empty-range": range(0),
    "range-on-dim-1": (slice(None), range(2)), "two-ranges": (range(2), range(1, 3)),
    "list": [0, 2], "repeated-list-on-dim-1": (slice(None), [1, 1]), "negative-list": [-1, 0],
    "empty-list": [], "bool-list": [True, False, True, False], "list-after-ellipsis":
    (Ellipsis, [5, 0]), "int-and-list": (0, [1, 2]), "numpy-ints": [np.int64(1), 2],
}
SEQUENCES_AS_TUPLES = {  # NumPy's old rule, which PyTorch keeps with a warning
    "nested-lists": [[0, 1], [1, 0]], "int-and-slice": [0, slice(None)],
}


@contextlib.contextmanager
def _no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
@pytest.mark.parametrize("name", [*INDICES, *SEQUENCES_AS_TUPLES])
def test_indexing_with_ranges_and_lists_gets_and_sets_as_pytorch(name):
    torch = require_torch()
    idx = {**INDICES, **SEQUENCES_AS_TUPLES}[name]
    a = RNG.standard_normal((4, 6))
    x, tx = _pair(torch, a, requires_grad=True)
    with pytest.warns(UserWarning, match="non-tuple sequence") if name in SEQUENCES_AS_TUPLES \
            else _no_warning():
        y = x[idx]
    ty = tx[idx]
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    w = RNG.standard_normal(tuple(ty.shape))
    y.backward(eager.tensor(w))
    ty.backward(torch.tensor(w))
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    (z, tz), value = _pair(torch, a), RNG.standard_normal(tuple(ty.shape))
    z[idx], tz[idx] = eager.tensor(value), torch.tensor(value)
    np.testing.assert_array_equal(z.numpy(), tz.numpy())
    z[idx], tz[idx] = -1.0, -1.0
    np.testing.assert_array_equal(z.numpy(), tz.numpy())



# a Python number where PyTorch takes only a tensor ---------------------------------------
@pytest.mark.parametrize("op", sorted(TENSORS_ONLY, key=lambda op: op.name),
                         ids=lambda op: op.schema.name)
def test_a_number_for_an_op_without_a_scalar_form_is_a_type_error_as_in_pytorch(op):
    torch = require_torch()
    name = op.schema.name
    x, t = _pair(torch, np.ones((2, 2), np.float32))
    with pytest.raises(TypeError):
        getattr(t, name)(2.0)
    with pytest.raises(TypeError, match=f"{name}\\(\\): argument '\\w+' must be Tensor, "
                                        "not float"):
        getattr(x, name)(2.0)
    if not name.endswith("_"):
        with pytest.raises(TypeError, match="must be Tensor, not int"):
            getattr(eager, name)(2, x)


def test_ops_with_a_scalar_form_still_take_numbers_on_either_side():
    x = eager.tensor([1.0, 2.0])
    assert (x + 1).tolist() == [2.0, 3.0] and (1 - x).tolist() == [0.0, -1.0]
    assert eager.add(x, 2).tolist() == [3.0, 4.0] and x.pow(2).tolist() == [1.0, 4.0]
    assert x.copysign(-1.0).tolist() == [-1.0, -2.0] and x.eq_(2.0).tolist() == [0.0, 1.0]
