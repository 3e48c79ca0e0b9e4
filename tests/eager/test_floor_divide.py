"""// and % (floor_divide, remainder), div's rounding modes and clamp's tensor bounds,
against PyTorch: negative integers, zero divisors, special floats, Python numbers on
either side, in-place forms, broadcasting and gradients."""
from __future__ import annotations

import math

import numpy as np
import pytest

import eager
from eager.autograd import gradcheck
from tests.eager.torch_parity import require_torch

torch = require_torch()

SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, -1.0, 0.1, -2.5, 7.0]


def _same(got, want):
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.float().numpy() if got.dtype.is_floating_point else
                                  got.numpy(), want.float().numpy() if want.is_floating_point()
                                  else want.numpy())
    if got.dtype.is_floating_point:  # the sign of a zero too (a NaN's is no answer)
        a, b = got.float().numpy(), want.float().numpy()
        assert np.array_equal(np.signbit(a) & ~np.isnan(a), np.signbit(b) & ~np.isnan(b))


def _both(fn, *arrays, **kwargs):
    """fn's result in kiln and in PyTorch, over the same arrays and Python numbers."""
    def make(lib, a):
        return lib.tensor(a) if isinstance(a, np.ndarray) else a
    return fn(eager, *(make(eager, a) for a in arrays), **kwargs), \
        fn(torch, *(make(torch, a) for a in arrays), **kwargs)


OPERATORS = {
    "//": lambda lib, a, b: a // b, "%": lambda lib, a, b: a % b,
    "floor_divide": lambda lib, a, b: lib.floor_divide(a, b),
    "div-floor": lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
    "div-trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "divide-trunc": lambda lib, a, b: a.divide(b, rounding_mode="trunc"),
    "true_divide": lambda lib, a, b: a.true_divide(b)}


@pytest.mark.parametrize("name", OPERATORS)
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
def test_integers_round_as_pytorch_with_negative_operands(name, dtype):
    a = np.array([7, -7, 7, -7, 0, 5, -128 if dtype == "int8" else 9]).astype(dtype)
    b = np.array([2, 2, -2, -2, 3, 5, -1]).astype(dtype)  # (uint8 wraps: 249, 255)
    _same(*_both(OPERATORS[name], a, b))


@pytest.mark.parametrize("name", OPERATORS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_floats_at_special_values_give_what_pytorch_gives(name, dtype):
    pairs = [(x, y) for x in SPECIALS for y in SPECIALS]
    a = np.array([x for x, _ in pairs], np.float64)
    b = np.array([y for _, y in pairs], np.float64)
    got = OPERATORS[name](eager, eager.tensor(a).to(getattr(eager, dtype)),
                          eager.tensor(b).to(getattr(eager, dtype)))
    want = OPERATORS[name](torch, torch.tensor(a).to(getattr(torch, dtype)),
                           torch.tensor(b).to(getattr(torch, dtype)))
    _same(got, want)


@pytest.mark.parametrize("name", ["//", "%", "floor_divide", "div-floor", "div-trunc"])
def test_integer_division_by_zero_raises_pytorchs_error(name):
    for lib in (eager, torch):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            OPERATORS[name](lib, lib.tensor([5, -3]), lib.tensor([2, 0]))


@pytest.mark.parametrize("name", ["//", "%", "div-floor", "div-trunc"])
@pytest.mark.parametrize("number", [2, -3, 1.5, -0.75])
def test_a_python_number_on_either_side_promotes_as_a_scalar(name, number):
    for values in (np.array([7, -8, 9]), np.array([7.5, -8.25, 0.0], np.float32)):
        _same(*_both(lambda lib, a: OPERATORS[name](lib, a, number), values))
        if name in ("//", "%"):
            _same(*_both(lambda lib, a: OPERATORS[name](lib, number, a), values + 3))


def test_broadcasting():
    a, b = np.arange(-6, 6).reshape(3, 4), np.array([[3], [-2], [5]])
    for name in ("//", "%", "div-floor", "div-trunc"):
        _same(*_both(OPERATORS[name], a, b))
        _same(*_both(OPERATORS[name], a.astype(np.float32), b.T[:, :1]))


INPLACE = {
    "//=": lambda lib, a, b: a.__ifloordiv__(b), "%=": lambda lib, a, b: a.__imod__(b),
    "floor_divide_": lambda lib, a, b: a.floor_divide_(b),
    "div_-floor": lambda lib, a, b: a.div_(b, rounding_mode="floor"),
    "div_-trunc": lambda lib, a, b: a.div_(b, rounding_mode="trunc"),
    "divide_-trunc": lambda lib, a, b: a.divide_(b, rounding_mode="trunc")}


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_forms_write_self_and_keep_its_type(name):
    for a, b in ((np.array([7, -7, 9]), 2), (np.array([7.5, -7.5, 1.0], np.float32),
                                              np.array([2.0, 2.0, 0.1], np.float32))):
        x, y = eager.tensor(a), torch.tensor(a)
        got = INPLACE[name](eager, x, eager.tensor(b) if isinstance(b, np.ndarray) else b)
        want = INPLACE[name](torch, y, torch.tensor(b) if isinstance(b, np.ndarray) else b)
        assert got is x
        _same(x, y)
        _same(got, want)


def test_an_integer_tensor_cannot_take_a_float_result_in_place():
    for lib in (eager, torch):
        with pytest.raises(RuntimeError, match="can't be cast"):
            lib.tensor([3, 4]).floor_divide_(2.5)
        with pytest.raises(RuntimeError, match="can't be cast"):
            lib.tensor([3, 4]).div_(2)


def test_bad_rounding_modes_and_bools_raise_as_pytorch():
    for lib in (eager, torch):
        with pytest.raises(RuntimeError, match="rounding_mode to be one of None, 'trunc', or "
                                               "'floor' but found 'round'"):
            lib.div(lib.tensor([1.0]), 2, rounding_mode="round")
        with pytest.raises(NotImplementedError, match="div_floor_cpu"):
            lib.tensor([True]) // lib.tensor([True])
        with pytest.raises(NotImplementedError, match="div_trunc_cpu"):
            lib.div(lib.tensor([True]), lib.tensor([True]), rounding_mode="trunc")


def test_gradient_nodes_are_pytorchs():
    for lib in (eager, torch):
        x = lib.tensor([5.0, -3.0], requires_grad=True)
        two = lib.tensor([2.0, 2.0])
        names = [type(y.grad_fn).__name__ for y in (
            lib.div(x, 2.0, rounding_mode="floor"), lib.div(x, 2.0, rounding_mode="trunc"),
            x // 2, x % 2, lib.clamp(x, lib.tensor([0.0, 0.0]), lib.tensor([1.0, 1.0])),
            lib.div(x, two, rounding_mode=None), x.divide(two, rounding_mode=None),
            lib.div(x, two))]
        # (a rounding mode given, None included, is div.Tensor_mode's overload)
        assert names == ["DivBackward2", "DivBackward2", "NotImplemented",
                         "RemainderBackward0", "ClampBackward0", "DivBackward2",
                         "DivBackward2", "DivBackward0"], lib


def test_rounded_division_has_zero_gradients_and_floor_divide_none():
    for lib in (eager, torch):
        x = lib.tensor([5.0, -3.0], requires_grad=True)
        y = lib.tensor([2.0, 4.0], requires_grad=True)
        lib.div(x, y, rounding_mode="floor").sum().backward()
        assert x.grad.tolist() == [0.0, 0.0] and y.grad.tolist() == [0.0, 0.0]
        with pytest.raises(RuntimeError, match="derivative for aten::floor_divide is not "
                                               "implemented"):
            (x // y).sum().backward()


def test_true_division_through_div_rounding_mode_none_is_differentiable():
    x = eager.tensor([[1.5, -2.0, 0.7]], dtype=eager.float64, requires_grad=True)
    y = eager.tensor([[0.5], [2.0]], dtype=eager.float64, requires_grad=True)
    assert gradcheck(lambda a, b: eager.div(a, b, rounding_mode=None), (x, y))


# clamp with tensor bounds ---------------------------------------------------------------
CLAMPS = {
    "both": lambda lib, x, lo, hi: lib.clamp(x, lo, hi),
    "min": lambda lib, x, lo, hi: x.clamp(min=lo), "max": lambda lib, x, lo, hi: x.clamp(max=hi),
    "clip": lambda lib, x, lo, hi: lib.clip(x, lo, hi),
    "clamp_min": lambda lib, x, lo, hi: lib.clamp_min(x, lo),
    "clamp_max": lambda lib, x, lo, hi: x.clamp_max(hi)}


@pytest.mark.parametrize("name", CLAMPS)
def test_clamp_takes_broadcast_tensor_bounds(name):
    x = np.array([[-2.0, -0.25, 0.0, 0.25, 2.0, math.nan]] * 2, np.float32)
    lo = np.array([[-1.0], [0.5]], np.float32)
    hi = np.array([1.0, 1.0, -0.0, 0.0, 1.5, 1.0], np.float32)
    _same(*_both(CLAMPS[name], x, lo, hi))


def test_clamp_promotes_over_the_tensor_and_both_bounds():
    cases = [(np.array([1, 5, 9]), np.array([2.5]), np.array([7])),
             (np.array([1, 5, 9], np.uint8), np.array([2, 2, 2]), np.array([8, 8, 8])),
             (np.array([1.0, 5, 9], np.float32), np.array([2, 2, 2]), np.array([4, 4, 4])),
             (np.array([1, 5, 9], np.int8), np.array(3, np.int64), np.array([4, 4, 4]))]
    for x, lo, hi in cases:
        _same(*_both(CLAMPS["both"], x, lo, hi))
        _same(*_both(CLAMPS["min"], x, lo, hi))


def test_clamp_refuses_a_tensor_bound_beside_a_number_as_pytorch():
    for lib in (eager, torch):
        x = lib.tensor([0.0, 1.0, 2.0])
        with pytest.raises(TypeError, match=r"clamp\(\) received an invalid combination of "
                                            r"arguments - got \(Tensor, Tensor, float\)"):
            lib.clamp(x, lib.zeros(3), 0.5)
        with pytest.raises(TypeError, match=r"invalid combination of arguments - got \(.*"
                                            r"int, Tensor\)"):
            x.clamp(0, lib.ones(3))


def test_clamp_in_place_with_tensor_bounds():
    for lib in (eager, torch):
        x = lib.tensor([0.0, 1.0, 2.0, 3.0])
        assert x.clamp_(lib.tensor([1.0, 1.0, 1.0, 1.0]), lib.tensor(2.5)) is x
        assert x.tolist() == [1.0, 1.0, 2.0, 2.5]
        with pytest.raises(RuntimeError, match="can't be cast"):
            lib.tensor([1, 2]).clamp_(lib.tensor([1.5]))


def test_clamp_gradients_are_pytorchs_at_ties_and_crossed_bounds():
    x = [0.0, 1.0, 1.5, 2.0, 3.0, 0.5]
    bounds = [([1.0] * 6, [2.0] * 6), ([2.0] * 6, [1.0] * 6), ([1.0] * 6, [1.0] * 6)]
    for lo, hi in bounds:
        grads = []
        for lib in (eager, torch):
            ts = [lib.tensor(v, requires_grad=True) for v in (x, lo, hi)]
            lib.clamp(*ts).backward(lib.arange(1.0, 7.0))
            grads.append([t.grad.tolist() for t in ts])
        assert grads[0] == grads[1], (lo, hi)


def test_clamp_gradient_sums_over_broadcast_bounds():
    x = eager.tensor(np.linspace(-1, 1, 12).reshape(3, 4) + 0.01, requires_grad=True)
    lo = eager.tensor([-0.5, -0.6, -0.7, -0.8], dtype=eager.float64, requires_grad=True)
    hi = eager.tensor([[0.3], [0.4], [0.5]], dtype=eager.float64, requires_grad=True)
    assert gradcheck(eager.clamp, (x.double().detach().requires_grad_(), lo, hi))
