"""std, var_mean and std_mean: the standard deviation, and the variance (or standard
deviation) and the mean over dims in one op, as PyTorch's, returning both, each
differentiable (StdBackward0; VarMeanBackward0, StdMeanBackward0: one node for both
outputs). Their gradients are PyTorch's formulas in its order (var_gradient), so the
16-bit floats round where PyTorch's ops do.

The formula is written once, on the records: var's (two passes, the squares about the
mean over max(n - correction, 0)) and the mean, the square root of the variance for
std and std_mean. numpy runs it, as the decompose pass and CUDA's composed kernels do. The
16-bit floats compute in float32 and round once (each result), as PyTorch's do."""
from __future__ import annotations

import numpy as np

from eager.kernels._common import compute_np, meta_from_rule, operand, register, result, \
    scalar_value
from eager.kernels.decomposed import NUMPY
from eager.kernels.gradients import expand_reduced, numel_over
from eager.kernels.reduction import var_gradient, var_rule
from eager.shapes import reduce_dims, reduced_shape
from eager.tensor import ops
from ir.ops import Op
from ir.records import RECORDS, declare


def _moments(op: Op, name: str):
    def rule(self, dim=None, *, correction=None, keepdim=False):
        if not self.dtype.is_floating_point:
            raise RuntimeError(f"{name} only support floating point and complex dtypes")
        shape = reduced_shape(self._shape, reduce_dims(dim, self.dim()), keepdim)
        return (shape, self.dtype), (shape, self.dtype)

    def kernel(self, dim=None, *, correction=None, keepdim=False):
        (_, dt), _ = rule(self, dim, correction=correction, keepdim=keepdim)
        dims = reduce_dims(dim, self.dim())
        ddof = 1 if correction is None else scalar_value(correction)
        a = operand(self, compute_np(dt))
        with np.errstate(all="ignore"):  # (too few values: 0/0 and x/0, as PyTorch)
            spread, mean = RECORDS[op].formula(NUMPY, a, dims, correction=ddof,
                                               keepdim=keepdim)
        return result(spread, dt), result(mean, dt)
    rule.__name__, kernel.__name__ = name, name + "_cpu"
    register(op, kernel, meta_from_rule(rule))


_moments(Op.VAR_MEAN, "var_mean")
_moments(Op.STD_MEAN, "std_mean")


def std_cpu(self, dim=None, *, correction=None, keepdim=False):
    """sqrt of the variance before it is rounded: a 16-bit float's in float32."""
    shape, dt = var_rule(self, dim, correction=correction, keepdim=keepdim)
    dims = reduce_dims(dim, self.dim())
    ddof = 1 if correction is None else scalar_value(correction)
    a = operand(self, compute_np(dt))
    with np.errstate(all="ignore"):
        return result(np.sqrt(_var(NUMPY, a, dims, ddof, keepdim)), dt)


register(Op.STD, std_cpu, meta_from_rule(var_rule))


def _var(F, self, dim, correction, keepdim):
    return RECORDS[Op.VAR].formula(F, self, dim, correction=correction, keepdim=keepdim)


STD = declare(Op.STD)  # (Tensor.std and eager.std: _tensor_methods.py, for `unbiased`)


@STD.decomposition
def _(F, self, dim=None, *, correction=None, keepdim=False):
    return F.sqrt(_var(F, self, dim, correction, keepdim))


VAR_MEAN = declare(Op.VAR_MEAN)  # (eager.var_mean: functional.py, for `unbiased`)


@VAR_MEAN.decomposition
def _(F, self, dim=None, *, correction=None, keepdim=False):
    return _var(F, self, dim, correction, keepdim), F.mean(self, dim, keepdim)


STD_MEAN = declare(Op.STD_MEAN)


@STD_MEAN.decomposition
def _(F, self, dim=None, *, correction=None, keepdim=False):
    return F.sqrt(_var(F, self, dim, correction, keepdim)), F.mean(self, dim, keepdim)


def _mean_gradient(g, x, dim, keepdim):
    return expand_reduced(g / numel_over(x._shape, dim), x._shape, dim, keepdim)


def std_gradient(g, x, result, dim, correction, keepdim):
    """PyTorch's std_backward: var's gradient of g / (result * 2), 0 where the result
    is (x constant over the dims)."""
    return var_gradient(ops.where(result == 0, 0.0, g / (result * 2)), x, dim, correction,
                        keepdim)


def _sum(*grads):
    present = [g for g in grads if g is not None]
    return None if not present else present[0] if len(present) == 1 else \
        present[0] + present[1]


@VAR_MEAN.derivative("VarMeanBackward0", "self", save="self dim correction keepdim",
                     every_output=True)
def _(ctx, g):
    x, dim, keepdim = ctx.self, ctx.dim, ctx.keepdim
    return _sum(None if g.get(0) is None else
                var_gradient(g[0], x, dim, ctx.correction, keepdim),
                None if g.get(1) is None else _mean_gradient(g[1], x, dim, keepdim))


@STD.derivative("StdBackward0", "self", save="self dim correction keepdim result")
def _(ctx, g):
    return std_gradient(g, ctx.self, ctx.result, ctx.dim, ctx.correction, ctx.keepdim)


@STD_MEAN.derivative("StdMeanBackward0", "self", save="self dim correction keepdim result",
                     every_output=True)
def _(ctx, g):
    x, dim, keepdim = ctx.self, ctx.dim, ctx.keepdim
    return _sum(None if g.get(0) is None else
                std_gradient(g[0], x, ctx.result, dim, ctx.correction, keepdim),
                None if g.get(1) is None else _mean_gradient(g[1], x, dim, keepdim))
