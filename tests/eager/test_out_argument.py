"""out= on module-level ops (eager/out_argument.py), as PyTorch has it: the result
written into the given tensor, which is returned."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import eager
from tests.eager.torch_parity import require_torch

X = np.arange(6, dtype=np.float64).reshape(2, 3) - 2.5


def _x():
    return eager.tensor(X.astype(np.float32))


@pytest.mark.parametrize("call, expected", [
    (lambda x, out: eager.add(x, x, out=out), 2 * X),
    (lambda x, out: eager.add(x, 1.5, alpha=2, out=out), X + 3),
    (lambda x, out: eager.mul(x, 2, out=out), 2 * X),
    (lambda x, out: eager.exp(x, out=out), np.exp(X)),
    (lambda x, out: eager.where(x > 0, x, 0.0, out=out), np.maximum(X, 0)),
    (lambda x, out: eager.clamp_min(x, 0.0, out=out), np.maximum(X, 0)),
    (lambda x, out: eager.square(x, out=out), X * X),
])
def test_a_pointwise_result_is_written_into_out_and_out_is_returned(call, expected):
    out = eager.full((2, 3), 7.0)
    version = out._version
    assert call(_x(), out) is out
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    assert out._version > version  # a write, as copy_ is


@pytest.mark.parametrize("call, expected", [
    (lambda x, out: eager.sum(x, 1, out=out), X.sum(1)),
    (lambda x, out: eager.mean(x, 0, out=out), X.mean(0)),
    (lambda x, out: eager.matmul(x, x.t(), out=out), X @ X.T),
    (lambda x, out: eager.cat([x, x], 1, out=out), np.concatenate([X, X], 1)),
])
def test_reductions_products_and_joins_take_out(call, expected):
    out = eager.empty(expected.shape)
    assert call(_x(), out) is out
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_out_may_be_an_input():
    x = _x()
    assert eager.mul(x, x, out=x) is x
    np.testing.assert_allclose(x.numpy(), X * X, rtol=1e-6)


def test_a_non_contiguous_out_is_written_through_its_view():
    base = eager.zeros(3, 2)
    out = base.t()
    eager.add(_x(), 1.0, out=out)
    np.testing.assert_allclose(base.numpy(), (X + 1).T, rtol=1e-6)


def test_several_results_go_into_a_tuple_and_keep_their_names():
    values, indices = eager.empty(2), eager.empty(2, dtype=eager.int64)
    got = eager.max(_x(), 1, out=(values, indices))
    assert got.values is values and got.indices is indices
    np.testing.assert_array_equal(values.numpy(), X.max(1).astype(np.float32))
    np.testing.assert_array_equal(indices.numpy(), X.argmax(1))


def test_an_empty_out_is_resized_quietly_and_one_with_elements_with_a_warning():
    out = eager.empty(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eager.add(_x(), 1.0, out=out)
    assert out.shape == (2, 3) and out.stride() == (3, 1)
    np.testing.assert_allclose(out.numpy(), X + 1, rtol=1e-6)
    out = eager.zeros(4)
    with pytest.warns(UserWarning, match=r"resized since it had shape \[4\].*\[2, 3\]") as w:
        eager.add(_x(), 1.0, out=out)
    assert w[0].filename == __file__  # the warning names the caller's line
    np.testing.assert_allclose(out.numpy(), X + 1, rtol=1e-6)


def test_a_result_is_converted_to_outs_dtype_where_the_cast_is_allowed():
    out = eager.empty(2, 3, dtype=eager.float64)
    eager.exp(_x(), out=out)
    np.testing.assert_allclose(out.numpy(), np.exp(X), rtol=1e-6)
    ints = eager.tensor([[1, 2], [3, 4]])
    doubled = eager.empty(2, 2)
    eager.add(ints, ints, out=doubled)
    np.testing.assert_array_equal(doubled.numpy(), [[2, 4], [6, 8]])
    assert doubled.dtype == eager.float32
    flags = eager.full((2, 3), 7.0)
    eager.gt(_x(), 0, out=flags)  # bool into float
    np.testing.assert_array_equal(flags.numpy(), (X > 0).astype(np.float32))


@pytest.mark.parametrize("call, message", [
    (lambda: eager.add(_x(), 1.0, out=eager.empty(2, 3, dtype=eager.int64)),
     r"add\(\): result type Float can't be cast to the desired output type Long"),
    (lambda: eager.add(_x(), 1.0, out=eager.empty(2, 3, dtype=eager.bool)),
     "result type Float can't be cast to the desired output type Bool"),
])
def test_a_cast_pytorch_refuses_is_an_error_naming_the_types(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_out_on_another_device_is_an_error_naming_both():
    with pytest.raises(RuntimeError, match="add\\(\\): Expected out tensor to have device cpu, "
                                           "but got meta instead"):
        eager.add(_x(), 1.0, out=eager.empty(2, 3, device="meta"))


def test_out_with_an_argument_that_requires_grad_is_an_error_in_grad_mode():
    w = eager.ones(2, 3, requires_grad=True)
    out = eager.empty(2, 3)
    with pytest.raises(RuntimeError, match=r"add\(\): functions with out=\.\.\. arguments "
                                           "don't support automatic differentiation"):
        eager.add(w, _x(), out=out)
    with eager.no_grad():
        eager.add(w, _x(), out=out)
    np.testing.assert_allclose(out.numpy(), X + 1, rtol=1e-6)
    assert not out.requires_grad


@pytest.mark.parametrize("out, message", [
    (3, "argument 'out' must be Tensor or a tuple of Tensors, not int"),
    ((), "argument 'out' must be Tensor or a tuple of Tensors, not tuple"),
])
def test_out_that_is_not_a_tensor_is_a_type_error(out, message):
    with pytest.raises(TypeError, match=message):
        eager.add(_x(), 1.0, out=out)


def test_one_out_for_two_results_is_a_type_error():
    with pytest.raises(TypeError, match=r"max\(\): argument 'out' must be 2 Tensors, got 1"):
        eager.max(_x(), 1, out=eager.empty(2))


def test_out_none_is_the_call_without_it():
    np.testing.assert_allclose(eager.add(_x(), 1.0, out=None).numpy(), X + 1, rtol=1e-6)


def test_can_cast_is_pytorchs_table():
    assert eager.can_cast(eager.int64, eager.float32)
    assert eager.can_cast(eager.bool, eager.int32)
    assert eager.can_cast(eager.float64, eager.float16)
    assert not eager.can_cast(eager.float32, eager.int64)
    assert not eager.can_cast(eager.int32, eager.bool)


def test_out_matches_pytorch():
    torch = require_torch()
    for kiln_out, torch_out in ((eager.empty(0), torch.empty(0)),
                                (eager.empty(2, 3, dtype=eager.float64),
                                 torch.empty(2, 3, dtype=torch.float64))):
        eager.add(_x(), _x(), alpha=3, out=kiln_out)
        torch.add(torch.tensor(X, dtype=torch.float32), torch.tensor(X, dtype=torch.float32),
                  alpha=3, out=torch_out)
        assert str(kiln_out.dtype).split(".")[-1] == str(torch_out.dtype).split(".")[-1]
        assert tuple(kiln_out.shape) == tuple(torch_out.shape)
        np.testing.assert_array_equal(kiln_out.numpy(), torch_out.numpy())
    for dt, torch_dt in ((eager.int64, torch.int64), (eager.bool, torch.bool)):
        assert eager.can_cast(eager.float32, dt) == torch.can_cast(torch.float32, torch_dt)
        assert eager.can_cast(dt, eager.float32) == torch.can_cast(torch_dt, torch.float32)


def test_a_compiled_function_may_write_into_out():
    import compiler

    def f(x, out):
        eager.add(x, x, out=out)
        return out * 2
    g = compiler.compile(f)
    for shift in range(3):
        out = eager.zeros(2, 3)
        x = eager.tensor((X + shift).astype(np.float32))
        np.testing.assert_allclose(g(x, out).numpy(), 4 * (X + shift), rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), 2 * (X + shift), rtol=1e-6)
