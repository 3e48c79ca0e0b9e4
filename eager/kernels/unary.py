"""The records of the unary pointwise ops (ir/records.py): names, numpy function and
dtype rule, code emitter and derivative, one block per op. A new one is a block here and
its line in ir/ops.py; its kernels (eager/kernels/elementwise.py makes them), autograd,
eager function, Tensor method and native code follow from the record."""
from __future__ import annotations

import math

import numpy as np

from eager.kernels._common import integral_only, promote, rounded_once, scalar_value
from eager.kernels.decomposed import NUMPY, numpy_function
from runtime.cpu.erf import emit_erfinv, erf, erfinv
from eager.kernels.gradients import sum_to
from ir.formula import emitter
from ir.records import Pointwise, declare
from eager.tensor import ops, wrap_scalar
from ir import dtypes
from ir.ops import Op

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT1_2 = math.sqrt(0.5)  # (correctly rounded; 1 / sqrt(2.0) rounds twice)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


_sigmoid = NUMPY.sigmoid


def _sign(x):
    if x.dtype == np.bool_:
        return x
    # (x > 0) - (x < 0), as PyTorch: sign(nan) is 0, not numpy's nan
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _below_zero(E, x):
    return E.lt(x, E.const(0))


def _no_bool_negation(dt, x):
    if x.dtype is dtypes.bool_:
        raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or "
                           "`logical_not()` operator instead.")


def _math(name, fn):
    """A float function of one argument from kiln's vectorised math library."""
    return Pointwise("float", fn, emit=lambda E, x: E.math(name, x), float_math=True)


NEG = declare(Op.NEG, function=True, method=True, aliases=("negative",), pointwise=Pointwise(
    "same", np.negative, emit=lambda E, x: E.neg(x), check=_no_bool_negation),
    inplace=Op.NEG_, inplace_function=True)


@NEG.derivative("NegBackward0", "self")
def _(ctx, g):
    return ops.neg(g)


ABS = declare(Op.ABS, function=True, method=True, aliases=("absolute",), pointwise=Pointwise(
    "same", np.abs, emit=lambda E, x: E.abs(x)),  # (a float's sign bit cleared: -0.0, -nan)
    inplace=Op.ABS_, inplace_function=True)


@ABS.derivative("AbsBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.sign(ctx.self)


SIGN = declare(Op.SIGN, function=True, method=True, pointwise=Pointwise(
    "same", _sign, emit=lambda E, x: E.sub(E.from_bool(E.gt(x, E.const(0))),
                                          E.from_bool(_below_zero(E, x)))), inplace=Op.SIGN_)


@SIGN.derivative("SignBackward0", "self")
def _(ctx, g):
    return g * 0


RELU = declare(Op.RELU, function=True, method=True, pointwise=Pointwise(
    "same", lambda x: np.where(x < 0, 0, x).astype(x.dtype, copy=False),  # keeps nan
    emit=lambda E, x: E.select(_below_zero(E, x), E.const(0), x),
    activations=(("relu", ()),)), inplace=Op.RELU_, inplace_function=True)


@RELU.derivative("ReluBackward0", "self", save="result")
def _(ctx, g):
    return g * ops.gt(ctx.result, 0)


EXP = declare(Op.EXP, function=True, method=True, pointwise=_math("exp", np.exp),
              inplace=Op.EXP_, inplace_function=True)


@EXP.derivative("ExpBackward0", "self", save="result")
def _(ctx, g):
    return g * ctx.result


LOG = declare(Op.LOG, function=True, method=True, pointwise=_math("log", np.log),
              inplace=Op.LOG_, inplace_function=True)


@LOG.derivative("LogBackward0", "self", save="self")
def _(ctx, g):
    return g / ctx.self


SQRT = declare(Op.SQRT, function=True, method=True, pointwise=_math("sqrt", np.sqrt),
               inplace=Op.SQRT_, inplace_function=True)


@SQRT.derivative("SqrtBackward0", "self", save="result")
def _(ctx, g):
    return g / (2 * ctx.result)


RSQRT = declare(Op.RSQRT, function=True, method=True,
                pointwise=_math("rsqrt", lambda x: 1 / np.sqrt(x)), inplace=Op.RSQRT_,
                inplace_function=True)


@RSQRT.derivative("RsqrtBackward0", "self", save="result")
def _(ctx, g):
    r = ctx.result
    return g * r * r * r * -0.5


TANH = declare(Op.TANH, function=True, method=True, functional=True, pointwise=Pointwise(
    "float", np.tanh, emit=lambda E, x: E.math("tanh", x), float_math=True,
    activations=(("tanh", ()),)), inplace=Op.TANH_, inplace_function=True)


# The backward of tanh, sigmoid and silu are one kernel each in PyTorch (tanh_backward,
# ...): 16-bit floats compute in float32 and round once (rounded_once); in 16-bit ops
# each step rounded, about half of the bfloat16 gradients were a unit or more apart
@rounded_once
def _tanh_backward(g, r):
    return g * (1 - r * r)


def _sigmoid_backward(g, r):
    """PyTorch's kernel: bfloat16 in float32, rounded once; float16 in float16, each
    step rounded (measured: 0 of 4096 apart either way)."""
    if r.dtype is dtypes.float16:
        return g * (1 - r) * r
    return _sigmoid_backward_once(g, r)


_sigmoid_backward_once = rounded_once(lambda g, r: g * (1 - r) * r)


@rounded_once
def _silu_backward(g, x):
    s = ops.sigmoid(x)
    return g * s * (1 + x * (1 - s))


@TANH.derivative("TanhBackward0", "self", save="result")
def _(ctx, g):
    return _tanh_backward(g, ctx.result)


SIGMOID = declare(Op.SIGMOID, function=True, method=True, functional=True,
                  pointwise=_math("sigmoid", _sigmoid), inplace=Op.SIGMOID_,
                  inplace_function=True)


@SIGMOID.derivative("SigmoidBackward0", "self", save="result")
def _(ctx, g):
    return _sigmoid_backward(g, ctx.result)


SILU = declare(Op.SILU, function=True, method=True, pointwise=Pointwise(
    "float", lambda x: x * _sigmoid(x), emit=lambda E, x: E.mul(x, E.math("sigmoid", x)),
    float_only="silu_cpu", activations=(("silu", ()),)))


@SILU.derivative("SiluBackward0", "self", save="self")
def _(ctx, g):
    return _silu_backward(g, ctx.self)


ERF = declare(Op.ERF, function=True, method=True, pointwise=_math("erf", erf),
              inplace=Op.ERF_, inplace_function=True)


@ERF.derivative("ErfBackward0", "self", save="self")
def _(ctx, g):
    x = ctx.self
    return g * (2 / math.sqrt(math.pi)) * ops.exp(ops.neg(x * x))


ERFINV = declare(Op.ERFINV, function=True, method=True, pointwise=Pointwise(
    "float", erfinv, emit=emit_erfinv, float_math=True))


@ERFINV.derivative("ErfinvBackward0", "self", save="result")
def _(ctx, g):
    return g * (math.sqrt(math.pi) / 2) * ops.exp(ctx.result * ctx.result)


LOG1P = declare(Op.LOG1P, function=True, method=True, pointwise=_math("log1p", np.log1p),
                inplace=Op.LOG1P_, inplace_function=True)


@LOG1P.derivative("Log1PBackward0", "self", save="self")
def _(ctx, g):
    return g / (ctx.self + 1)


EXPM1 = declare(Op.EXPM1, function=True, method=True, pointwise=_math("expm1", np.expm1),
                inplace=Op.EXPM1_, inplace_function=True)


@EXPM1.derivative("Expm1Backward0", "self", save="result")
def _(ctx, g):
    return g * (ctx.result + 1)


SIN = declare(Op.SIN, function=True, method=True, pointwise=Pointwise(
    "float", np.sin, emit=lambda E, x: E.math("sin", x), float_math=True),
    inplace=Op.SIN_, inplace_function=True)


@SIN.derivative("SinBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.cos(ctx.self)


COS = declare(Op.COS, function=True, method=True, pointwise=Pointwise(
    "float", np.cos, emit=lambda E, x: E.math("cos", x), float_math=True),
    inplace=Op.COS_, inplace_function=True)


@COS.derivative("CosBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.neg(ops.sin(ctx.self))


BITWISE_NOT = declare(Op.BITWISE_NOT, function=True, method=True, differentiable=False,
                      pointwise=Pointwise("same", np.invert, emit=lambda E, x: E.not_(x),
                                          check=integral_only("bitwise_not_cpu"), quiet=True))


def _relu6_of_x_plus_3(E, x):
    return E.min(E.max(E.add(x, E.const(3)), E.const(0)), E.const(6))


HARDSWISH = declare(Op.HARDSWISH, functional=True, pointwise=Pointwise(
    "same", lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6,
    emit=lambda E, x: E.div(E.mul(x, _relu6_of_x_plus_3(E, x)), E.const(6)),
    float_only="hardswish_cpu"))


@HARDSWISH.derivative("HardswishBackward0", "self", save="self")
def _(ctx, g):
    x = ctx.self
    return g * ops.where(ops.le(x, -3), 0.0, ops.where(ops.ge(x, 3), 1.0, x / 3 + 0.5))


HARDSIGMOID = declare(Op.HARDSIGMOID, functional=True, pointwise=Pointwise(
    "same", lambda x: np.minimum(np.maximum(x + 3, 0), 6) / 6,
    emit=lambda E, x: E.div(_relu6_of_x_plus_3(E, x), E.const(6)),
    float_only="hardsigmoid_cpu"))


@HARDSIGMOID.derivative("HardsigmoidBackward0", "self", save="self")
def _(ctx, g):
    x = ctx.self
    return g * ops.where(ops.logical_and(ops.gt(x, -3), ops.lt(x, 3)), 1 / 6, 0.0)


# gelu ----------------------------------------------------------------------------------
def _gelu(F, self, approximate="none"):
    """x * (1 + erf(x / sqrt 2)) / 2, or with tanh(sqrt(2 / pi) * (x + 0.044715 x^3)):
    numpy's kernel and the emitter (elementwise kernels, a GEMM's store) both run it."""
    x = self
    if approximate == "tanh":
        inner = F.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x)))
    else:
        inner = F.erf(x * _SQRT1_2)
    return 0.5 * x * (1.0 + inner)


def _check_approximate(dt, *tensors, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")


GELU = declare(Op.GELU, function=True, method=True, pointwise=Pointwise(
    "same", numpy_function(_gelu), emit=emitter(_gelu), float_only="GeluKernelImpl",
    float_math=True,
    activations=(("gelu", ()), ("gelu_tanh", (("approximate", "tanh"),))),
    check=_check_approximate, check_attrs=True))


@GELU.derivative("GeluBackward0", "self", save="self approximate")
def _(ctx, g):
    return ops.gelu_backward(g, ctx.self, approximate=ctx.approximate)


def _gelu_backward(F, grad_output, self, approximate="none"):
    """grad * d gelu(x) / dx, written once: numpy's kernel (NUMPY), the generated
    kernels' emitter and the compiler's decomposition all run it."""
    x = self
    if approximate == "tanh":
        t = F.tanh((x + x * x * x * 0.044715) * _SQRT_2_OVER_PI)
        d_inner = (x * x * (3 * 0.044715) + 1.0) * _SQRT_2_OVER_PI
        return grad_output * ((t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * d_inner)
    cdf = (F.erf(x * _SQRT1_2) + 1.0) * 0.5
    pdf = F.exp(x * x * -0.5) * _INV_SQRT_2PI
    return grad_output * (cdf + x * pdf)


GELU_BACKWARD = declare(Op.GELU_BACKWARD, decomposition=_gelu_backward, pointwise=Pointwise(
    "promote", numpy_function(_gelu_backward), emit=emitter(_gelu_backward),
    float_only="GeluKernelImpl", float_math=True, check=_check_approximate, check_attrs=True))


@GELU_BACKWARD.derivative("GeluBackwardBackward0", "grad_output self",
                          save="grad_output self approximate")
def _(ctx, gg):
    x = ctx.self
    if ctx.approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = ops.tanh(k * (x + c * x * x * x))
        d_inner = k * (1 + 3 * c * x * x)
        second = (1 - t * t) * (d_inner - x * t * d_inner * d_inner + 0.5 * x * (6 * k * c * x))
    else:
        pdf = ops.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        second = pdf * (2 - x * x)
    return (ops.gelu_backward(gg, x, approximate=ctx.approximate),
            sum_to(gg * ctx.grad_output * second, x._shape))


# softplus ------------------------------------------------------------------------------
def _softplus(x, beta=1, threshold=20):
    """log1p(e^(beta x)) / beta, and x where beta x > threshold: PyTorch's formula, so
    values (e^(beta x) underflowing to a subnormal, nan, inf) are PyTorch's."""
    scaled = x * beta
    return np.where(scaled > threshold, x, np.log1p(np.exp(scaled)) / beta)


def _emit_softplus(E, x, beta=1, threshold=20):
    scaled = E.mul(x, E.const(beta))
    return E.select(E.gt(scaled, E.const(threshold)), x,
                    E.div(E.math("log1p", E.math("exp", scaled)), E.const(beta)))


def _softplus_backward(g, x, beta, threshold):
    """g * e^(beta x) / (e^(beta x) + 1), and g where beta x > threshold."""
    scaled = x * beta
    z = np.exp(scaled)
    return np.where(scaled > threshold, g, g * z / (z + 1))


def _emit_softplus_backward(E, g, x, beta, threshold):
    scaled = E.mul(x, E.const(beta))
    z = E.math("exp", scaled)
    return E.select(E.gt(scaled, E.const(threshold)), g,
                    E.div(E.mul(g, z), E.add(z, E.const(1.0))))


SOFTPLUS = declare(Op.SOFTPLUS, functional=True, pointwise=Pointwise(
    "same", _softplus, emit=_emit_softplus, float_only="softplus_cpu", float_math=True))


@SOFTPLUS.derivative("SoftplusBackward0", "self", save="self beta threshold")
def _(ctx, g):
    return ops.softplus_backward(g, ctx.self, ctx.beta, ctx.threshold)


SOFTPLUS_BACKWARD = declare(Op.SOFTPLUS_BACKWARD, pointwise=Pointwise(
    "promote", _softplus_backward, emit=_emit_softplus_backward,
    float_only="softplus_backward_cpu", float_math=True))


@SOFTPLUS_BACKWARD.derivative("SoftplusBackwardBackward0", "grad_output self",
                              save="grad_output self beta threshold")
def _(ctx, gg):
    """d/dg is the op itself; d/dx of g s(beta x) (s the sigmoid, below the threshold)
    is g beta s (1 - s)."""
    x, beta = ctx.self, ctx.beta
    s = ops.sigmoid(x * beta)
    below = (x * beta) <= ctx.threshold
    return (ops.softplus_backward(gg, x, beta, ctx.threshold),
            sum_to(gg * ctx.grad_output * below * (s * (1 - s) * beta), x._shape))


def _log_sigmoid(x):
    """min(x, 0) - log1p(e^-|x|), as PyTorch's kernel: no overflow, logsigmoid(inf) 0."""
    return np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))


def _emit_log_sigmoid(E, x):
    return E.sub(E.min(x, E.const(0.0)), E.math("log1p", E.math("exp", E.neg(E.abs(x)))))


LOG_SIGMOID = declare(Op.LOG_SIGMOID, pointwise=Pointwise(
    "same", _log_sigmoid, emit=_emit_log_sigmoid, float_only="log_sigmoid_forward_cpu",
    float_math=True))


def _log_sigmoid_buffer(x):
    """PyTorch's backward reads the forward's buffer, e^-|x| in x's type (a 16-bit float
    rounded to it: its gradient differs where that rounds): made again from x."""
    return ops.exp(ops.neg(ops.abs(x)))


@LOG_SIGMOID.derivative("LogSigmoidBackward0", "self", save="self")
def _(ctx, g):
    return ops.log_sigmoid_backward(g, ctx.self, _log_sigmoid_buffer(ctx.self))


def _log_sigmoid_backward(g, x, buffer):
    """(1 - b / (1 + b)) g below 0, (b / (1 + b)) g from 0 (b = e^-|x|)."""
    below = x < 0
    return (np.where(below, 1.0, 0.0).astype(x.dtype) -
            np.where(below, 1.0, -1.0).astype(x.dtype) * (buffer / (1 + buffer))) * g


def _emit_log_sigmoid_backward(E, g, x, buffer):
    below = E.lt(x, E.const(0.0))
    one = E.const(1.0)
    share = E.div(buffer, E.add(one, buffer))
    return E.mul(E.sub(E.select(below, one, E.const(0.0)),
                       E.mul(E.select(below, one, E.const(-1.0)), share)), g)


LOG_SIGMOID_BACKWARD = declare(Op.LOG_SIGMOID_BACKWARD, pointwise=Pointwise(
    "promote", _log_sigmoid_backward, emit=_emit_log_sigmoid_backward,
    float_only="log_sigmoid_backward_cpu", float_math=True))


@LOG_SIGMOID_BACKWARD.derivative("LogSigmoidBackwardBackward0", "grad_output self",
                                 save="grad_output self")
def _(ctx, gg):
    """d/dg is the op itself (of the same buffer); d/dx is g s (s - 1), s the sigmoid:
    PyTorch's log_sigmoid_double_backward."""
    x = ctx.self
    s = ops.sigmoid(x)
    return (ops.log_sigmoid_backward(gg, x, _log_sigmoid_buffer(x)),
            sum_to(gg * ctx.grad_output * (s - 1) * s, x._shape))


# clamp ---------------------------------------------------------------------------------
def _clamp(x, min=None, max=None):  # noqa: A002 (PyTorch's argument names)
    """x where it is not beyond a bound, so -0.0 against a bound of +0.0 and NaN stay, as
    PyTorch's std::min(std::max(x, min), max): numpy's loops give the second operand of a
    tie (binary._first_on_ties), so x goes second. An integer tensor's bounds convert as
    PyTorch's Scalars do (dtypes.checked_scalar: -1 bounds a uint8 tensor as 255)."""
    if x.dtype.kind in "iu":
        dt = dtypes.from_numpy(x.dtype)
        min, max = (None if b is None else dtypes.checked_scalar(b, dt) for b in (min, max))
    if min is not None:
        x = np.maximum(min, x)
    if max is not None:
        x = np.minimum(max, x)
    return x


def _clamp_dtype(self, min=None, max=None):  # noqa: A002
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    bounds = [wrap_scalar(scalar_value(b)) for b in (min, max) if b is not None]
    return promote(self, *bounds)  # clamp(int tensor, 0.5) is float32


def _emit_clamp(E, x, min=None, max=None):  # noqa: A002
    if min is not None:
        x = E.max(x, E.const(min))
    if max is not None:
        x = E.min(x, E.const(max))
    return x


CLAMP = declare(Op.CLAMP, function=True, method=True, pointwise=Pointwise(
    "same", _clamp, emit=_emit_clamp, dtype=_clamp_dtype, quiet=True), inplace=Op.CLAMP_,
    inplace_function=True)


@CLAMP.derivative("ClampBackward1", "self", save="self min max")
def _(ctx, g):
    x, mask = ctx.self, None
    if ctx.min is not None:
        mask = ops.ge(x, ctx.min)
    if ctx.max is not None:
        upper = ops.le(x, ctx.max)
        mask = upper if mask is None else ops.logical_and(mask, upper)
    return g * mask


# clamp with tensor bounds (PyTorch's clamp.Tensor): broadcast, the type promoted over all
# three; eager.clamp gives a missing bound as one that bounds nothing ------------------
CLAMP_TENSOR = declare(Op.CLAMP_TENSOR, pointwise=Pointwise(
    "promote", lambda x, lo, hi: np.minimum(hi, np.maximum(lo, x)),  # (x second: _clamp)
    emit=lambda E, x, lo, hi: E.min(E.max(x, lo), hi), quiet=True), inplace=Op.CLAMP_TENSOR_)


@CLAMP_TENSOR.derivative("ClampBackward0", "self min max", save="self min max")
def _(ctx, g):
    """PyTorch's clamp_backward_min_max: x's gradient within the bounds, a bound's where
    it clamps (min's only where min < max; max's also everywhere max < min)."""
    x, lo, hi = ctx.self, ctx.min, ctx.max
    grads = [None, None, None]
    if ctx.needs_input_grad(0):
        grads[0] = ops.where(ops.logical_and(ops.ge(x, lo), ops.le(x, hi)), g, 0.0)
    if ctx.needs_input_grad(1):
        grads[1] = ops.where(ops.logical_and(ops.lt(x, lo), ops.lt(lo, hi)), g, 0.0)
    if ctx.needs_input_grad(2):
        grads[2] = ops.where(ops.bitwise_or(ops.gt(x, hi), ops.lt(hi, lo)), g, 0.0)
    return tuple(None if grad is None else sum_to(grad, t._shape)
                 for grad, t in zip(grads, (x, lo, hi)))


# nan_to_num: NaN, +inf and -inf replaced (by 0 and the type's largest and lowest finite
# value, unless given); integers and bools are returned as they are ----------------------
def _replacements(dt, nan, posinf, neginf) -> tuple:
    """The three values in the type (a number beyond its range becomes ±inf, as
    PyTorch's cast gives it)."""
    info = np.finfo(dt)
    with np.errstate(over="ignore"):
        return tuple(dt.type(default if given is None else given) for given, default in
                     ((nan, 0.0), (posinf, info.max), (neginf, info.min)))


def _nan_to_num(x, nan=None, posinf=None, neginf=None):
    if x.dtype.kind != "f":
        return x
    nan, posinf, neginf = _replacements(x.dtype, nan, posinf, neginf)
    return np.where(x != x, nan, np.where(x == np.inf, posinf,
                                          np.where(x == -np.inf, neginf, x)))


def _emit_nan_to_num(E, x, nan=None, posinf=None, neginf=None):
    if not E.fl:
        return x
    nan, posinf, neginf = (E.const(float(v)) for v in
                           _replacements(E.dt.np, nan, posinf, neginf))
    x = E.select(E.ne(x, x), nan, x)
    x = E.select(E.eq(x, E.const(math.inf)), posinf, x)
    return E.select(E.eq(x, E.const(-math.inf)), neginf, x)


NAN_TO_NUM = declare(Op.NAN_TO_NUM, function=True, method=True, pointwise=Pointwise(
    "same", _nan_to_num, emit=_emit_nan_to_num, quiet=True), inplace=Op.NAN_TO_NUM_,
    inplace_function=True)


@NAN_TO_NUM.derivative("NanToNumBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.lt(ops.abs(ctx.self), math.inf)  # (zero where self is not finite)
