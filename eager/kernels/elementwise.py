"""Elementwise ops: unary, binary with broadcasting, comparisons, where, clamp, and the
in-place arithmetic variants. Each op is a numpy function plus a dtype rule."""
from __future__ import annotations

import math

import numpy as np

from eager.kernels._common import (compute_np, float_of, meta_from_rule, operand, promote,
                                   register, result, scalar_value, type_word)
from eager.kernels._erf import erf
from eager.shapes import broadcast_shapes
from eager.tensor import Tensor, wrap_scalar
from ir import dtypes
from ir.ops import Op

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _sigmoid(x):
    # exp of a non-positive number only, so no overflow warning for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _sign(x):
    if x.dtype == np.bool_:
        return x
    # (x > 0) - (x < 0), as PyTorch: sign(nan) is 0, not numpy's nan
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


def _gelu(x, approximate):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf(x / math.sqrt(2.0)))


def _gelu_backward(g, x, approximate):
    if approximate == "tanh":
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)
        t = np.tanh(inner)
        d_inner = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x ** 2)
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * d_inner)
    cdf = 0.5 * (1 + erf(x / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return g * (cdf + x * pdf)


# unary ops: numpy function, and whether integer inputs give a float result
_UNARY = {
    Op.NEG: (np.negative, False),
    Op.ABS: (np.abs, False),
    Op.SIGN: (_sign, False),
    Op.RELU: (lambda x: np.where(x < 0, 0, x).astype(x.dtype, copy=False), False),  # keeps nan
    Op.EXP: (np.exp, True),
    Op.LOG: (np.log, True),
    Op.SQRT: (np.sqrt, True),
    Op.RSQRT: (lambda x: 1 / np.sqrt(x), True),
    Op.TANH: (np.tanh, True),
    Op.SIGMOID: (_sigmoid, True),
    Op.SILU: (lambda x: x * _sigmoid(x), True),
    Op.ERF: (erf, True),
}


def _floating_only(self, kernel_name: str) -> None:
    """PyTorch has no integer kernel for activations such as silu and gelu."""
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel_name}\" not implemented for "
                                  f"'{type_word(self.dtype)}'")


def _unary_rule(op, to_float):
    def rule(self):
        if op is Op.NEG and self.dtype is dtypes.bool_:
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. "
                               "If you are trying to invert a mask, use the `~` or "
                               "`logical_not()` operator instead.")
        if op is Op.SILU:
            _floating_only(self, "silu_cpu")
        return self._shape, float_of(self.dtype) if to_float else self.dtype
    rule.__name__ = op.schema.name
    return rule


def _unary_kernel(rule, fn):
    def kernel(self):
        shape, dt = rule(self)
        with np.errstate(all="ignore"):
            return result(fn(operand(self, compute_np(dt))), dt)
    kernel.__name__ = rule.__name__ + "_cpu"
    return kernel


for _op, (_fn, _to_float) in _UNARY.items():
    _rule = _unary_rule(_op, _to_float)
    register(_op, _unary_kernel(_rule, _fn), meta_from_rule(_rule))


def gelu_rule(self, *, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")
    _floating_only(self, "GeluKernelImpl")
    return self._shape, self.dtype


def gelu_cpu(self, *, approximate="none"):
    _, dt = gelu_rule(self, approximate=approximate)
    with np.errstate(all="ignore"):
        return result(_gelu(operand(self, compute_np(dt)), approximate), dt)


register(Op.GELU, gelu_cpu, meta_from_rule(gelu_rule))


def gelu_backward_rule(grad_output, self, *, approximate="none"):
    gelu_rule(self, approximate=approximate)
    return broadcast_shapes(grad_output._shape, self._shape), promote(grad_output, self)


def gelu_backward_cpu(grad_output, self, *, approximate="none"):
    _, dt = gelu_backward_rule(grad_output, self, approximate=approximate)
    ct = compute_np(dt)
    with np.errstate(all="ignore"):
        return result(_gelu_backward(operand(grad_output, ct), operand(self, ct), approximate), dt)


register(Op.GELU_BACKWARD, gelu_backward_cpu, meta_from_rule(gelu_backward_rule))


def clamp_rule(self, min=None, max=None):
    if min is None and max is None:
        raise RuntimeError("clamp: At least one of 'min' or 'max' must not be None")
    bounds = [wrap_scalar(scalar_value(b)) for b in (min, max) if b is not None]
    return self._shape, promote(self, *bounds)  # clamp(int tensor, 0.5) is float32


def clamp_cpu(self, min=None, max=None):
    _, dt = clamp_rule(self, min, max)
    a = operand(self, compute_np(dt))
    lo = -np.inf if min is None else scalar_value(min)
    hi = np.inf if max is None else scalar_value(max)
    return result(np.minimum(np.maximum(a, lo), hi), dt)


register(Op.CLAMP, clamp_cpu, meta_from_rule(clamp_rule))


# binary ops: numpy function and the kind of result
def _true_divide(a, b):
    return np.true_divide(a, b)


def _pow(a, b):
    if a.dtype.kind != "i" or not np.any(b < 0):
        return np.power(a, b)
    # PyTorch's integer power: a negative exponent gives 0, except for bases 1 and -1
    out = np.power(a, np.where(b < 0, 0, b))
    reciprocal = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
    return np.where(b < 0, reciprocal, out).astype(out.dtype)


def _check_power(exponent, dt) -> None:
    if dt is dtypes.bool_ and not exponent._wrapped:
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    if exponent._wrapped and not dt.is_floating_point and exponent._np() < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")


_ARITHMETIC = {Op.MUL: np.multiply, Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum}
_COMPARE = {Op.EQ: np.equal, Op.NE: np.not_equal, Op.LT: np.less, Op.LE: np.less_equal,
            Op.GT: np.greater, Op.GE: np.greater_equal, Op.LOGICAL_AND: np.logical_and}


def _binary_rule(name, kind):
    def rule(self, other):
        shape = self._shape if self._shape == other._shape else \
            broadcast_shapes(self._shape, other._shape)
        dt = promote(self, other)
        if kind == "compare":
            return shape, dtypes.bool_
        if kind == "divide":
            return shape, float_of(dt)
        if kind == "power":
            _check_power(other, dt)
        return shape, dt
    rule.__name__ = name
    return rule


def _binary_kernel(rule, fn, kind):
    def kernel(self, other):
        shape, out_dt = rule(self, other)
        ct = compute_np(promote(self, other) if kind == "compare" else out_dt)
        with np.errstate(all="ignore"):
            r = fn(operand(self, ct), operand(other, ct))
        return result(r, out_dt)
    kernel.__name__ = rule.__name__ + "_cpu"
    return kernel


def _register_binary(op, fn, kind):
    rule = _binary_rule(op.schema.name, kind)
    register(op, _binary_kernel(rule, fn, kind), meta_from_rule(rule))
    return rule


for _op, _fn in _ARITHMETIC.items():
    _register_binary(_op, _fn, "arithmetic")
for _op, _fn in _COMPARE.items():
    _register_binary(_op, _fn, "compare")
_register_binary(Op.POW, _pow, "power")
_div_rule = _register_binary(Op.DIV, _true_divide, "divide")


def _check_alpha(name, dt, alpha):
    if isinstance(alpha, float) and not dt.is_floating_point:
        raise RuntimeError(f"For integral input tensors, argument alpha must not be a floating "
                           f"point number. ({name})")


def _add_sub(name, np_fn):
    arith = _binary_rule(name, "arithmetic")

    def rule(self, other, *, alpha=1):
        shape, dt = arith(self, other)
        if name == "sub" and dtypes.bool_ in (self.dtype, other.dtype):
            if dt is dtypes.bool_:
                raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                                   "supported. Use the `^` or `logical_xor()` operator instead.")
            raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                               "supported. If you are trying to invert a mask, use the `~` or "
                               "`logical_not()` operator instead.")
        _check_alpha(name, dt, alpha)
        return shape, dt

    def kernel(self, other, *, alpha=1):
        shape, dt = rule(self, other, alpha=alpha)
        ct = compute_np(dt)
        b = operand(other, ct)
        if alpha != 1:
            b = b * scalar_value(alpha)
        return result(np_fn(operand(self, ct), b), dt)
    rule.__name__ = name
    kernel.__name__ = name + "_cpu"
    return rule, kernel


for _op, _name, _fn in ((Op.ADD, "add", np.add), (Op.SUB, "sub", np.subtract)):
    _rule, _kernel = _add_sub(_name, _fn)
    register(_op, _kernel, meta_from_rule(_rule))


def where_rule(condition, self, other):
    if condition.dtype is not dtypes.bool_:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {type_word(condition.dtype)}")
    return broadcast_shapes(condition._shape, self._shape, other._shape), promote(self, other)


def where_cpu(condition, self, other):
    _, dt = where_rule(condition, self, other)
    return result(np.where(condition._np(), operand(self, dt.np), operand(other, dt.np)), dt)


register(Op.WHERE, where_cpu, meta_from_rule(where_rule))


# in place: compute as the out-of-place op, check the result fits `self`, write it
def _inplace(out_of_place):
    def kernel(self, *args, **kwargs):
        out = out_of_place(self, *args, **kwargs)
        _check_inplace(self, out)
        np.copyto(self._np(), out._np(), casting="unsafe")
        return self
    kernel.__name__ = out_of_place.__name__.replace("_cpu", "_inplace_cpu")
    return kernel


def _check_no_internal_overlap(self: Tensor) -> None:
    """An expanded tensor (stride 0) cannot take a computed result: its elements alias."""
    if any(stride == 0 and size > 1 for size, stride in zip(self._shape, self._stride)):
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the "
                           "tensor before performing the operation.")


def _check_inplace(self: Tensor, out: Tensor) -> None:
    _check_no_internal_overlap(self)
    if out._shape != self._shape:
        raise RuntimeError(f"output with shape {list(self._shape)} doesn't match the broadcast "
                           f"shape {list(out._shape)}")
    if dtypes.promote_types(self.dtype, out.dtype) is not self.dtype and \
            out.dtype.category > self.dtype.category:
        raise RuntimeError(f"result type {type_word(out.dtype)} can't be cast to the desired "
                           f"output type {type_word(self.dtype)}")


def _inplace_meta(out_of_place_meta):
    def meta(self, *args, **kwargs):
        _check_inplace(self, out_of_place_meta(self, *args, **kwargs))
        return self
    return meta


for _op, _base in ((Op.ADD_, Op.ADD), (Op.SUB_, Op.SUB), (Op.MUL_, Op.MUL), (Op.DIV_, Op.DIV),
                   (Op.CLAMP_, Op.CLAMP)):
    from eager.dispatcher import ATEN, DispatchKey
    register(_op, _inplace(ATEN[_base].kernels[DispatchKey.CPU][0]),
             _inplace_meta(ATEN[_base].kernels[DispatchKey.Meta][0]))


def zero_cpu(self):
    self._np()[...] = 0
    return self


def fill_cpu(self, value):
    self._np()[...] = scalar_value(value)
    return self


def copy_meta(self, src):
    _check_no_internal_overlap(self)
    shape = broadcast_shapes(self._shape, src._shape)
    if shape != tuple(self._shape):
        raise RuntimeError(f"output with shape {list(self._shape)} doesn't match the broadcast "
                           f"shape {list(shape)}")
    return self


def copy_cpu(self, src):
    copy_meta(self, src)
    np.copyto(self._np(), src._host_np(), casting="unsafe")
    return self


def _identity_meta(self, *args):
    return self


register(Op.ZERO_, zero_cpu, _identity_meta)
register(Op.FILL_, fill_cpu, _identity_meta)
register(Op.COPY_, copy_cpu, copy_meta)
