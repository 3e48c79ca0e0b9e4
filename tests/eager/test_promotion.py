"""Type promotion: tensor-tensor, tensor-with-zero-dim-tensor and tensor-with-Python-number
over the ten dtypes with kernels, compared to PyTorch; then the rules that hold without
PyTorch; then every op of the op table compared to PyTorch in result dtype, shape and
value, in the dtypes it runs in and in the narrow ones (bfloat16, int8, int16, uint8)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import eager
import op_table
import op_table_shape
from op_cases import (ALL, EVERY, all_cases, assert_matches, call, narrow_cases, samples_of,
                      to_eager, to_torch)
from torch_parity import dtype_name, require_torch, torch_to_numpy

PYTHON_NUMBERS = [True, 3, -2.5]


def operand(lib, kind: str, dtype: str):
    """A tensor of `dtype` with dims (`kind='dim'`) or without (`'zero'`)."""
    data = np.array([3, 0, -2]) if kind == "dim" else np.array(-3)
    return lib.tensor(data.astype(dtype).tolist(), dtype=getattr(lib, dtype))


BINARY_CALLS = {  # each spelled the same for eager and torch
    "add": lambda lib, x, y: x + y,
    "sub": lambda lib, x, y: lib.sub(x, y),
    "mul": lambda lib, x, y: x * y,
    "div": lambda lib, x, y: x / y,
    "pow": lambda lib, x, y: lib.pow(x, y),
    "maximum": lambda lib, x, y: lib.maximum(x, y),
    "lt": lambda lib, x, y: x < y,
    "logical_and": lambda lib, x, y: lib.logical_and(x, y),
    "logical_or": lambda lib, x, y: lib.logical_or(x, y),
    "logical_xor": lambda lib, x, y: lib.logical_xor(x, y),
    "and": lambda lib, x, y: x & y,  # int64 & bool is int64 (transformers' generate)
    "or": lambda lib, x, y: x | y,
    "xor": lambda lib, x, y: x ^ y,
    "bitwise_and": lambda lib, x, y: lib.bitwise_and(x, y),
    "iand": lambda lib, x, y: x.clone().bitwise_and_(y),
    "ior": lambda lib, x, y: x.clone().__ior__(y),
    "where": lambda lib, x, y: lib.where(x > 0, x, y),
    "cat": lambda lib, x, y: lib.cat([x, y]),
    "add_": lambda lib, x, y: x.clone().add_(y),
}


def outcome(fn, lib, x, y) -> str:
    """The result dtype's name, or 'error' when the call raises."""
    try:
        return dtype_name(fn(lib, x, y).dtype)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return "error"


def result_values(fn, lib, x, y):
    """The result as float64 values, or None when the call raises."""
    try:
        return fn(lib, x, y).double().numpy()  # (torch's numpy() takes no bfloat16)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None


@pytest.mark.parametrize("kinds", [("dim", "dim"), ("dim", "zero"), ("zero", "dim"),
                                   ("zero", "zero")])
@pytest.mark.parametrize("a, b", list(itertools.product(EVERY, EVERY)))
def test_tensor_tensor_promotion_matches_torch(a, b, kinds):
    torch = require_torch()
    x, y = operand(eager, kinds[0], a), operand(eager, kinds[1], b)
    tx, ty = operand(torch, kinds[0], a), operand(torch, kinds[1], b)
    assert dtype_name(eager.result_type(x, y)) == dtype_name(torch.result_type(tx, ty))
    got = {name: outcome(fn, eager, x, y) for name, fn in BINARY_CALLS.items()}
    want = {name: outcome(fn, torch, tx, ty) for name, fn in BINARY_CALLS.items()}
    assert got == want
    for name, fn in BINARY_CALLS.items():  # mixed-type arithmetic gives torch's values too
        if want[name] != "error":
            np.testing.assert_allclose(result_values(fn, eager, x, y),
                                       result_values(fn, torch, tx, ty),
                                       rtol=1e-3, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("number", PYTHON_NUMBERS, ids=repr)
@pytest.mark.parametrize("kind", ["dim", "zero"])
@pytest.mark.parametrize("a", EVERY)
def test_tensor_number_promotion_matches_torch(a, kind, number):
    torch = require_torch()
    x, tx = operand(eager, kind, a), operand(torch, kind, a)
    assert dtype_name(eager.result_type(x, number)) == dtype_name(torch.result_type(tx, number))
    assert dtype_name((x * number).dtype) == dtype_name((tx * number).dtype)
    assert dtype_name((number * x).dtype) == dtype_name((number * tx).dtype)
    assert dtype_name(eager.div(x, number).dtype) == dtype_name(torch.div(tx, number).dtype)
    assert dtype_name((x == number).dtype) == "bool"
    for fn in (lambda lib, t, n: t & n, lambda lib, t, n: n | t, lambda lib, t, n: t ^ n):
        assert outcome(fn, eager, x, number) == outcome(fn, torch, tx, number)
    if not isinstance(number, bool):  # clamp takes part in promotion too
        assert outcome(lambda lib, t, n: lib.clamp(t, n), eager, x, number) == \
            outcome(lambda lib, t, n: lib.clamp(t, n), torch, tx, number)
        assert outcome(lambda lib, t, n: t.clone().clamp_(None, n), eager, x, number) == \
            outcome(lambda lib, t, n: t.clone().clamp_(None, n), torch, tx, number)


@pytest.mark.parametrize("a", EVERY)
def test_bitwise_not_matches_torch(a):
    torch = require_torch()
    x, tx = operand(eager, "dim", a), operand(torch, "dim", a)
    for fn in (lambda lib, t, _: ~t, lambda lib, t, _: lib.bitwise_not(t),
               lambda lib, t, _: t.clone().bitwise_not_()):
        assert outcome(fn, eager, x, None) == outcome(fn, torch, tx, None)
        if outcome(fn, torch, tx, None) != "error":
            assert fn(eager, x, None).tolist() == fn(torch, tx, None).tolist()


# rules that need no PyTorch to check -----------------------------------------------------
@pytest.mark.parametrize("dtype", [eager.int32, eager.int64, eager.bool])
def test_true_division_of_integers_gives_the_default_float(dtype):
    a, b = np.array([3, 0, 2]).astype(dtype.name), np.array([2, 1, 1]).astype(dtype.name)
    out = eager.tensor(a) / eager.tensor(b)
    assert out.dtype is eager.float32
    np.testing.assert_allclose(out.numpy(), a / b)


def test_default_dtype_decides_int_division_and_float_scalars():
    previous = eager.get_default_dtype()
    eager.set_default_dtype(eager.float64)
    try:
        assert (eager.tensor([1, 2]) / 2).dtype is eager.float64
        assert (eager.tensor([1, 2]) * 0.5).dtype is eager.float64
        assert eager.tensor([1.5]).dtype is eager.float64
    finally:
        eager.set_default_dtype(previous)
    assert (eager.tensor([1, 2]) * 0.5).dtype is eager.float32


@pytest.mark.parametrize("dtype", [eager.int32, eager.int64])
def test_integer_to_a_negative_integer_power(dtype):
    x = eager.tensor([2, 1, -1, -1, 0], dtype=dtype)
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        x ** -1
    # a tensor exponent may be negative: PyTorch's integer power gives 0 but for 1 and -1
    out = eager.pow(x, eager.tensor([-1, -3, -3, -2, -1], dtype=dtype))
    assert out.dtype is dtype and out.tolist() == [0, 1, -1, 1, 0]
    assert (x ** -1.0).dtype is eager.float32  # a float exponent promotes instead


@pytest.mark.parametrize("low, high, want", [
    # a lower tier only matters when it brings a higher category
    (eager.tensor([1, 2], dtype=eager.int32), eager.tensor(5), eager.int32),
    (eager.tensor([1, 2], dtype=eager.int32), 5, eager.int32),
    (eager.tensor([1, 2], dtype=eager.int32), 2.5, eager.float32),
    (eager.tensor([1.0], dtype=eager.float16), eager.tensor(2.0, dtype=eager.float64),
     eager.float16),
    (eager.tensor([1], dtype=eager.int32), eager.tensor(1.0, dtype=eager.float64),
     eager.float64),
    (eager.tensor([True]), True, eager.bool),
    (eager.tensor([True]), 1, eager.int64),
    (eager.tensor([True]), eager.tensor([1], dtype=eager.int32), eager.int32),
], ids=range(8))
def test_promotion_tiers(low, high, want):
    assert (low + high).dtype is want
    assert (high + low).dtype is want


@pytest.mark.parametrize("dtype", ALL)
def test_comparisons_give_bool_and_sum_of_ints_gives_int64(dtype):
    x = to_eager(np.arange(4).astype(dtype))
    assert (x < 2).dtype is eager.bool
    want = eager.float16 if dtype == "float16" else getattr(eager, dtype) \
        if dtype.startswith("float") else eager.int64
    assert x.sum().dtype is want


# the whole op table against PyTorch ------------------------------------------------------
CASES = op_table.CASES + op_table_shape.CASES


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")  # torch warns of var(x)=0/0
@pytest.mark.parametrize("case, dtype", all_cases(CASES))
def test_op_matches_torch(case, dtype):
    _check_against_torch(case, dtype)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")
@pytest.mark.parametrize("case, dtype", narrow_cases(CASES))
def test_op_matches_torch_in_the_narrow_dtypes(case, dtype):
    """bfloat16 wherever a case runs in float16; int8, int16 and uint8 wherever it runs in
    int32: PyTorch's result dtype, and its values (bfloat16 within one rounding)."""
    _check_against_torch(case, dtype)


def _check_against_torch(case, dtype):
    torch = require_torch()
    for sample in samples_of(case, dtype):
        what = f"{case.name}{sample!r} [{dtype}]"
        expected = torch_to_numpy(call(case, torch, sample, to_torch))
        actual = call(case, eager, sample, to_eager)
        assert_matches(case, actual, expected, what)
        want = [dtype_name(t.dtype) for t in
                (expected if isinstance(expected, list) else [expected])]
        got = [dtype_name(t.dtype) for t in (actual if isinstance(actual, (tuple, list))
                                             else [actual])]
        assert got == want, f"{what}: dtypes {got}, torch gives {want}"
