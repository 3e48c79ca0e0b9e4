"""linalg_vector_norm: the vector p-norm over dims, as PyTorch's one op
(LinalgVectorNormBackward0), under eager.norm, Tensor.norm, F.normalize and the
gradient clipping of nn.utils. The formula is written once, on the record (numpy runs
it here, the compiler's decompose pass and CUDA's composed kernels in eager ops); the
16-bit floats compute in float32 and round once. The gradient is PyTorch's
norm_backward, each op in the input's type and in its order, so 16-bit gradients round
where PyTorch's do."""
from __future__ import annotations

import math

import numpy as np

from eager.kernels._common import compute_np, meta_from_rule, operand, register, result, \
    scalar_value, type_word
from eager.kernels.decomposed import NUMPY
from eager.shapes import reduce_dims, reduced_shape
from eager.tensor import ops
from ir.ops import Op
from ir.records import declare


def vector_norm_rule(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    dt = dtype or self.dtype
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor "
                           f"as input. Got {type_word(self.dtype)}")
    if dtype is not None and not dtype.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: dtype should be floating point or complex. "
                           f"Got {type_word(dtype)}")
    dims = reduce_dims(dim, self.dim())
    p = scalar_value(ord)
    if p < 0 or math.isinf(p):
        empty = any(self._shape[d] == 0 for d in dims) if self.dim() else False
        if empty:
            raise RuntimeError(f"linalg.vector_norm cannot compute the {p:g} norm on an empty "
                               f"tensor because the operation does not have an identity")
    return reduced_shape(self._shape, dims, keepdim), dt


def vector_norm_cpu(self, ord=2, dim=None, keepdim=False, *, dtype=None):
    shape, dt = vector_norm_rule(self, ord, dim, keepdim, dtype=dtype)
    a = operand(self, compute_np(dt))
    with np.errstate(all="ignore"):
        out = VECTOR_NORM.formula(NUMPY, a, scalar_value(ord), reduce_dims(dim, self.dim()),
                                  keepdim)
    return result(out, dt)


register(Op.LINALG_VECTOR_NORM, vector_norm_cpu, meta_from_rule(vector_norm_rule))

VECTOR_NORM = declare(Op.LINALG_VECTOR_NORM)  # (eager.norm: eager/derived_math.py)


@VECTOR_NORM.decomposition
def _(F, self, ord=2, dim=None, keepdim=False, *, dtype=None):
    x = F.cast(self, dtype)
    dims = list(range(F.ndim(x))) if dim is None or not list(dim) else dim
    if ord == 2:
        return F.sqrt(F.sum(x * x, dims, keepdim))
    if ord == math.inf:
        return F.amax(F.abs(x), dims, keepdim)
    if ord == -math.inf:
        return F.amin(F.abs(x), dims, keepdim)
    if ord == 0:
        return F.sum(F.nonzero(x), dims, keepdim)
    if ord == 1:
        return F.sum(F.abs(x), dims, keepdim)
    return F.pow(F.sum(F.pow(F.abs(x), ord), dims, keepdim), 1.0 / ord)


@VECTOR_NORM.derivative("LinalgVectorNormBackward0", "self",
                        save="self ord dim keepdim result")
def _(ctx, g):
    """PyTorch's norm_backward (g and the norm given back their reduced dims)."""
    x, norm, p = ctx.self, ctx.result, scalar_value(ctx.ord)
    if p == 0:  # no gradient (PyTorch's: x.grad stays None)
        return None
    if not ctx.keepdim:
        for d in reduce_dims(ctx.dim, x.dim()):
            g, norm = ops.unsqueeze(g, d), ops.unsqueeze(norm, d)
    g, norm = g.to(x.dtype), norm.to(x.dtype)  # (dtype=: the gradient is in x's type)
    if p == 1:
        return ops.sign(x) * g
    if p == 2:
        return g * ops.where(norm == 0, 0.0, x / norm)
    if math.isinf(p):  # amax's (amin's) of |x|: shared by the ties, NaN counted as one
        size = x.abs()
        top = ops.where(size != size, 1.0, ops._to_copy(size == norm, dtype=x.dtype))
        count = ops.sum(top, list(reduce_dims(ctx.dim, x.dim())), True)
        return ops.sign(x) * ((g / count) * top)
    if p < 1:
        scaled = ops.where(x == 0, 0.0, ops.sign(x) * ops.pow(x.abs(), p - 1))
        return scaled * g * ops.pow(norm, 1 - p)
    scaled = ops.sign(x) * ops.pow(x.abs(), p - 1) if p < 2 else \
        x * ops.pow(x.abs(), p - 2)
    return scaled * ops.where(norm == 0, 0.0, g / ops.pow(norm, p - 1))
