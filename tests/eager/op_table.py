"""The op table: every op in ir.ops with its call, a numpy float64 reference and samples
over awkward shapes (0-sized dims, size-1 dims, primes, broadcasting, 0-d tensors).
The views, copies, indexing and in-place ops are in op_table_shape.py."""
from __future__ import annotations

import functools
import math

import numpy as np

from ir.ops import Op
from op_cases import ALL, FLOATS, INTS, NUMBERS, S, OpCase, aten

SPECIAL_VALUES = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.5, 1e-30]
UNARY_SHAPES = [(), (0,), (1,), (7,), (3, 5), (2, 0, 3), (1, 13), (4, 1, 3), (2, 3, 1, 5)]
BINARY_SHAPES = [((3, 5), (3, 5)), ((3, 5), (5,)), ((3, 1), (1, 5)), ((), (2, 3)), ((2, 3), ()),
                 ((0, 3), (1, 3)), ((4, 1, 3), (2, 1)), ((7,), (1,)), ((2, 0), (2, 1)),
                 ((5, 1, 1), (1, 3, 2)), ((1,), ())]

_erf = np.vectorize(math.erf, otypes=[np.float64])


@functools.partial(np.vectorize, otypes=[np.float64])
def _erfinv(y: float) -> float:
    """Bisection on math.erf: independent of the kernel's rational guess and Newton steps."""
    if not -1.0 <= y <= 1.0:
        return math.nan
    if abs(y) == 1.0:
        return math.copysign(math.inf, y)
    lo, hi = -6.0, 6.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.erf(mid) < y else (lo, mid)
    return (lo + hi) / 2


def _axis(x, dim):
    if dim is None or x.ndim == 0:
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else dim


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_backward(grad, x, approximate="none"):
    h = 1e-5  # central difference of gelu in float64: an independent check of the formula
    return grad * (_gelu(x + h, approximate) - _gelu(x - h, approximate)) / (2 * h)


# elementwise ----------------------------------------------------------------------------
def unary_samples(positive=False, specials=SPECIAL_VALUES):
    def samples(make):
        for shape in UNARY_SHAPES:
            yield S(make(shape, positive))
        yield S(make((4, 6), positive, scale=30.0))  # overflow / saturation territory
        if make.dtype.kind == "f":
            yield S(np.array(specials, make.dtype))
    return samples


def unary(name, op, ref, dtypes=ALL, positive=False, call=None, specials=SPECIAL_VALUES):
    fn = call or (lambda lib, x: getattr(lib, name)(x))
    # in float64 whatever the input type (numpy's exp of a bool array is float16)
    return OpCase(name, (op,), fn, lambda x: ref(x.astype(np.float64)),
                  unary_samples(positive, specials), dtypes)


# PyTorch's float32 gelu gives NaN at +inf, where kiln (and float64 PyTorch) give inf
_GELU_SPECIALS = [v for v in SPECIAL_VALUES if v != np.inf]


def binary_samples(scalars=True):
    def samples(make):
        for a, b in BINARY_SHAPES:
            yield S(make(a), make(b))
        if scalars:
            yield S(make((3, 5)), 2)
            yield S(make((2, 3)), -1.5)
            yield S(make(()), 3)
    return samples


def binary(name, op, ref, dtypes=ALL, scalars=True):
    return OpCase(name, (op,), lambda lib, a, b: getattr(lib, name)(a, b), ref,
                  binary_samples(scalars), dtypes)


def pow_samples(make):
    for a, b in BINARY_SHAPES:
        exponent = make(b)
        if exponent.dtype.kind == "i":
            exponent = np.abs(exponent)  # integers to negative powers raise
        yield S(make(a, positive=True), exponent)
    yield S(make((3, 5), positive=True), 2)
    yield S(make((3, 5), positive=True), 0.5)


def divisor_samples(make):
    """Divisors away from zero (an integer divided by zero raises)."""
    for a, b in BINARY_SHAPES:
        divisor = make(b, positive=True)
        yield S(make(a, scale=5.0), np.where(np.arange(divisor.size).reshape(b) % 2, divisor,
                                               -divisor).astype(divisor.dtype))
    yield S(make((3, 5), scale=5.0), 2)
    yield S(make((2, 3), scale=5.0), -1.5)


def where_samples(make):
    for cond, a, b in [((3, 5), (3, 5), (3, 5)), ((3, 1), (1, 5), ()), ((), (2, 3), (3,)),
                       ((0, 2), (1, 2), (0, 1)), ((2, 1, 4), (3, 1), (4,))]:
        yield S(make.mask(cond), make(a), make(b))
    yield S(make.mask((2, 3)), make((2, 3)), 0.0)


def clamp_samples(make):
    x = make((4, 7))
    lo, hi = (-1, 2) if make.dtype.kind == "i" else (-0.5, 0.5)
    yield S(x, lo)
    yield S(x, None, hi)
    yield S(x, lo, hi)
    yield S(x, hi, lo)  # min > max: everything becomes max
    yield S(make((2, 0, 3)), lo, hi)
    yield S(make(()), lo, hi)


def clamp_tensor_samples(make):
    """Tensor bounds, broadcast (some below and some above x; min > max in places)."""
    x = make((4, 7), scale=3.0)
    yield S(x, make((7,)), make((4, 1), positive=True))
    yield S(make((3, 1)), make((1, 5)), make(()))
    yield S(make((2, 0, 3)), make((3,)), make((3,)))


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.log1p(np.exp(x * beta)) / beta)


def _softplus_backward(grad, x, beta, threshold):
    # the logistic function, written apart from the kernels' e^z / (e^z + 1)
    return np.where(x * beta > threshold, grad, grad / (1 + np.exp(-x * beta)))


def softplus_backward_samples(make):
    for shape in UNARY_SHAPES:
        yield S(make(shape), make(shape, scale=10.0), 1.5, 4.0)


def _log_sigmoid_backward(grad, x, buffer):
    return grad / (1 + np.exp(x))  # (the buffer is e^-|x|: the kernel's own path to this)


def log_sigmoid_backward_samples(make):
    for shape in UNARY_SHAPES:
        x = make(shape, scale=10.0)
        yield S(make(shape), x, np.asarray(np.exp(-np.abs(x)), x.dtype))


def glu_samples(make):
    yield S(make((4, 6)))
    yield S(make((6, 3)), 0)
    yield S(make((2, 6, 4)), 1)
    yield S(make((2, 0, 4)), -1)


def _glu(x, dim=-1):
    a, b = np.split(x, 2, dim)
    return a / (1 + np.exp(-b))


def vector_norm_samples(make):
    x = make((4, 7), scale=3.0)
    for p in (2, 1, 3, 0.5, math.inf, -math.inf, 0):
        yield S(x, p, [1])
    yield S(x)
    yield S(make((2, 3, 4)), 2, [0, 2], True)
    yield S(make((0, 3)), 2, [0])


def _vector_norm(x, ord=2, dim=None, keepdim=False):
    axes = tuple(range(x.ndim)) if dim is None else tuple(dim)
    a = np.abs(x)
    if ord == math.inf or ord == -math.inf:
        out = (np.max if ord > 0 else np.min)(a, axis=axes, keepdims=keepdim)
    elif ord == 0:
        out = np.sum(a != 0, axis=axes, keepdims=keepdim).astype(x.dtype)
    else:
        out = np.sum(a ** ord, axis=axes, keepdims=keepdim) ** (1 / ord)
    return out


def gelu_backward_samples(make):
    for shape in UNARY_SHAPES:  # the gradient has the input's shape
        yield S(make(shape), make(shape))
        yield S(make(shape), make(shape), approximate="tanh")


def _logit(x, eps=None):
    if eps is not None and eps >= 0:
        x = np.clip(x, eps, 1 - eps)
    return np.log(x / (1 - x))


def _probabilities(make, shape):
    """Floats in (0, 1) (a sigmoid of the sample); integers and bools as they are."""
    a = make(shape)
    if a.dtype.kind not in "fV":
        return a
    return np.asarray(1 / (1 + np.exp(-2 * a.astype(np.float64)))).astype(a.dtype)


def logit_samples(make):
    for shape in UNARY_SHAPES:
        yield S(_probabilities(make, shape))
    yield S(_probabilities(make, (4, 6)), 0.25)
    yield S(_probabilities(make, (3, 5)), eps=0.0)
    yield S(make((3, 5)), eps=-1.0)  # no clamp: NaN outside [0, 1]
    if make.dtype.kind == "f":
        yield S(np.array(SPECIAL_VALUES + [0.5, 1.0], make.dtype))
        yield S(np.array(SPECIAL_VALUES + [0.5, 1.0], make.dtype), 0.1)


def addc_samples(make, divisor=False):
    def third(shape):
        return make(shape, positive=True) if divisor else make(shape)
    for a, b, c in [((3, 5), (3, 5), (3, 5)), ((3, 1), (1, 5), (5,)), ((), (2, 3), (3,)),
                    ((0, 3), (1, 3), (3,)), ((4, 1, 3), (2, 1), (1,)), ((7,), (7,), ())]:
        yield S(make(a), make(b), third(c))
    yield S(make((2, 3)), make((2, 3)), third((2, 3)), value=2)
    if make.dtype.kind in "fV":
        yield S(make((2, 3)), make((2, 3)), third((3,)), value=-0.375)


ELEMENTWISE = [
    unary("neg", Op.NEG, np.negative, NUMBERS),
    unary("abs", Op.ABS, np.abs, NUMBERS),
    unary("negative", Op.NEG, np.negative, NUMBERS),  # PyTorch's aliases
    unary("absolute", Op.ABS, np.abs, NUMBERS),
    unary("sign", Op.SIGN, lambda x: (x > 0) * 1.0 - (x < 0), ALL),  # sign(nan) is 0
    unary("relu", Op.RELU, lambda x: np.where(x < 0, 0, x), NUMBERS),
    unary("exp", Op.EXP, np.exp),
    unary("log", Op.LOG, np.log, NUMBERS, positive=True),
    unary("sqrt", Op.SQRT, np.sqrt, NUMBERS, positive=True),
    unary("rsqrt", Op.RSQRT, lambda x: 1 / np.sqrt(x), NUMBERS, positive=True),
    unary("tanh", Op.TANH, np.tanh),
    unary("sigmoid", Op.SIGMOID, _sigmoid),
    unary("erf", Op.ERF, _erf),
    unary("log1p", Op.LOG1P, np.log1p),
    unary("expm1", Op.EXPM1, np.expm1),
    unary("erfinv", Op.ERFINV, _erfinv),
    unary("sin", Op.SIN, np.sin),
    unary("cos", Op.COS, np.cos),
    unary("tan", Op.TAN, np.tan),
    unary("asin", Op.ASIN, np.arcsin),
    unary("acos", Op.ACOS, np.arccos),
    unary("atan", Op.ATAN, np.arctan),
    unary("arcsin", Op.ASIN, np.arcsin, FLOATS),  # PyTorch's aliases run the same op
    unary("sinh", Op.SINH, np.sinh),
    unary("cosh", Op.COSH, np.cosh),
    unary("asinh", Op.ASINH, np.arcsinh),
    unary("acosh", Op.ACOSH, np.arccosh),
    unary("atanh", Op.ATANH, np.arctanh),
    unary("exp2", Op.EXP2, np.exp2),
    unary("sinc", Op.SINC, np.sinc),
    unary("deg2rad", Op.DEG2RAD, np.deg2rad),
    unary("rad2deg", Op.RAD2DEG, np.rad2deg),
    unary("floor", Op.FLOOR, np.floor, NUMBERS),
    unary("ceil", Op.CEIL, np.ceil, NUMBERS),
    unary("trunc", Op.TRUNC, np.trunc, NUMBERS),
    unary("fix", Op.TRUNC, np.trunc, NUMBERS),
    unary("round", Op.ROUND, np.round, NUMBERS),  # half to even, as numpy's
    unary("round_decimals", Op.ROUND, lambda x: np.round(x, 2), FLOATS,
          call=lambda lib, x: lib.round(x, decimals=2)),
    unary("round_negative_decimals", Op.ROUND, lambda x: np.round(x * 100, -1), FLOATS,
          call=lambda lib, x: lib.round(x * 100, decimals=-1)),
    unary("frac", Op.FRAC, lambda x: x - np.trunc(x), FLOATS),
    unary("sgn", Op.SGN, lambda x: (x > 0) * 1.0 - (x < 0), ALL),
    unary("signbit", Op.SIGNBIT, np.signbit, ALL),
    unary("nan_to_num", Op.NAN_TO_NUM, lambda x: np.nan_to_num(x, nan=0.5, posinf=7.0,
                                                               neginf=-7.0),
          call=lambda lib, x: lib.nan_to_num(x, nan=0.5, posinf=7.0, neginf=-7.0)),
    OpCase("bitwise_not", (Op.BITWISE_NOT,), lambda lib, x: lib.bitwise_not(x), np.invert,
           unary_samples(), INTS + ("bool",)),
    unary("silu", Op.SILU, lambda x: x * _sigmoid(x), FLOATS,
          call=lambda lib, x: lib.nn.functional.silu(x)),
    unary("hardswish", Op.HARDSWISH, lambda x: x * np.clip(x + 3, 0, 6) / 6, FLOATS,
          call=lambda lib, x: lib.nn.functional.hardswish(x)),
    unary("hardsigmoid", Op.HARDSIGMOID, lambda x: np.clip(x + 3, 0, 6) / 6, FLOATS,
          call=lambda lib, x: lib.nn.functional.hardsigmoid(x)),
    unary("gelu", Op.GELU, _gelu, FLOATS, call=lambda lib, x: lib.nn.functional.gelu(x),
          specials=_GELU_SPECIALS),
    unary("gelu_tanh", Op.GELU, lambda x: _gelu(x, "tanh"), FLOATS,
          call=lambda lib, x: lib.nn.functional.gelu(x, approximate="tanh")),
    OpCase("gelu_backward", (Op.GELU_BACKWARD,),
           lambda lib, g, x, **kw: aten(lib).gelu_backward(g, x, **kw),
           _gelu_backward, gelu_backward_samples, FLOATS,
           tolerance={"float64": (1e-7, 1e-9)}),
    unary("softplus", Op.SOFTPLUS, _softplus, FLOATS,
          call=lambda lib, x: lib.nn.functional.softplus(x)),
    unary("softplus_beta", Op.SOFTPLUS, lambda x: _softplus(x, 2.0, 5.0), FLOATS,
          call=lambda lib, x: lib.nn.functional.softplus(x, 2.0, 5.0)),
    unary("logsigmoid", Op.LOG_SIGMOID, lambda x: -np.logaddexp(0, -x), FLOATS,
          call=lambda lib, x: lib.nn.functional.logsigmoid(x)),
    OpCase("log_sigmoid_backward", (Op.LOG_SIGMOID_BACKWARD,),
           lambda lib, g, x, b: aten(lib).log_sigmoid_backward(g, x, b),
           _log_sigmoid_backward, log_sigmoid_backward_samples, FLOATS),
    OpCase("glu", (Op.GLU,), lambda lib, x, *a: lib.nn.functional.glu(x, *a), _glu,
           glu_samples, FLOATS),
    OpCase("vector_norm", (Op.LINALG_VECTOR_NORM,),
           lambda lib, x, *a: aten(lib).linalg_vector_norm(x, *a), _vector_norm,
           vector_norm_samples, FLOATS),
    OpCase("softplus_backward", (Op.SOFTPLUS_BACKWARD,),
           lambda lib, g, x, beta, threshold: aten(lib).softplus_backward(g, x, beta, threshold),
           _softplus_backward, softplus_backward_samples, FLOATS),
    OpCase("clamp", (Op.CLAMP,), lambda lib, x, *bounds: lib.clamp(x, *bounds),
           lambda x, lo=None, hi=None: np.minimum(np.maximum(x, -np.inf if lo is None else lo),
                                                  np.inf if hi is None else hi),
           clamp_samples, NUMBERS),
    OpCase("add_alpha", (Op.ADD,), lambda lib, a, b, alpha: lib.add(a, b, alpha=alpha),
           lambda a, b, alpha: a + alpha * b,
           lambda make: (S(make(a), make(b), 2) for a, b in BINARY_SHAPES[:5]), NUMBERS),
    OpCase("sub_alpha", (Op.SUB,), lambda lib, a, b, alpha: lib.sub(a, b, alpha=alpha),
           lambda a, b, alpha: a - alpha * b,
           lambda make: (S(make(a), make(b), 3) for a, b in BINARY_SHAPES[:5]), NUMBERS,
           # PyTorch's scalar loop (a short tensor, or the tail past its vectors) rounds
           # alpha * other to bfloat16 before subtracting; its vector loop does not
           tolerance={"bfloat16": (8e-3, 4e-3)}),
    binary("add", Op.ADD, np.add),
    binary("sub", Op.SUB, np.subtract, NUMBERS),
    binary("mul", Op.MUL, np.multiply),
    binary("div", Op.DIV, np.true_divide),
    OpCase("pow", (Op.POW,), lambda lib, a, b: lib.pow(a, b), np.power, pow_samples, NUMBERS),
    OpCase("rsub", (Op.SUB,), lambda lib, x: 3 - x, lambda x: 3 - x, unary_samples(), NUMBERS),
    OpCase("rdiv", (Op.DIV,), lambda lib, x: 2 / x, lambda x: 2 / x, unary_samples(True),
           NUMBERS),
    OpCase("rpow", (Op.POW,), lambda lib, x: 2 ** x, lambda x: 2.0 ** x, unary_samples(),
           FLOATS),
    binary("maximum", Op.MAXIMUM, np.maximum, scalars=False),
    binary("minimum", Op.MINIMUM, np.minimum, scalars=False),
    binary("eq", Op.EQ, np.equal),
    binary("ne", Op.NE, np.not_equal),
    binary("lt", Op.LT, np.less),
    binary("le", Op.LE, np.less_equal),
    binary("gt", Op.GT, np.greater),
    binary("ge", Op.GE, np.greater_equal),
    binary("logical_and", Op.LOGICAL_AND, np.logical_and, scalars=False),
    binary("bitwise_and", Op.BITWISE_AND, np.bitwise_and, INTS + ("bool",), scalars=False),
    binary("bitwise_or", Op.BITWISE_OR, np.bitwise_or, INTS + ("bool",), scalars=False),
    binary("bitwise_xor", Op.BITWISE_XOR, np.bitwise_xor, INTS + ("bool",), scalars=False),
    binary("atan2", Op.ATAN2, lambda a, b: np.arctan2(a * 1.0, b * 1.0), scalars=False),
    binary("arctan2", Op.ATAN2, np.arctan2, FLOATS, scalars=False),
    binary("hypot", Op.HYPOT, np.hypot, FLOATS, scalars=False),
    binary("logaddexp", Op.LOGADDEXP, np.logaddexp, FLOATS, scalars=False),
    binary("logaddexp2", Op.LOGADDEXP2, np.logaddexp2, FLOATS, scalars=False),
    binary("xlogy", Op.XLOGY, lambda x, y: np.where(x == 0, 0.0, x * np.log(y))),
    binary("copysign", Op.COPYSIGN, np.copysign),
    binary("heaviside", Op.HEAVISIDE, lambda x, v: np.where(x == 0, v, x > 0), scalars=False),
    binary("nextafter", Op.NEXTAFTER, lambda a, b: np.nextafter(np.float32(a), np.float32(b)),
           ("float32",), scalars=False),
    OpCase("fmod", (Op.FMOD,), lambda lib, a, b: lib.fmod(a, b), np.fmod, divisor_samples,
           NUMBERS),
    OpCase("remainder", (Op.REMAINDER,), lambda lib, a, b: lib.remainder(a, b), np.remainder,
           divisor_samples, NUMBERS),
    OpCase("floor_divide", (Op.FLOOR_DIVIDE,), lambda lib, a, b: lib.floor_divide(a, b),
           np.floor_divide, divisor_samples, NUMBERS),
    OpCase("floordiv_operator", (Op.FLOOR_DIVIDE,), lambda lib, a, b: a // b, np.floor_divide,
           lambda make: (S(make(a), make(b, positive=True)) for a, b in BINARY_SHAPES[:3]),
           NUMBERS),
    OpCase("div_floor", (Op.DIV_MODE,), lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
           np.floor_divide, divisor_samples, NUMBERS),
    OpCase("div_trunc", (Op.DIV_MODE,), lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
           lambda a, b: np.trunc(a / b), divisor_samples, NUMBERS),
    OpCase("clamp_tensors", (Op.CLAMP_TENSOR,), lambda lib, x, lo, hi: lib.clamp(x, lo, hi),
           lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), clamp_tensor_samples, NUMBERS),
    OpCase("where", (Op.WHERE,), lambda lib, c, a, b: lib.where(c, a, b), np.where,
           where_samples, ALL),
    # 16-bit floats: each step rounded in the type, as PyTorch's logit (an error of a few
    # units of the type in x / (1 - x), absolute after the log)
    OpCase("logit", (Op.LOGIT,), lambda lib, x, *a, **k: lib.logit(x, *a, **k), _logit,
           logit_samples, ALL, tolerance={"float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)}),
    OpCase("addcmul", (Op.ADDCMUL,), lambda lib, s, a, b, **k: lib.addcmul(s, a, b, **k),
           lambda s, a, b, value=1: s + value * a * b, addc_samples, NUMBERS),
    OpCase("addcdiv", (Op.ADDCDIV,), lambda lib, s, a, b, **k: s.addcdiv(a, b, **k),
           lambda s, a, b, value=1: s + value * a / b,
           lambda make: addc_samples(make, divisor=True)),
]


# reductions -----------------------------------------------------------------------------
def sum_samples(make):
    yield S(make((3, 5)))
    yield S(make(()))
    yield S(make((3, 5)), 1)
    yield S(make((3, 5)), -1, keepdim=True)
    yield S(make((2, 3, 4)), [0, 2])
    yield S(make((2, 3, 4)), (-1, 0), keepdim=True)
    yield S(make((0, 3)), 0)  # an empty reduction
    yield S(make((0, 3)), 1)
    yield S(make((1, 7, 1)), 1)
    yield S(make((13,)), 0)
    yield S(make(()), 0, keepdim=True)
    yield S(make((2, 3)), 1, dtype="float64")


def prod_samples(make):
    yield S(make((3, 5)))
    yield S(make(()))
    yield S(make((3, 5)), 1)
    yield S(make((3, 5)), -1, keepdim=True)
    yield S(make((2, 3, 4)), 0)
    yield S(make((0, 3)), 0)  # an empty product is 1
    yield S(make((0, 3)), 1)
    yield S(make((1, 7, 1)), 1)
    yield S(make((13,)), 0)
    yield S(make(()), 0, keepdim=True)
    yield S(make((2, 3)), 1, dtype="float64")
    with_zeros = make((4, 5))
    with_zeros[1, 2] = with_zeros[3, 0] = with_zeros[3, 4] = 0
    yield S(with_zeros, 1)


def _prod(x, dim=None, keepdim=False, dtype=None):
    out = np.prod(x, axis=_axis(x, dim), keepdims=keepdim)
    return out if x.dtype.kind == "f" or dtype is not None else out.astype(np.int64)


def extremum_samples(make):
    """Reductions that need a non-empty reduced dim."""
    yield S(make((3, 5)), 1)
    yield S(make((3, 5)), -1, keepdim=True)
    yield S(make((2, 3, 4)), 0)
    yield S(make((0, 3)), 1)  # empty input, non-empty reduced dim
    yield S(make((1, 7, 1)), 1, keepdim=True)
    yield S(make((13,)), 0)
    yield S(make(()), 0)


def _reduce(np_fn):
    return lambda x, dim=None, keepdim=False, dtype=None: np_fn(x, axis=_axis(x, dim),
                                                                keepdims=keepdim)


def _max_dim_ref(pick, arg):
    def ref(x, dim, keepdim=False):
        flat = x.reshape(1) if x.ndim == 0 else x
        d = 0 if x.ndim == 0 else dim
        values, indices = pick(flat, axis=d, keepdims=True), arg(flat, axis=d, keepdims=True)
        if not keepdim or x.ndim == 0:
            values, indices = values.squeeze(d), indices.squeeze(d)
        return values, indices
    return ref


def var_samples(make):
    yield S(make((3, 5)))
    yield S(make((3, 5)), dim=1)
    yield S(make((2, 3, 4)), dim=[0, 2], correction=0, keepdim=True)
    yield S(make((2, 3, 4)), dim=-1, correction=2)
    yield S(make((1, 5)), dim=0)  # one value, correction 1: 0/0
    yield S(make((0, 3)), dim=0)
    yield S(make((7,)), dim=0, correction=0.5)


def softmax_samples(make):
    for shape, dim in [((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -1), ((2, 3, 4), 1), ((), 0),
                       ((0, 3), 1), ((1, 7), -1)]:
        yield S(make(shape), dim)
    yield S(make((4, 6), scale=1000.0), 1)  # exp would overflow without the max shift
    with_inf = make((4, 4))
    with_inf[0, 1] = -np.inf
    with_inf[2] = -np.inf  # a row of -inf gives NaN, as in PyTorch
    with_inf[3, 2] = np.inf  # and so does a row holding +inf
    yield S(with_inf, 1)
    yield S(make((2, 3)), 1, dtype="float64")


def _softmax(x, dim, dtype=None, log=False):
    if x.size == 0:
        return x.copy()
    shifted = x - np.max(x, axis=_axis(x, dim), keepdims=True)
    total = np.sum(np.exp(shifted), axis=_axis(x, dim), keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


REDUCTIONS = [
    OpCase("sum", (Op.SUM,), lambda lib, x, *a, **k: x.sum(*a, **k), _reduce(np.sum),
           sum_samples, ALL),
    OpCase("mean", (Op.MEAN,), lambda lib, x, *a, **k: x.mean(*a, **k), _reduce(np.mean),
           sum_samples),
    OpCase("amax", (Op.AMAX,), lambda lib, x, *a, **k: lib.amax(x, *a, **k), _reduce(np.max),
           extremum_samples, ALL),
    OpCase("amin", (Op.AMIN,), lambda lib, x, *a, **k: lib.amin(x, *a, **k), _reduce(np.min),
           extremum_samples, ALL),
    OpCase("max_all", (Op.AMAX,), lambda lib, x: lib.max(x), np.max,
           lambda make: (S(make(s)) for s in [(3, 5), (), (1,), (2, 3, 4)]), ALL),
    OpCase("max_dim", (Op.MAX_DIM,), lambda lib, x, *a, **k: x.max(*a, **k),
           _max_dim_ref(np.max, np.argmax), extremum_samples, ALL),
    OpCase("min_dim", (Op.MIN_DIM,), lambda lib, x, *a, **k: lib.min(x, *a, **k),
           _max_dim_ref(np.min, np.argmin), extremum_samples, ALL),
    OpCase("argmax", (Op.ARGMAX,), lambda lib, x, *a, **k: x.argmax(*a, **k),
           _reduce(np.argmax), lambda make: [S(make((3, 5))), S(make((2, 3)), keepdim=True),
                                             *extremum_samples(make)], NUMBERS),
    OpCase("argmin", (Op.ARGMIN,), lambda lib, x, *a, **k: lib.argmin(x, *a, **k),
           _reduce(np.argmin), lambda make: [S(make((3, 5))), *extremum_samples(make)],
           NUMBERS),
    OpCase("var", (Op.VAR,), lambda lib, x, **k: x.var(**k),
           lambda x, dim=None, correction=1, keepdim=False:
           np.var(x, axis=_axis(x, dim), ddof=correction, keepdims=keepdim), var_samples),
    OpCase("std", (Op.STD,), lambda lib, x, **k: x.std(**k),
           lambda x, dim=None, correction=1, keepdim=False:
           np.std(x, axis=_axis(x, dim), ddof=correction, keepdims=keepdim), var_samples),
    OpCase("var_mean", (Op.VAR_MEAN,), lambda lib, x, **k: lib.var_mean(x, **k),
           lambda x, dim=None, correction=1, keepdim=False: (
               np.var(x, axis=_axis(x, dim), ddof=correction, keepdims=keepdim),
               np.mean(x, axis=_axis(x, dim), keepdims=keepdim)), var_samples),
    OpCase("std_mean", (Op.STD_MEAN,), lambda lib, x, **k: lib.std_mean(x, **k),
           lambda x, dim=None, correction=1, keepdim=False: (
               np.std(x, axis=_axis(x, dim), ddof=correction, keepdims=keepdim),
               np.mean(x, axis=_axis(x, dim), keepdims=keepdim)), var_samples),
    # each product rounded in the 16-bit type (PyTorch's order along a short dim)
    OpCase("prod", (Op.PROD,), lambda lib, x, *a, **k: x.prod(*a, **k), _prod, prod_samples,
           ALL, tolerance={"float16": (1e-2, 1e-3), "bfloat16": (8e-3, 1e-3)}),
    OpCase("softmax", (Op.SOFTMAX,), lambda lib, x, dim, **k: lib.softmax(x, dim, **k),
           _softmax, softmax_samples),
    OpCase("log_softmax", (Op.LOG_SOFTMAX,),
           lambda lib, x, dim, **k: x.log_softmax(dim, **k),
           lambda x, dim, dtype=None: _softmax(x, dim, log=True), softmax_samples),
]


# linear algebra -------------------------------------------------------------------------
def pairs(*shape_pairs):
    return lambda make: (S(make(a), make(b)) for a, b in shape_pairs)


MATMUL_SHAPES = [  # every rank combination torch.matmul documents, with batch broadcasting
    ((4,), (4,)), ((4,), (4, 3)), ((3, 4), (4,)), ((3, 4), (4, 2)), ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (2, 1, 4, 2)), ((0, 3, 4), (4, 2)),
    ((2, 3, 0), (0, 4)), ((5, 1, 3), (3,)), ((3,), (2, 2, 3, 1)), ((7, 13), (13, 1))]


def addmm_samples(make):
    for bias in [(5,), (3, 5), (1, 5), (3, 1), ()]:
        yield S(make(bias), make((3, 4)), make((4, 5)))
    yield S(make((3, 5)), make((3, 4)), make((4, 5)), beta=2, alpha=3)
    yield S(make((2, 2)), make((2, 0)), make((0, 2)), alpha=2)
    if make.dtype.kind == "f":
        yield S(make((3, 5)), make((3, 4)), make((4, 5)), beta=0.5, alpha=-1.5)
        nan_bias = np.full((3, 5), np.nan, make.dtype)
        yield S(nan_bias, make((3, 4)), make((4, 5)), beta=0)  # beta=0 ignores self


def linear_samples(make):
    for x, w, b in [((3, 4), (5, 4), (5,)), ((3, 4), (5, 4), None), ((4,), (5, 4), (5,)),
                    ((2, 3, 4), (5, 4), (5,)), ((2, 3, 4), (1, 4), None), ((0, 4), (2, 4), (2,))]:
        yield S(make(x), make(w), None if b is None else make(b))


LINALG = [
    OpCase("dot", (Op.DOT,), lambda lib, a, b: lib.dot(a, b), np.dot,
           pairs(((5,), (5,)), ((0,), (0,)), ((1,), (1,)), ((13,), (13,))), NUMBERS),
    OpCase("mv", (Op.MV,), lambda lib, a, b: lib.mv(a, b), np.matmul,
           pairs(((3, 4), (4,)), ((0, 4), (4,)), ((3, 0), (0,)), ((1, 1), (1,))), NUMBERS),
    OpCase("mm", (Op.MM,), lambda lib, a, b: lib.mm(a, b), np.matmul,
           pairs(((3, 4), (4, 5)), ((1, 1), (1, 1)), ((0, 3), (3, 2)), ((3, 0), (0, 2)),
                 ((7, 13), (13, 2))), NUMBERS),
    OpCase("bmm", (Op.BMM,), lambda lib, a, b: lib.bmm(a, b), np.matmul,
           pairs(((2, 3, 4), (2, 4, 5)), ((0, 3, 4), (0, 4, 2)), ((1, 1, 1), (1, 1, 1)),
                 ((3, 2, 0), (3, 0, 5))), NUMBERS),
    OpCase("addmm", (Op.ADDMM,), lambda lib, s, a, b, **k: lib.addmm(s, a, b, **k),
           lambda s, a, b, beta=1, alpha=1: (0 if beta == 0 else beta * s) + alpha * (a @ b),
           addmm_samples, NUMBERS),
    OpCase("matmul", (Op.MATMUL,), lambda lib, a, b: lib.matmul(a, b), np.matmul,
           pairs(*MATMUL_SHAPES), NUMBERS),
    OpCase("matmul_operator", (Op.MATMUL,), lambda lib, a, b: a @ b, np.matmul,
           pairs(*MATMUL_SHAPES[:4])),
    OpCase("linear", (Op.LINEAR,), lambda lib, x, w, b: lib.nn.functional.linear(x, w, b),
           lambda x, w, b: x @ w.T + (0 if b is None else b), linear_samples,
           # a 1-d or a non-contiguous 3-d input: the product, then the bias (rounded
           # twice, as in PyTorch); the others are one addmm, rounded once
           tolerance={"float16": (1e-3, 1e-2)}),
]

# layer norm, group norm and softmax backward ----------------------------------------
LAYER_NORM_SHAPES = [((3, 5), [5]), ((2, 3, 4), [3, 4]), ((4, 1), [1]), ((0, 3), [3]),
                     ((3,), [3]), ((3, 1025), [1025])]  # the last one through the native kernels


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = x.mean(dims, keepdims=True) if x.size else np.zeros(
        x.shape[:x.ndim - len(dims)] + (1,) * len(dims))
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(dims, keepdims=True) + eps) if x.size else mean
    out = (x - mean) * rstd
    out = out if weight is None else out * weight
    return (out if bias is None else out + bias), mean, rstd


def layer_norm_samples(make):
    for shape, normalized in LAYER_NORM_SHAPES:
        yield S(make(shape), normalized, make(normalized), make(normalized), 1e-5)
    yield S(make((3, 5)), [5], None, None, 1e-3)
    yield S(make((2, 3, 4)), [4], make((4,)), None, 1e-5)
    yield S(make((2, 255)), [255], None, make((255,)), 1e-5)


def _layer_norm_backward(g, x, normalized_shape, mean, rstd, weight=None, bias=None,
                         output_mask=(True, True, True)):
    axis = x.ndim - len(normalized_shape)
    dims, batch = tuple(range(axis, x.ndim)), tuple(range(axis))
    xhat = (x - mean) * rstd
    gw = g if weight is None else g * weight
    out = []
    if output_mask[0]:
        out.append((gw - gw.mean(dims, keepdims=True)
                    - xhat * (gw * xhat).mean(dims, keepdims=True)) * rstd)
    if output_mask[1] and weight is not None:
        out.append((g * xhat).sum(batch))
    if output_mask[2] and bias is not None:
        out.append(g.sum(batch))
    return tuple(out)


def layer_norm_backward_samples(make):
    for shape, normalized in LAYER_NORM_SHAPES:
        if 0 in shape:
            continue
        stats = shape[:len(shape) - len(normalized)] + (1,) * len(normalized)
        yield S(make(shape), make(shape), normalized, make(stats), make(stats, positive=True),
                make(normalized), make(normalized), [True, True, True])
    yield S(make((3, 5)), make((3, 5)), [5], make((3, 1)), make((3, 1), positive=True), None,
            None, [True, False, False])
    yield S(make((2, 3, 4)), make((2, 3, 4)), [4], make((2, 3, 1)),
            make((2, 3, 1), positive=True), make((4,)), None, [False, True, False])


def _defined(out):
    return tuple(t for t in out if t is not None)  # (the masked-out gradients are None)


def _group_norm(x, weight, bias, n, c, hw, group, eps):
    grouped = x.reshape(n, group, -1)
    mean, var = grouped.mean(2), grouped.var(2)
    rstd = 1 / np.sqrt(var + eps)
    out = ((grouped - mean[..., None]) * rstd[..., None]).reshape(x.shape)
    channel = (1, c) + (1,) * (x.ndim - 2)
    out = out if weight is None else out * weight.reshape(channel)
    return (out if bias is None else out + bias.reshape(channel)), mean, rstd


def group_norm_samples(make):
    for shape, group, weight, bias in [((2, 6, 5), 3, True, True), ((3, 4, 2, 3), 2, True, False),
                                       ((2, 6), 6, False, False), ((4, 3, 7), 1, False, True),
                                       ((2, 8, 40), 4, True, True)]:
        n, c = shape[:2]
        yield S(make(shape), make((c,)) if weight else None, make((c,)) if bias else None,
                n, c, int(np.prod(shape[2:])), group, 1e-5)


def _group_norm_backward(g, x, mean, rstd, weight, n, c, hw, group, output_mask):
    """As layer norm's over each group, from the mean and rstd given."""
    shape = (n, group, c // group, hw)
    g4, x4 = g.reshape(shape), x.reshape(shape)
    m, r = mean.reshape(n, group, 1, 1), rstd.reshape(n, group, 1, 1)
    xhat = (x4 - m) * r
    gw = g4 if weight is None else g4 * weight.reshape(1, group, -1, 1)
    out = []
    if output_mask[0]:
        out.append((r * (gw - gw.mean((2, 3), keepdims=True) -
                         xhat * (gw * xhat).mean((2, 3), keepdims=True))).reshape(x.shape))
    if output_mask[1] and weight is not None:
        out.append((g4 * xhat).sum((0, 3)).reshape(c))
    if output_mask[2]:
        out.append(g4.sum((0, 3)).reshape(c))
    return tuple(out)


def group_norm_backward_samples(make):
    for shape, group, weight, mask in [((2, 6, 5), 3, True, [True, True, True]),
                                       ((3, 4, 2, 3), 2, False, [True, False, False]),
                                       ((2, 8, 40), 4, True, [False, True, False]),
                                       ((4, 3, 7), 1, True, [True, False, True])]:
        # (no weight, no grad_bias: PyTorch's kernel makes it like the weight)
        n, c = shape[:2]
        yield S(make(shape), make(shape), make((n, group)), make((n, group), positive=True),
                make((c,)) if weight else None, n, c, int(np.prod(shape[2:])), group, mask)


def softmax_backward_samples(make):
    for shape, dim in [((3, 5), 1), ((3, 5), 0), ((2, 3, 4), -1), ((0, 3), 1), ((3, 1025), 1),
                       ((1025, 3), 0)]:
        yield S(make(shape), make(shape, positive=True), dim, make.dtype.name)


def _softmax_backward(g, y, dim, input_dtype, log=False):
    if log:
        return g - np.exp(y) * g.sum(dim, keepdims=True)
    return y * (g - (g * y).sum(dim, keepdims=True))


NORMALIZATION = [
    OpCase("native_layer_norm", (Op.NATIVE_LAYER_NORM,),
           lambda lib, *a: aten(lib).native_layer_norm(*a), _layer_norm, layer_norm_samples,
           tolerance={"float32": (1e-4, 1e-5)}),
    OpCase("native_layer_norm_backward", (Op.NATIVE_LAYER_NORM_BACKWARD,),
           lambda lib, *a: _defined(aten(lib).native_layer_norm_backward(*a)),
           lambda *a: _layer_norm_backward(*a), layer_norm_backward_samples,
           # PyTorch's 16-bit kernels round terms before their sums; kiln sums in float32
           # (nearer the float64 reference than PyTorch in every bfloat16 sample)
           tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2),
                      "bfloat16": (2e-2, 4e-2)}),
    OpCase("native_group_norm", (Op.NATIVE_GROUP_NORM,),
           lambda lib, *a: aten(lib).native_group_norm(*a), _group_norm, group_norm_samples,
           tolerance={"float32": (1e-4, 1e-5)}),
    OpCase("native_group_norm_backward", (Op.NATIVE_GROUP_NORM_BACKWARD,),
           lambda lib, *a: _defined(aten(lib).native_group_norm_backward(*a)),
           _group_norm_backward, group_norm_backward_samples,
           tolerance={"float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2),
                      "bfloat16": (2e-2, 4e-2)}),
    OpCase("softmax_backward_data", (Op.SOFTMAX_BACKWARD_DATA,),
           lambda lib, g, y, dim, dt: aten(lib)._softmax_backward_data(g, y, dim,
                                                                       getattr(lib, dt)),
           _softmax_backward, softmax_backward_samples,
           tolerance={"float32": (1e-4, 1e-4)}),
    OpCase("log_softmax_backward_data", (Op.LOG_SOFTMAX_BACKWARD_DATA,),
           lambda lib, g, y, dim, dt: aten(lib)._log_softmax_backward_data(g, y, dim,
                                                                           getattr(lib, dt)),
           lambda *a: _softmax_backward(*a, log=True), softmax_backward_samples,
           tolerance={"float32": (1e-4, 1e-4)}),
]

CASES = ELEMENTWISE + REDUCTIONS + NORMALIZATION + LINALG
