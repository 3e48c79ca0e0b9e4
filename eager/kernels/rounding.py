"""The records of the rounding and sign pointwise ops (ir/records.py): floor, ceil, round
(to even, with `decimals=`), trunc (fix), frac, sgn, signbit, fmod, remainder, copysign,
nextafter, floor_divide (//; div's rounding modes too), with their in-place forms. Integers keep their type through floor, ceil,
round and trunc (bools have no kernel, as in PyTorch); fmod and remainder of integers
raise PyTorch's "ZeroDivisionError" for a zero divisor; rounding and sign ops have zero
derivatives (floor_divide has none, as in PyTorch)."""
from __future__ import annotations

import numpy as np

from eager.factories import zeros_like
from eager.kernels._common import floating_only_check, type_word
from eager.kernels.gradients import sum_to
from eager.kernels.unary import SIGN
from eager.tensor import ops
from ir import dtypes
from ir.records import Pointwise, declare
from ir.ops import Op


def no_bool(kernel: str):
    def check(dt, *tensors, **attrs):
        if dt is dtypes.bool_:
            raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")
    return check


def _integers_kept(numpy):
    """numpy's float rounding, an integer array given back as it is (np.floor of int64
    is float64)."""
    def rounding(x):
        return x if x.dtype.kind in "iu" else numpy(x)
    rounding.__name__ = numpy.__name__
    return rounding


def _rounding(op: Op, inplace: Op, numpy, intrinsic: str, node: str, alias: str = ""):
    emit = lambda E, x: E.round(intrinsic, x)  # noqa: E731
    record = declare(op, function=True, method=True, aliases=(alias,) if alias else (),
                     pointwise=Pointwise("same", _integers_kept(numpy), emit=emit,
                                         check=no_bool(f"{op.schema.name}_vml_cpu")),
                     inplace=inplace, inplace_function=True)

    @record.derivative(node, "self")
    def _(ctx, g):
        return zeros_like(g)
    return record


FLOOR = _rounding(Op.FLOOR, Op.FLOOR_, np.floor, "floor", "FloorBackward0")
CEIL = _rounding(Op.CEIL, Op.CEIL_, np.ceil, "ceil", "CeilBackward0")
TRUNC = _rounding(Op.TRUNC, Op.TRUNC_, np.trunc, "trunc", "TruncBackward0", alias="fix")


def _round(x, decimals=0):
    """Half to even; with decimals, as PyTorch: rint(x * 10^d) / 10^d (for d < 0,
    rint(x / 10^-d) * 10^-d), the power of ten in the type."""
    if x.dtype.kind in "iu":
        return x
    if decimals == 0:
        return np.rint(x)
    ten = x.dtype.type(10.0 ** abs(decimals))
    return np.rint(x * ten) / ten if decimals > 0 else np.rint(x / ten) * ten


def _emit_round(E, x, decimals=0):
    if decimals == 0:
        return E.round("roundeven", x)
    ten = E.const(10.0 ** abs(decimals))
    if decimals > 0:
        return E.div(E.round("roundeven", E.mul(x, ten)), ten)
    return E.mul(E.round("roundeven", E.div(x, ten)), ten)


def _check_round(dt, x, decimals=0):
    if dt is dtypes.bool_:
        raise NotImplementedError("\"round_vml_cpu\" not implemented for 'Bool'")
    if decimals != 0 and not dt.is_floating_point:
        raise NotImplementedError(f"\"round_cpu\" not implemented for '{type_word(dt)}'")


ROUND = declare(Op.ROUND, function=True, method=True, pointwise=Pointwise(
    "same", _round, emit=_emit_round, check=_check_round), inplace=Op.ROUND_,
    inplace_function=True)


@ROUND.derivative("RoundBackward0", "self", overloads={
    "RoundBackward1": lambda a: a.get("decimals", 0) != 0})
def _(ctx, g):
    return zeros_like(g)


FRAC = declare(Op.FRAC, function=True, method=True, pointwise=Pointwise(
    "same", lambda x: x - np.trunc(x), emit=lambda E, x: E.sub(x, E.round("trunc", x)),
    float_only="frac_cpu"), inplace=Op.FRAC_, inplace_function=True)


@FRAC.derivative("FracBackward0", "self")
def _(ctx, g):
    return g


SGN = declare(Op.SGN, function=True, method=True, pointwise=SIGN.pointwise, inplace=Op.SGN_)


@SGN.derivative("SgnBackward0", "self")
def _(ctx, g):
    return zeros_like(g)


SIGNBIT = declare(Op.SIGNBIT, function=True, method=True, differentiable=False,
                  pointwise=Pointwise("compare", lambda x: np.signbit(x) if x.dtype.kind == "f"
                                      else x < 0, emit=lambda E, x: E.signbit(x), quiet=True))


# two tensors ----------------------------------------------------------------------------
def integer_division(name: str, numpy):
    """numpy's `numpy`, raising PyTorch's error for an integer divided by zero (numpy
    gives 0 and a warning)."""
    def divide(a, b, **attrs):
        if a.dtype.kind in "iu" and np.any(b == 0):
            raise RuntimeError("ZeroDivisionError")
        return numpy(a, b, **attrs)
    divide.__name__ = name
    return divide


def _remainder(a, b):
    """PyTorch's: fmod, plus the divisor where the signs differ (Python's convention; a
    zero keeps the dividend's sign, where numpy's takes the divisor's)."""
    mod = np.fmod(a, b)
    return np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod).astype(mod.dtype,
                                                                               copy=False)


def _emit_remainder(E, a, b):
    mod = E.fmod(a, b)
    zero = E.const(0)
    differ = E.xor(E.lt(b, zero), E.lt(mod, zero))  # the signs of divisor and fmod
    return E.select(E.and_(E.ne(mod, zero), differ), E.add(mod, b), mod)


def _binary(op: Op, inplace: Op, numpy, rule="promote", check=None, emit=None,
            own_half=False):
    return declare(op, function=True, method=True, pointwise=Pointwise(
        rule, numpy, check=check, emit=emit, float_math=emit is not None, own_half=own_half),
        inplace=inplace)


# integers stay with numpy (float_math): a generated integer division by zero is undefined
FMOD = _binary(Op.FMOD, Op.FMOD_, integer_division("fmod", np.fmod),
               check=no_bool("fmod_cpu"), emit=lambda E, a, b: E.fmod(a, b))
REMAINDER = _binary(Op.REMAINDER, Op.REMAINDER_, integer_division("remainder", _remainder),
                    check=no_bool("remainder_cpu"), emit=_emit_remainder)


@FMOD.derivative("FmodBackward1", "self other", save="self other",
                 overloads={"FmodBackward0": lambda a: a["other"]._wrapped})
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return sum_to(g, a._shape), sum_to(ops.neg(g) * ops.trunc(a / b), b._shape)


@REMAINDER.derivative("RemainderBackward1", "self other", save="self other",
                      overloads={"RemainderBackward0": lambda a: a["other"]._wrapped})
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return sum_to(g, a._shape), sum_to(ops.neg(g) * ops.floor(a / b), b._shape)


# division rounded: div(rounding_mode="trunc" / "floor") and floor_divide (//) ----------
def _floor_divide(a, b):
    """PyTorch's div_floor: integers as Python's //; floats as c10::div_floor_floating
    (Python's float //, from fmod: 1 // 0.1 is 9.0 where floor(1 / 0.1) is 10.0; a zero
    divisor gives a / b)."""
    if a.dtype.kind in "iu":
        return np.floor_divide(a, b)
    mod = np.fmod(a, b)
    div = (a - mod) / b
    div = np.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floor = np.floor(div)
    floor = np.where(div - floor > 0.5, floor + 1, floor)
    quotient = a / b
    rounded = np.where(div != 0, floor, np.copysign(a.dtype.type(0), quotient))
    return np.where(b == 0, quotient, rounded).astype(a.dtype, copy=False)


def emit_floor_divide(E, a, b):
    if not E.fl:
        return _emit_integer_floor_divide(E, a, b)
    zero, one = E.const(0), E.const(1)
    mod = E.fmod(a, b)
    div = E.div(E.sub(a, mod), b)
    differ = E.and_(E.ne(mod, zero), E.xor(E.lt(b, zero), E.lt(mod, zero)))
    div = E.select(differ, E.sub(div, one), div)
    floor = E.round("floor", div)
    floor = E.select(E.gt(E.sub(div, floor), E.const(0.5)), E.add(floor, one), floor)
    quotient = E.div(a, b)
    rounded = E.select(E.ne(div, zero), floor, E.copysign(zero, quotient))
    return E.select(E.eq(b, zero), quotient, rounded)


def _emit_integer_floor_divide(E, a, b):
    """Python's a // b of integers, as PyTorch's floor_divide: C's quotient, one less where
    the remainder is non-zero and its sign is not the divisor's."""
    zero, quotient, mod = E.const(0), E.div(a, b), E.fmod(a, b)
    differ = E.and_(E.ne(mod, zero), E.xor(E.lt(b, zero), E.lt(mod, zero)))
    return E.select(differ, E.sub(quotient, E.const(1)), quotient)


def _trunc_divide(a, b):
    """C's integer division (toward zero); trunc(a / b) for floats."""
    if a.dtype.kind in "iu":
        quotient = np.floor_divide(a, b)
        inexact = (quotient * b != a) & ((a < 0) != (b < 0))
        return quotient + inexact.astype(a.dtype)
    return np.trunc(a / b)


ROUNDED_DIVISIONS = {None: np.true_divide, "trunc": _trunc_divide, "floor": _floor_divide}
"""div's numpy function for each rounding mode (binary.py records div.Tensor_mode)."""


FLOOR_DIVIDE = _binary(Op.FLOOR_DIVIDE, Op.FLOOR_DIVIDE_,
                       integer_division("floor_divide", _floor_divide),
                       check=no_bool("div_floor_cpu"), emit=emit_floor_divide, own_half=True)


@FLOOR_DIVIDE.derivative("NotImplemented", "self other", save="")
def _(ctx, g):
    raise RuntimeError("derivative for aten::floor_divide is not implemented")


COPYSIGN = _binary(Op.COPYSIGN, Op.COPYSIGN_, np.copysign, rule="divide",
                   emit=lambda E, x, sign: E.copysign(x, sign))


@COPYSIGN.derivative("CopysignBackward0", "self other", save="self other",
                     overloads={"CopysignBackward1": lambda a: a["other"]._wrapped})
def _(ctx, g):
    x, other = ctx.self, ctx.other  # (the result is not saved: copysign_ overwrites it)
    ratio = ops.where(ops.eq(x, 0), 0.0, ops.copysign(x, other) / x)
    return sum_to(g * ratio, x._shape), sum_to(zeros_like(g), other._shape)


NEXTAFTER = _binary(Op.NEXTAFTER, Op.NEXTAFTER_, np.nextafter,
                    check=floating_only_check("nextafter_cpu"),
                    emit=lambda E, x, y: E.nextafter(x, y))


@NEXTAFTER.derivative("NextafterBackward0", "self other", save="self_sizes other_sizes")
def _(ctx, g):  # PyTorch's: a step away is the input itself, to first order
    return sum_to(g, ctx.self_sizes), sum_to(zeros_like(g), ctx.other_sizes)


# heaviside: `values` at zero, else 1 above zero and 0 elsewhere (NaN too, as PyTorch's
# a == 0 ? b : a > 0) --------------------------------------------------------------------
def _heaviside(x, values):
    return np.where(x == 0, values, x > 0)


def _emit_heaviside(E, x, values):
    zero = E.const(0)
    return E.select(E.eq(x, zero), values, E.from_bool(E.gt(x, zero)))


def _same_dtypes(dt, x, values):
    if x.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different "
                           "dtypes")


HEAVISIDE = _binary(Op.HEAVISIDE, Op.HEAVISIDE_, _heaviside, rule="same",
                    check=_same_dtypes, emit=_emit_heaviside)


@HEAVISIDE.derivative("NotImplemented", "self values", save="")
def _(ctx, g):
    raise RuntimeError("the derivative for 'heaviside' is not implemented.")
