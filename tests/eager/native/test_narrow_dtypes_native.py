"""Eager's generated pointwise kernels (eager/backends/native/pointwise.py) in bfloat16,
float16, uint8, int8 and int16, bit for bit against eager's numpy kernels: the 16-bit
floats compute in float32 and round once (ties to even, NaN kept quiet with its sign),
integers wrap, casts go as ir.dtypes.cast; over special values, broadcast, transposed,
sliced, odd and empty operands. Float math (exp, sigmoid, ...) is vmath against libm:
within one unit of the 16-bit type, NaN where numpy's is."""
import numpy as np
import pytest

import eager
from eager.backends.native import pointwise as eager_pointwise
from eager.kernels.elementwise import in_common_type
from eager.tensor import wrap_scalar
from ir import dtypes
from ir.ops import Op
from ir.records import RECORDS
from tests.eager.native.narrow_cases import (HALVES, INTEGERS, NARROW, assert_same,
                                             numpy_kernels, special)

EXACT_UNARY = {Op.NEG: eager.neg, Op.ABS: eager.abs, Op.RELU: eager.relu,
               Op.SIGN: eager.sign, Op.FLOOR: eager.floor, Op.CEIL: eager.ceil,
               Op.TRUNC: eager.trunc, Op.ROUND: eager.round}
FLOAT_UNARY = {Op.FRAC: eager.frac, Op.NAN_TO_NUM: eager.nan_to_num,
               Op.SIGNBIT: eager.signbit}
MATH_UNARY = {Op.EXP: eager.exp, Op.SIGMOID: eager.sigmoid, Op.TANH: eager.tanh,
              Op.SQRT: eager.sqrt, Op.LOG: eager.log, Op.GELU: eager.nn.functional.gelu,
              Op.SILU: eager.nn.functional.silu, Op.ERF: eager.erf}
EXACT_BINARY = {Op.ADD: eager.add, Op.SUB: eager.sub, Op.MUL: eager.mul,
                Op.DIV: eager.div, Op.MAXIMUM: eager.maximum, Op.MINIMUM: eager.minimum,
                Op.EQ: eager.eq, Op.LT: eager.lt, Op.GE: eager.ge, Op.NE: eager.ne}
FLOAT_BINARY = {Op.FMOD: eager.fmod, Op.COPYSIGN: eager.copysign}
INT_BINARY = {Op.BITWISE_AND: eager.bitwise_and, Op.BITWISE_XOR: eager.bitwise_xor}


def natively(op: Op, fn, *args, **attrs):
    """(op through eager_pointwise.run itself, as elementwise.py calls it; fn through
    numpy's kernel, the reference)."""
    with numpy_kernels():
        want = fn(*args, **attrs)
    tensors = [a if isinstance(a, eager.Tensor) else wrap_scalar(a) for a in args]
    if want.dtype in dtypes.HALF:  # operands rounded to it first, as the kernel does
        tensors = in_common_type(tensors, want.dtype, RECORDS[op].pointwise.wide_scalar)
    calls = eager_pointwise.calls
    got = eager_pointwise.run(RECORDS[op], tensors, attrs, want._shape, want.dtype)
    assert got is not None and eager_pointwise.calls == calls + 1, "numpy ran it"
    return got, want


def _layouts(a: np.ndarray):
    """(name, tensor of a's values): contiguous, sliced, transposed, broadcast, empty."""
    yield "contiguous", eager.tensor(a)
    wide = np.zeros(2 * a.size, a.dtype)
    wide[::2] = a
    yield "sliced", eager.tensor(wide)[::2]
    square = a[: (a.size // 3) * 3].reshape(3, -1)
    yield "transposed", eager.tensor(np.ascontiguousarray(square.T)).t()
    yield "expanded", eager.tensor(a[:1]).expand(a.size)
    yield "empty", eager.tensor(a[:0])


UNARY_CASES = [(op, dt, 0) for dt in NARROW for op in EXACT_UNARY] + \
    [(op, dt, 0) for dt in HALVES for op in FLOAT_UNARY] + \
    [(op, dt, 1) for dt in HALVES for op in MATH_UNARY]


@pytest.mark.parametrize("op, dtype, ulps", UNARY_CASES, ids=str)
def test_unary_ops_match_numpys_kernels(op, dtype, ulps):
    a = special(dtype, extra=40)
    fn = {**EXACT_UNARY, **FLOAT_UNARY, **MATH_UNARY}[op]
    for name, x in _layouts(a):
        got, want = natively(op, fn, x)
        assert_same(got, want, ulps)


BINARY_CASES = [(op, dt) for dt in NARROW for op in EXACT_BINARY] + \
    [(op, dt) for dt in HALVES for op in FLOAT_BINARY] + \
    [(op, dt) for dt in INTEGERS for op in INT_BINARY]


@pytest.mark.parametrize("op, dtype", BINARY_CASES, ids=str)
def test_binary_ops_over_every_pair_of_special_values(op, dtype):
    """Each special value against each (a column broadcast against a row): rounding ties
    (1 + 2**-8 in bfloat16), overflow to inf, inf - inf, wrap-around, x / 0."""
    fn = {**EXACT_BINARY, **FLOAT_BINARY, **INT_BINARY}[op]
    a = special(dtype)
    column, row = eager.tensor(a[:, None]), eager.tensor(a[None, :])
    got, want = natively(op, fn, column, row)
    assert_same(got, want)
    got, want = natively(op, fn, row.t().contiguous().t(), column.t())  # transposed
    assert_same(got, want)


@pytest.mark.parametrize("dtype", NARROW)
def test_python_numbers_are_made_as_numpys_kernels_make_them(dtype):
    """x * 0.1 multiplies by float32's 0.1 (not bfloat16's) and rounds once, x + 0.1 adds
    bfloat16's 0.1 (PyTorch's rule, elementwise.in_common_type); an integer number wraps
    into the type (int8 + 300 adds 44)."""
    x = eager.tensor(special(dtype, extra=20))
    numbers = (0.1, 3.0, -2.5) if dtype in HALVES else (300, -7, 2)
    for number in numbers:
        for op, fn in ((Op.MUL, eager.mul), (Op.ADD, eager.add), (Op.SUB, eager.sub)):
            assert_same(*natively(op, fn, x, number))
            assert_same(*natively(op, fn, number, x))


@pytest.mark.parametrize("dtype", NARROW)
def test_where_selects_without_rounding_again(dtype):
    a, b = special(dtype, extra=9), special(dtype, extra=9, seed=1)[::-1].copy()
    x, y = eager.tensor(a), eager.tensor(b)
    with numpy_kernels():
        condition = x > y
    assert_same(*natively(Op.WHERE, eager.where, condition, x, y))
    number = 0.3 if dtype in HALVES else 7
    assert_same(*natively(Op.WHERE, eager.where, condition, x, number))


MIXED = [("int8", "uint8"), ("uint8", "int16"), ("int8", "bfloat16"), ("int16", "float16"),
         ("bfloat16", "float16"), ("uint8", "float32"), ("bfloat16", "float64"),
         ("int16", "int64"), ("float16", "int32")]


@pytest.mark.parametrize("first, second", MIXED, ids=str)
def test_mixed_types_promote_and_convert_as_numpys_kernels(first, second):
    """uint8 with int8 computes in int16 (uint8 zero-extended, int8 sign-extended),
    bfloat16 with float16 in float32, an integer with a 16-bit float in that float."""
    def values(dt):
        if dt in NARROW:
            return special(dt, extra=5)
        return np.resize(special("int16", extra=5), 32).astype(dt) * (
            1.5 if dt.startswith("float") else 1)
    a, b = values(first), values(second)
    n = min(a.size, b.size)
    x, y = eager.tensor(a[:n]), eager.tensor(b[:n])
    for op, fn in ((Op.ADD, eager.add), (Op.MUL, eager.mul), (Op.MAXIMUM, eager.maximum)):
        assert_same(*natively(op, fn, x, y))
        assert_same(*natively(op, fn, y, x))


@pytest.mark.parametrize("dtype", HALVES)
def test_eager_ops_from_native_elements_on_run_natively(dtype):
    """The 16-bit floats are offered to the generated kernels as float32 is (gelu from
    NATIVE_ELEMENTS elements on); the result is numpy's, to a unit of the type."""
    x = eager.tensor(special(dtype, extra=3000, seed=3))
    calls = eager_pointwise.calls
    got = eager.nn.functional.gelu(x)
    assert eager_pointwise.calls == calls + 1
    with numpy_kernels():
        want = eager.nn.functional.gelu(x)
    assert_same(got, want, ulps=1)
    calls = eager_pointwise.calls
    got = eager.relu(x[::2])
    assert eager_pointwise.calls == calls + 1
    with numpy_kernels():
        assert_same(got, eager.relu(x[::2]))
