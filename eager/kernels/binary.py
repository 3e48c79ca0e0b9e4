"""The records of the binary pointwise ops, comparisons and where (ir/records.py), and
of the in-place arithmetic: names, numpy function and dtype rule, code emitter and
derivative, one block per op. Python numbers given for a tensor are zero-dim wrapped
numbers, so they promote as PyTorch's scalars do."""
from __future__ import annotations

import numpy as np

from eager.dispatcher import ATEN
from eager.factories import zeros, zeros_like
from eager.kernels._common import (float_of, integral_only, promote, register, scalar_value,
                                   type_word)
from eager.kernels.elementwise import check_no_internal_overlap
from eager.kernels.gradients import sum_to
from eager.kernels.rounding import (ROUNDED_DIVISIONS, emit_floor_divide, integer_division,
                                    no_bool)
from ir.records import RECORDS, Pointwise, declare
from eager.shapes import broadcast_shapes
from eager.tensor import ops
from ir import dtypes
from ir.ops import Op


def _check_alpha(dt, self, other, alpha=1, name="add"):
    if isinstance(alpha, float) and not dt.is_floating_point:
        raise RuntimeError(f"For integral input tensors, argument alpha must not be a floating "
                           f"point number. ({name})")


def _check_sub(dt, self, other, alpha=1):
    if dtypes.bool_ in (self.dtype, other.dtype):
        if dt is dtypes.bool_:
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not "
                               "supported. Use the `^` or `logical_xor()` operator instead.")
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                           "supported. If you are trying to invert a mask, use the `~` or "
                           "`logical_not()` operator instead.")
    _check_alpha(dt, self, other, alpha, "sub")


ADD = declare(Op.ADD, function=True, method=True, pointwise=Pointwise(
    "promote", np.add, emit=lambda E, a, b: E.add(a, b), check=_check_alpha,
    check_attrs=True, scaled="alpha"), inplace=Op.ADD_)


@ADD.derivative("AddBackward0", "self other", save="self_sizes other_sizes alpha")
def _(ctx, g):
    return sum_to(g, ctx.self_sizes), sum_to(g if ctx.alpha == 1 else g * ctx.alpha,
                                             ctx.other_sizes)


SUB = declare(Op.SUB, function=True, method=True, pointwise=Pointwise(
    "promote", np.subtract, emit=lambda E, a, b: E.sub(a, b), check=_check_sub,
    scaled="alpha"), inplace=Op.SUB_)


@SUB.derivative("SubBackward0", "self other", save="self_sizes other_sizes alpha")
def _(ctx, g):
    return sum_to(g, ctx.self_sizes), sum_to(ops.neg(g) if ctx.alpha == 1 else g * -ctx.alpha,
                                             ctx.other_sizes)


MUL = declare(Op.MUL, function=True, method=True, pointwise=Pointwise(
    "promote", np.multiply, emit=lambda E, a, b: E.mul(a, b), wide_scalar=True),
    inplace=Op.MUL_)


@MUL.derivative("MulBackward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return (sum_to(g * b, a._shape) if ctx.needs_input_grad(0) else None,
            sum_to(g * a, b._shape) if ctx.needs_input_grad(1) else None)


DIV = declare(Op.DIV, function=True, method=True, pointwise=Pointwise(
    "divide", np.true_divide, emit=lambda E, a, b: E.div(a, b), wide_scalar=True),
    inplace=Op.DIV_)


@DIV.derivative("DivBackward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return (sum_to(g / b, a._shape) if ctx.needs_input_grad(0) else None,
            # PyTorch's order (div_tensor_other_backward), which 16-bit floats round by
            sum_to(ops.neg(g) * ((a / b) / b), b._shape) if ctx.needs_input_grad(1) else None)


# div(rounding_mode=...), PyTorch's div.Tensor_mode: "trunc" and "floor" keep integers
# (their functions are rounding.py's); eager's div calls it for a rounding mode
def _divide(a, b, rounding_mode):
    return ROUNDED_DIVISIONS[rounding_mode](a, b)


def _emit_divide(E, a, b, rounding_mode):
    if rounding_mode == "floor":
        return emit_floor_divide(E, a, b)
    quotient = E.div(a, b)
    return quotient if rounding_mode is None else E.round("trunc", quotient)


def _divide_dtype(self, other, rounding_mode):
    if rounding_mode not in ROUNDED_DIVISIONS:
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' "
                           f"but found '{rounding_mode}'")
    dt = promote(self, other)
    return float_of(dt) if rounding_mode is None else dt


def _check_divide(dt, self, other, rounding_mode):
    if rounding_mode is not None:
        no_bool(f"div_{rounding_mode}_cpu")(dt)


# integers stay with numpy (float_math): a generated integer division by zero is undefined
DIV_MODE = declare(Op.DIV_MODE, pointwise=Pointwise(
    "promote", integer_division("divide", _divide), emit=_emit_divide, float_math=True,
    dtype=_divide_dtype, check=_check_divide, own_half=True))
declare(Op.DIV_MODE_, inplace_of=Op.DIV_MODE)


@DIV_MODE.derivative("DivBackward2", "self other", save="self other rounding_mode")
def _(ctx, g):
    if ctx.rounding_mode is None:
        return DIV.rule.formula(ctx, g)
    return (zeros(ctx.self._shape, dtype=g.dtype, device=g.device),
            zeros(ctx.other._shape, dtype=g.dtype, device=g.device))


def _pow(a, b):
    if a.dtype.kind == "f" and b.shape != np.broadcast_shapes(a.shape, b.shape) and \
            np.any(b == 0.5):
        # numpy's power takes an exponent of 0.5 read repeatedly (a number, a broadcast
        # dim) for sqrt, where pow(-inf, 0.5) is inf and pow(-0.0, 0.5) is 0.0
        b = np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape)).copy()
    if a.dtype.kind != "i" or not np.any(b < 0):
        return np.power(a, b)
    # PyTorch's integer power: a negative exponent gives 0, except for bases 1 and -1
    out = np.power(a, np.where(b < 0, 0, b))
    reciprocal = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
    return np.where(b < 0, reciprocal, out).astype(out.dtype)


def _check_power(dt, self, exponent) -> None:
    if dt is dtypes.bool_ and not exponent._wrapped:
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    # (a number's value is unknown to graph capture, whose stand-ins are meta tensors:
    # the kernel that runs the graph checks it)
    if exponent._wrapped and not dt.is_floating_point and not exponent.is_meta and \
            exponent._np() < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")


_FLOATS = frozenset({"float32", "float64", "float16", "bfloat16"})
_PRODUCT_FLOATS = frozenset({"float32", "float64", "bfloat16"})
"""The types PyTorch's pow_tensor_scalar_optimized_kernel runs: pow(x, 3) as x * x * x
and pow(x, -2) as 1 / (x * x), each step rounded to the type (bfloat16 x ** 3 differed
from kiln's pow rounded once in 685 of 3072 elements; a GELU's tanh approximation takes
x ** 3). float16 takes std::pow, rounded once. pow(x, 2) is x * x in every float type:
the square rounded once, which a correctly rounded pow gives too (vmath's float pow is;
its general path took 1.1 ms where x * x takes 0.1 ms over 2 MB of float32 in a
compiled row kernel: the variance of a batch norm written ((x - m) ** 2).mean())."""

POW = declare(Op.POW, function=True, method=True, pointwise=Pointwise(
    "power", _pow, emit=lambda E, a, b: E.math("pow", a, b), float_math=True,
    check=_check_power, number_forms=(
        (1, 0.5, Op.SQRT, _FLOATS), (1, -0.5, Op.RSQRT, _FLOATS),
        (1, 2, lambda apply, x: apply(Op.MUL, x, x), _FLOATS),
        (1, 3, lambda apply, x: apply(Op.MUL, apply(Op.MUL, x, x), x), _PRODUCT_FLOATS),
        (1, -2, lambda apply, x: apply(Op.DIV, 1.0, apply(Op.MUL, x, x)), _PRODUCT_FLOATS))),
    inplace=Op.POW_)


@POW.derivative("PowBackward1", "self exponent", save="self exponent result",
                overloads={"PowBackward0": lambda a: a["exponent"]._wrapped,
                           "PowBackward2": lambda a: a["self"]._wrapped})
def _(ctx, g):
    a, e = ctx.self, ctx.exponent
    grad_a = grad_e = None
    if ctx.needs_input_grad(0):
        # a Python number's exponent less one in Python (exactly, as PyTorch's Scalar
        # arithmetic): its wrapped tensor's dtype is the default one, float32
        less_one = e._np().item() - 1 if e._wrapped else e - 1
        # PyTorch's order (pow_backward), which 16-bit floats round by; the exponent
        # second, where a number stays wide as in PyTorch's Scalar * Tensor
        grad_a = ops.where(ops.eq(e, 0), 0.0, g * (ops.pow(a, less_one) * e))
        grad_a = sum_to(grad_a, a._shape)
    if ctx.needs_input_grad(1):
        safe = ops.where(ops.logical_and(ops.eq(a, 0), ops.ge(e, 0)), 1.0, a)
        grad_e = sum_to(g * ctx.result * ops.log(safe), e._shape)
    return grad_a, grad_e


def _first_on_ties(numpy):
    """numpy's maximum or minimum (NaN wins), giving `a` where -0.0 ties with +0.0, as
    PyTorch's std::max and std::min do: numpy's loops give the second operand of a tie
    (as x86's maxps does; the special-values table, tests/compiler/test_special_values.py,
    checks it), so the operands go in swapped, at no cost."""
    def extremum(a, b):
        return numpy(b, a)
    extremum.__name__ = numpy.__name__
    return extremum


def _extremum(op, numpy, name, wins, larger: bool):
    record = declare(op, function=True, method=True, pointwise=Pointwise(
        "promote", _first_on_ties(numpy),
        emit=lambda E, a, b: E.max(a, b) if larger else E.min(a, b)))

    @record.derivative(name, "self other", save="self other")
    def _(ctx, g):
        a, b = ctx.self, ctx.other
        tie = ops.eq(a, b)
        half = g * 0.5
        return (sum_to(ops.where(tie, half, g * wins(a, b)), a._shape),
                sum_to(ops.where(tie, half, g * wins(b, a)), b._shape))
    return record


MAXIMUM = _extremum(Op.MAXIMUM, np.maximum, "MaximumBackward0", ops.gt, larger=True)
MINIMUM = _extremum(Op.MINIMUM, np.minimum, "MinimumBackward0", ops.lt, larger=False)


# comparisons: bool results, no gradient ------------------------------------------------
def _comparison(op, inplace, numpy, method):
    return declare(op, function=True, method=True, differentiable=False, pointwise=Pointwise(
        "compare", numpy, emit=lambda E, a, b: getattr(E, method)(a, b)), inplace=inplace)


# (x.eq_(y) writes 1 and 0 into x's type)
EQ = _comparison(Op.EQ, Op.EQ_, np.equal, "eq")
NE = _comparison(Op.NE, Op.NE_, np.not_equal, "ne")
LT = _comparison(Op.LT, Op.LT_, np.less, "lt")
LE = _comparison(Op.LE, Op.LE_, np.less_equal, "le")
GT = _comparison(Op.GT, Op.GT_, np.greater, "gt")
GE = _comparison(Op.GE, Op.GE_, np.greater_equal, "ge")


def _zero_gradients(ctx, g):
    return zeros_like(g), zeros(ctx.other_sizes, dtype=g.dtype, device=g.device)


for _op, _node in ((Op.EQ_, "Eq"), (Op.NE_, "Ne"), (Op.LT_, "Lt"), (Op.LE_, "Le"),
                   (Op.GT_, "Gt"), (Op.GE_, "Ge")):  # a float x.eq_(y): zero gradients
    RECORDS[_op].derivative(f"{_node}Backward1", "self other", save="other_sizes", overloads={
        f"{_node}Backward0": lambda a: a["other"]._wrapped})(_zero_gradients)
LOGICAL_AND = declare(Op.LOGICAL_AND, function=True, method=True, differentiable=False,
                      pointwise=Pointwise("logical", np.logical_and,
                                          emit=lambda E, a, b: E.and_(a, b)))


# bitwise: integers and bools (&, |, ^), the promoted type, no gradient ------------------
def _bitwise(op, numpy, emit):
    return declare(op, function=True, method=True, differentiable=False, pointwise=Pointwise(
        "promote", numpy, emit=emit, check=integral_only(op.schema.name + "_cpu"), quiet=True))


BITWISE_AND = _bitwise(Op.BITWISE_AND, np.bitwise_and, lambda E, a, b: E.and_(a, b))
BITWISE_OR = _bitwise(Op.BITWISE_OR, np.bitwise_or, lambda E, a, b: E.or_(a, b))
BITWISE_XOR = _bitwise(Op.BITWISE_XOR, np.bitwise_xor, lambda E, a, b: E.xor(a, b))


# where ---------------------------------------------------------------------------------
def _where_dtype(condition, self, other):
    if condition.dtype is not dtypes.bool_:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor "
                           f"with dtype {type_word(condition.dtype)}")
    dt = promote(self, other)
    if dt not in dtypes.HALF:  # (PyTorch's 16-bit float results take any number: inf)
        for t in (self, other):
            if t._wrapped and t.device.type != "meta":  # a Python number (captured:
                dtypes.checked_scalar(t.item(), dt)  # checked when it ran in eager)
    return dt


WHERE = declare(Op.WHERE, function=True, pointwise=Pointwise(
    "promote", lambda c, a, b: np.where(c != 0, a, b),
    emit=lambda E, c, a, b: E.select(E.truth(c), a, b), dtype=_where_dtype, quiet=True))


@WHERE.derivative("WhereBackward0", "self other", save="condition self_sizes other_sizes")
def _(ctx, g):
    c = ctx.condition
    return (sum_to(ops.where(c, g, 0.0), ctx.self_sizes),
            sum_to(ops.where(c, 0.0, g), ctx.other_sizes))


# in place ------------------------------------------------------------------------------
def _zero(self):
    self._np()[...] = 0
    return self


def _fill(self, value):
    self._np()[...] = dtypes.checked_scalar(scalar_value(value), self.dtype)
    return self


def _copy_meta(self, src):
    check_no_internal_overlap(self)
    shape = broadcast_shapes(self._shape, src._shape)
    if shape != tuple(self._shape):
        raise RuntimeError(f"output with shape {list(self._shape)} doesn't match the broadcast "
                           f"shape {list(shape)}")
    return self


def _copy(self, src):
    _copy_meta(self, src)
    np.copyto(self._np(), src._host_np(), casting="unsafe")
    return self


def _unchanged(self, *args):
    return self


ZERO_ = declare(Op.ZERO_, method=True)
register(Op.ZERO_, _zero, _unchanged)


@ZERO_.derivative("ZeroBackward0", "self")
def _(ctx, g):
    return zeros_like(g)


FILL_ = declare(Op.FILL_, method=True)
register(Op.FILL_, _fill, _unchanged)


@FILL_.derivative("FillBackward2", "self")
def _(ctx, g):
    return zeros_like(g)


COPY_ = declare(Op.COPY_, method=True)
register(Op.COPY_, _copy, _copy_meta)
ATEN[Op.COPY_].devices_may_differ = True  # as PyTorch's: the device's kernel runs (CUDA's)


@COPY_.derivative("CopyBackwards", "self src", save="src_sizes src_dtype src_device")
def _(ctx, g):
    grad_src = None
    if ctx.needs_input_grad(1):
        grad_src = ops._to_copy(sum_to(g, ctx.src_sizes), dtype=ctx.src_dtype,
                                device=ctx.src_device)
    return zeros_like(g), grad_src
