"""The records of the pointwise ops of three tensors that optimisers use: addcmul (self +
value * tensor1 * tensor2) and addcdiv (self + value * tensor1 / tensor2), with their
in-place forms. The three tensors broadcast and promote together; `value` converts to
their type as PyTorch's Scalar does (an integer type's truncated, checked for overflow).
The 16-bit floats compute in float32 and round once, as PyTorch's kernels do."""
from __future__ import annotations

import numpy as np

from eager.kernels._common import type_word
from eager.kernels.gradients import sum_to
from ir import dtypes
from ir.records import Pointwise, declare
from ir.ops import Op


def _value(value, compute: np.dtype):
    """`value` as a number of the compute type (checked as c10's checked_convert)."""
    return dtypes.checked_scalar(value, dtypes.from_numpy(compute))[()]


def _check_value(dt, *tensors, value=1):
    _value(value, np.dtype(np.float32) if dt in dtypes.HALF else dt.np)


def _addcmul(self, tensor1, tensor2, value=1):
    """PyTorch's (value * tensor1) * tensor2 + self, its last product and sum one FMA in
    float32 (float32 and the 16-bit floats): here the exact product in float64 plus
    self, rounded to float32 (14553 of 100003 float32 results were a unit off PyTorch's
    rounded twice). float64 rounds twice (PyTorch's FMA has no wider type to emulate it
    in numpy); its generated kernels make the FMA."""
    scaled = tensor1 * _value(value, tensor1.dtype)
    if tensor1.dtype == np.float32:
        return (scaled.astype(np.float64) * tensor2 + self).astype(np.float32)
    return self + scaled * tensor2


def _emit_addcmul(E, self, tensor1, tensor2, value=1):
    scaled = E.mul(E.const(value if E.fl else int(value)), tensor1)
    return E.fma(scaled, tensor2, self)


def _check_addcmul(dt, *tensors, value=1):
    if dt is dtypes.bool_:
        raise NotImplementedError(f"\"addcmul_cpu_out\" not implemented for '{type_word(dt)}'")
    _check_value(dt, value=value)


ADDCMUL = declare(Op.ADDCMUL, function=True, method=True, pointwise=Pointwise(
    "promote", _addcmul, emit=_emit_addcmul, check=_check_addcmul),
    inplace=Op.ADDCMUL_)


@ADDCMUL.derivative("AddcmulBackward0", "self tensor1 tensor2",
                    save="self_sizes tensor1 tensor2 value")
def _(ctx, g):
    t1, t2, value = ctx.tensor1, ctx.tensor2, ctx.value
    return (sum_to(g, ctx.self_sizes),
            sum_to(g * (t2 * value), t1._shape) if ctx.needs_input_grad(1) else None,
            sum_to(g * (t1 * value), t2._shape) if ctx.needs_input_grad(2) else None)


_INTEGER_DIVISION = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
    "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can "
    "be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
    "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
    "addcdiv behavior is just the latter implementation: (input + value * tensor1 / "
    "tensor2), for all dtypes.")


def _check_addcdiv(dt, self, tensor1, tensor2, value=1):
    """PyTorch refuses two integer (or bool) divisor operands, whatever self is."""
    if not tensor1.dtype.is_floating_point and not tensor2.dtype.is_floating_point:
        raise RuntimeError(_INTEGER_DIVISION)
    _check_value(dt, value=value)


def _addcdiv(self, tensor1, tensor2, value=1):
    """(value * tensor1) / tensor2 + self, as PyTorch's kernel orders it."""
    return self + tensor1 * _value(value, tensor1.dtype) / tensor2


def _emit_addcdiv(E, self, tensor1, tensor2, value=1):
    return E.add(E.div(E.mul(E.const(value), tensor1), tensor2), self)


ADDCDIV = declare(Op.ADDCDIV, function=True, method=True, pointwise=Pointwise(
    "promote", _addcdiv, emit=_emit_addcdiv, check=_check_addcdiv, float_math=True),
    inplace=Op.ADDCDIV_)


@ADDCDIV.derivative("AddcdivBackward0", "self tensor1 tensor2",
                    save="self_sizes tensor1 tensor2 value")
def _(ctx, g):
    t1, t2, value = ctx.tensor1, ctx.tensor2, ctx.value
    return (sum_to(g, ctx.self_sizes),
            sum_to(g * (value / t2), t1._shape) if ctx.needs_input_grad(1) else None,
            sum_to(-g * (value * t1 / (t2 * t2)), t2._shape) if ctx.needs_input_grad(2)
            else None)
