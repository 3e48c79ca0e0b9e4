"""The records of the trigonometric, hyperbolic and other transcendental pointwise ops
(ir/records.py): tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, exp2, sinc,
deg2rad, rad2deg, logit, atan2, hypot, logaddexp, logaddexp2, xlogy, with their in-place
forms and PyTorch's aliases (arcsin, arctan2, ...). Integers and bools compute in the
default float type, as PyTorch's; hypot and logaddexp have float kernels only."""
from __future__ import annotations

import math

import numpy as np

from eager.kernels._common import floating_only_check
from eager.kernels.gradients import sum_to
from eager.tensor import ops
from ir.records import Pointwise, declare
from ir.ops import Op


def _math(name):
    """An emitter: kiln's vectorised math library's `name` (runtime/cpu/vmath.py)."""
    return lambda E, *xs: E.math(name, *xs)


def _unary(op: Op, numpy, emit=None, alias: str = "", inplace: Op | None = None,
           inplace_function: bool = True):
    """The op's record and its in-place twin's (`tan_`), with PyTorch's alias (`arctan`);
    `emit` a function of E and x, or the name of a vmath function."""
    emit = _math(emit) if isinstance(emit, str) else emit
    return declare(op, function=True, method=True, aliases=(alias,) if alias else (),
                   pointwise=Pointwise("float", numpy, emit=emit, float_math=emit is not None),
                   inplace=inplace, inplace_function=inplace_function)


TAN = _unary(Op.TAN, np.tan, "tan", inplace=Op.TAN_)


# (an op with an in-place form saves its input, not its result, which tan_ overwrites)
@TAN.derivative("TanBackward0", "self", save="self")
def _(ctx, g):
    cos = ops.cos(ctx.self)
    return g / (cos * cos)


ASIN = _unary(Op.ASIN, np.arcsin, "asin", alias="arcsin", inplace=Op.ASIN_)


@ASIN.derivative("AsinBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.rsqrt(1 - ctx.self * ctx.self)


ACOS = _unary(Op.ACOS, np.arccos, "acos", alias="arccos", inplace=Op.ACOS_)


@ACOS.derivative("AcosBackward0", "self", save="self")
def _(ctx, g):
    return ops.neg(g) * ops.rsqrt(1 - ctx.self * ctx.self)


ATAN = _unary(Op.ATAN, np.arctan, "atan", alias="arctan", inplace=Op.ATAN_)


@ATAN.derivative("AtanBackward0", "self", save="self")
def _(ctx, g):
    return g / (1 + ctx.self * ctx.self)


SINH = _unary(Op.SINH, np.sinh, "sinh", inplace=Op.SINH_)


@SINH.derivative("SinhBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.cosh(ctx.self)


COSH = _unary(Op.COSH, np.cosh, "cosh", inplace=Op.COSH_)


@COSH.derivative("CoshBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.sinh(ctx.self)


ASINH = _unary(Op.ASINH, np.arcsinh, "asinh", alias="arcsinh", inplace=Op.ASINH_)


@ASINH.derivative("AsinhBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.rsqrt(ctx.self * ctx.self + 1)


ACOSH = _unary(Op.ACOSH, np.arccosh, "acosh", alias="arccosh", inplace=Op.ACOSH_)


@ACOSH.derivative("AcoshBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.rsqrt(ctx.self * ctx.self - 1)


ATANH = _unary(Op.ATANH, np.arctanh, "atanh", alias="arctanh", inplace=Op.ATANH_)


@ATANH.derivative("AtanhBackward0", "self", save="self")
def _(ctx, g):
    return g / (1 - ctx.self * ctx.self)


EXP2 = _unary(Op.EXP2, np.exp2, "exp2", inplace=Op.EXP2_)


@EXP2.derivative("Exp2Backward0", "self", save="self")
def _(ctx, g):
    return g * ops.exp2(ctx.self) * math.log(2.0)


def _sinc(x):
    """sin(pi x) / (pi x), 1 at 0, computed as PyTorch computes it (the product in the
    type, not numpy's float64 pi times x)."""
    product = x * x.dtype.type(math.pi)
    return np.where(x == 0, x.dtype.type(1), np.sin(product) / product)


def _emit_sinc(E, x):
    product = E.mul(x, E.const(math.pi))
    return E.select(E.eq(x, E.const(0.0)), E.const(1.0),
                    E.div(E.math("sin", product), product))


SINC = _unary(Op.SINC, _sinc, _emit_sinc, inplace=Op.SINC_)


@SINC.derivative("SincBackward0", "self", save="self")
def _(ctx, g):
    x = ctx.self
    product = x * math.pi
    slope = (product * ops.cos(product) - ops.sin(product)) / (product * x)
    return g * ops.where(ops.eq(x, 0), 0.0, slope)


_PI_OVER_180, _180_OVER_PI = math.pi / 180, 180 / math.pi
DEG2RAD = _unary(Op.DEG2RAD, lambda x: x * x.dtype.type(_PI_OVER_180),
                 emit=lambda E, x: E.mul(x, E.const(_PI_OVER_180)), inplace=Op.DEG2RAD_)


@DEG2RAD.derivative("Deg2RadBackward0", "self")
def _(ctx, g):
    return g * _PI_OVER_180


RAD2DEG = _unary(Op.RAD2DEG, lambda x: x * x.dtype.type(_180_OVER_PI),
                 emit=lambda E, x: E.mul(x, E.const(_180_OVER_PI)), inplace=Op.RAD2DEG_)


@RAD2DEG.derivative("Rad2DegBackward0", "self")
def _(ctx, g):
    return g * _180_OVER_PI


def _logit_bounds(dt, eps):
    """PyTorch's [lo, hi] for logit's eps, in the input's type: lo = eps, hi = 1 - lo
    (each rounded to it); None where eps is None or negative (no clamp)."""
    if eps is None or eps < 0:
        return None
    lo = dt.type(eps)
    return lo, dt.type(1) - lo


def _logit(x, eps=None):
    """log(x / (1 - x)), x first clamped to [eps, 1 - eps] (a NaN stays NaN). As
    PyTorch's kernel, 16-bit floats compute in their own type, each step rounded
    (own_half): rounded once from float32, 1474 of 4099 bfloat16 results differed."""
    one = x.dtype.type(1)
    bounds = _logit_bounds(x.dtype, eps)
    if bounds is not None:
        lo, hi = bounds
        x = np.where(x < lo, lo, np.where(x > hi, hi, x))
    return np.log(x / (one - x))


def _emit_logit(E, x, eps=None):
    one = E.const(1.0)
    if eps is not None and eps >= 0:
        lo = E.const(eps)
        hi = E.sub(one, lo)
        x = E.select(E.lt(x, lo), lo, E.select(E.gt(x, hi), hi, x))
    return E.math("log", E.div(x, E.sub(one, x)))


LOGIT = declare(Op.LOGIT, function=True, method=True, pointwise=Pointwise(
    "float", _logit, emit=_emit_logit, float_math=True, own_half=True),
    inplace=Op.LOGIT_, inplace_function=True)


@LOGIT.derivative("LogitBackward0", "self", save="self eps")
def _(ctx, g):
    """g / (x (1 - x)); outside [0, 1] NaN, or with eps 0 outside [eps, 1 - eps] (where
    the forward clamped), as PyTorch's logit_backward."""
    x = ctx.self
    bounds = _logit_bounds(x.dtype.np, ctx.eps)
    lo, hi, outside = (0.0, 1.0, math.nan) if bounds is None else (*map(float, bounds), 0.0)
    grad = g / (x * (1 - x))
    return ops.where(ops.bitwise_or(ops.lt(x, lo), ops.gt(x, hi)), outside, grad)


def _emit_hypot(E, x, y):
    """big * sqrt(1 + (small / big)^2): no overflow or underflow in the square; 0 where
    both are 0, inf where either is inf (a NaN beside it too, as C's hypot)."""
    a, b = E.abs(x), E.abs(y)
    big, small = E.max(a, b), E.min(a, b)
    ratio = E.div(small, big)
    out = E.mul(big, E.math("sqrt", E.add(E.const(1.0), E.mul(ratio, ratio))))
    inf = E.const(math.inf)
    out = E.select(E.eq(big, E.const(0.0)), E.const(0.0), out)
    return E.select(E.or_(E.eq(a, inf), E.eq(b, inf)), inf, out)


def _emit_logaddexp(E, a, b, base2=False):
    """As _logaddexp and _logaddexp2 compute it; a == b gives a + 1 for base 2 (exact, as
    numpy's: ln 2 times 1 / ln 2 rounds to 1 only without an FMA)."""
    big = E.max(a, b)
    gap = E.neg(E.abs(E.sub(a, b)))
    if base2:
        tail = E.mul(E.math("log1p", E.math("exp", E.mul(gap, E.const(math.log(2.0))))),
                     E.const(1 / math.log(2.0)))
        return E.select(E.eq(a, b), E.add(a, E.const(1.0)), E.add(big, tail))
    out = E.add(big, E.math("log1p", E.math("exp", gap)))
    return E.select(E.and_(E.eq(a, b), E.eq(E.abs(a), E.const(math.inf))), a, out)


def _emit_xlogy(E, x, y):
    product = E.select(E.eq(x, E.const(0)), E.const(0), E.mul(x, E.math("log", y)))
    return E.select(E.ne(y, y), y, product)  # (y != y: y is NaN)


# two tensors ----------------------------------------------------------------------------
def _binary(op: Op, numpy, rule="divide", emit=None, float_kernel: str = "",
            alias: str = "", inplace: Op | None = None, inplace_function: bool = False,
            own_half: bool = False):
    emit = _math(emit) if isinstance(emit, str) else emit
    check = floating_only_check(float_kernel) if float_kernel else None
    return declare(op, function=True, method=True, aliases=(alias,) if alias else (),
                   pointwise=Pointwise(rule, numpy, emit=emit, float_math=emit is not None,
                                       check=check, own_half=own_half),
                   inplace=inplace, inplace_function=inplace_function)


ATAN2 = _binary(Op.ATAN2, np.arctan2, emit="atan2", alias="arctan2", inplace=Op.ATAN2_)


@ATAN2.derivative("Atan2Backward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    scale = g / (a * a + b * b)
    return sum_to(scale * b, a._shape), sum_to(ops.neg(scale) * a, b._shape)


HYPOT = _binary(Op.HYPOT, np.hypot, rule="promote", float_kernel="hypot_cpu",
                emit=_emit_hypot, inplace=Op.HYPOT_)


@HYPOT.derivative("HypotBackward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    r = ops.hypot(a, b)
    return sum_to(g * a / r, a._shape), sum_to(g * b / r, b._shape)


def _logaddexp(a, b):
    """max + log1p(exp(-|a - b|)), and an infinity where both are it, as PyTorch's."""
    big = np.maximum(a, b)
    out = big + np.log1p(np.exp(-np.abs(a - b)))
    return np.where(np.isinf(a) & (a == b), a, out)


def _logaddexp2(a, b):
    big = np.maximum(a, b)
    out = big + np.log1p(np.exp2(-np.abs(a - b))) * a.dtype.type(1 / math.log(2.0))
    return np.where(a == b, a + 1, out)


LOGADDEXP = _binary(Op.LOGADDEXP, _logaddexp, rule="promote", emit=_emit_logaddexp,
                    float_kernel="logaddexp_cpu")


@LOGADDEXP.derivative("LogaddexpBackward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return (sum_to(g / (1 + ops.exp(b - a)), a._shape),
            sum_to(g / (1 + ops.exp(a - b)), b._shape))


LOGADDEXP2 = _binary(Op.LOGADDEXP2, _logaddexp2, rule="promote",
                     emit=lambda E, a, b: _emit_logaddexp(E, a, b, base2=True),
                     float_kernel="logaddexp2_cpu")


@LOGADDEXP2.derivative("Logaddexp2Backward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return (sum_to(g / (1 + ops.exp2(b - a)), a._shape),
            sum_to(g / (1 + ops.exp2(a - b)), b._shape))


def _xlogy(x, y):
    """x * log(y), 0 where x is 0 (log(0) and all), NaN where y is: PyTorch's."""
    return np.where(np.isnan(y), y, np.where(x == 0, 0, x * np.log(y))).astype(
        np.result_type(x, y), copy=False)


# 16-bit floats compute in their own type, log(y) rounded before the product, as
# PyTorch's kernel does (x * std::log(y) of c10::BFloat16s)
XLOGY = _binary(Op.XLOGY, _xlogy, emit=_emit_xlogy, inplace=Op.XLOGY_,
                inplace_function=True, own_half=True)


@XLOGY.derivative("XlogyBackward0", "self other", save="self other",
                  overloads={"XlogyBackward1": lambda a: a["self"]._wrapped,
                             "XlogyBackward2": lambda a: a["other"]._wrapped})
def _(ctx, g):
    x, y = ctx.self, ctx.other
    grad_x = grad_y = None
    if ctx.needs_input_grad(0):  # log(y), and 0 where x is 0 and y is not above it
        grad_x = ops.where(ops.logical_and(ops.eq(x, 0), ops.le(y, 0)), 0.0, ops.xlogy(g, y))
        grad_x = sum_to(grad_x, x._shape)
    if ctx.needs_input_grad(1):
        grad_y = sum_to(g * x / y, y._shape)
    return grad_x, grad_y
