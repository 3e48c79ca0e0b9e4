"""var_mean and std_mean: the variance (or standard deviation) and the mean over dims in
one op, as PyTorch's, returning both, each differentiable (VarMeanBackward0,
StdMeanBackward0: one node for both outputs).

The formula is written once, on the records: var's (two passes, the squares about the
mean over max(n - correction, 0)) and the mean, the square root of the variance for
std_mean. numpy runs it, as the decompose pass and CUDA's composed kernels do. The
16-bit floats compute in float32 and round once (each result), as PyTorch's do."""
from __future__ import annotations

import math

import numpy as np

from eager.kernels._common import compute_np, meta_from_rule, operand, register, result, \
    scalar_value
from eager.kernels.decomposed import NUMPY
from eager.kernels.gradients import expand_reduced, numel_over
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


def _var(F, self, dim, correction, keepdim):
    return RECORDS[Op.VAR].formula(F, self, dim, correction=correction, keepdim=keepdim)


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


def _var_gradient(g, x, dim, correction, keepdim):
    """var's: g 2 (x - mean) / (n - correction) (inf where that is not above 0, as the
    forward divides by max(n - correction, 0))."""
    dof = numel_over(x._shape, dim) - (1 if correction is None else correction)
    centred = x - ops.mean(x, list(reduce_dims(dim, x.dim())), True)
    return expand_reduced(g, x._shape, dim, keepdim) * centred * (2.0 / dof if dof > 0 else
                                                                  math.inf)


def _sum(*grads):
    present = [g for g in grads if g is not None]
    return None if not present else present[0] if len(present) == 1 else \
        present[0] + present[1]


@VAR_MEAN.derivative("VarMeanBackward0", "self", save="self dim correction keepdim",
                     every_output=True)
def _(ctx, g):
    x, dim, keepdim = ctx.self, ctx.dim, ctx.keepdim
    return _sum(None if g.get(0) is None else
                _var_gradient(g[0], x, dim, ctx.correction, keepdim),
                None if g.get(1) is None else _mean_gradient(g[1], x, dim, keepdim))


@STD_MEAN.derivative("StdMeanBackward0", "self", save="self dim correction keepdim result",
                     every_output=True)
def _(ctx, g):
    """std's gradient is var's times 1 / (2 std): var's of g / (2 std)."""
    x, dim, keepdim = ctx.self, ctx.dim, ctx.keepdim
    return _sum(None if g.get(0) is None else
                _var_gradient(g[0] / (2 * ctx.result), x, dim, ctx.correction, keepdim),
                None if g.get(1) is None else _mean_gradient(g[1], x, dim, keepdim))
