"""glu: the first half of a dim gated by the sigmoid of the second, as PyTorch's one
kernel (GluBackward0). The formula is written once, on the record (numpy runs it here,
the compiler's decompose pass and CUDA's composed kernels in eager ops); the 16-bit
floats compute in float32 and round once. The gradient is PyTorch's glu_backward, which
keeps the sigmoid in the input's type."""
from __future__ import annotations

import numpy as np

from eager.kernels._common import compute_np, meta_from_rule, operand, register, \
    result, rounded_once, type_word
from eager.kernels.decomposed import NUMPY
from eager.shapes import wrap_dim
from eager.tensor import ops
from ir.ops import Op
from ir.records import declare


def glu_rule(self, dim=-1):
    if self.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = wrap_dim(dim, self.dim())
    if self._shape[d] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size "
                           f"{self._shape[d]}")
    if not self.dtype.is_floating_point:
        raise NotImplementedError(f"\"glu_cpu\" not implemented for '{type_word(self.dtype)}'")
    shape = list(self._shape)
    shape[d] //= 2
    return tuple(shape), self.dtype


def glu_cpu(self, dim=-1):
    shape, dt = glu_rule(self, dim)
    a = operand(self, compute_np(dt))
    with np.errstate(all="ignore"):
        return result(GLU.formula(NUMPY, a, wrap_dim(dim, self.dim())), dt)


register(Op.GLU, glu_cpu, meta_from_rule(glu_rule))

GLU = declare(Op.GLU)  # (nn.functional.glu: eager/nn/_activations.py)


@GLU.decomposition
def _(F, self, dim=-1):
    dim = dim % F.ndim(self)
    half = F.shape(self)[dim] // 2
    return F.slice(self, dim, 0, half) * F.sigmoid(F.slice(self, dim, half, 2 * half))


_gate_gradient = rounded_once(lambda s, a, g: (1 - s) * s * a * g)


@GLU.derivative("GluBackward0", "self", save="self dim")
def _(ctx, g):
    """sigmoid(b) g for a, (1 - s) s a g for b: s = sigmoid(b) kept in x's type, the
    second product computed in float32 for the 16-bit floats and rounded once."""
    x, dim = ctx.self, wrap_dim(ctx.dim, ctx.self.dim())
    a, b = ops.split(x, x._shape[dim] // 2, dim)
    s = ops.sigmoid(b)
    return ops.cat([s * g, _gate_gradient(s, a, g)], dim)
