"""prod: the product of every element, or of those along one dim (ProdBackward0,
ProdBackward1 as PyTorch's). Integers and bools multiply as int64 (PyTorch's result type),
unless `dtype` says another; each product rounds in the result's type, the 16-bit floats'
too, as PyTorch's CPU kernel multiplies them (in float32 and rounded once, 51 of 64
bfloat16 products of 37 elements differed from PyTorch's; each step rounded, none).
PyTorch's kernel folds a contiguous row in vector lanes, so over long rows its order, and
the last bits of a 16-bit product, can differ from kiln's order along the dim.

The gradient of each element is the product of all the others: the products of the
elements before it and after it (two scans by doubling, log2(n) elementwise products
each), exact with zeros in the input (one zero: only its own gradient is non-zero; two:
all are zero) and differentiable again, where dividing the product by the element is
not."""
from __future__ import annotations

import math

import numpy as np

from eager.factories import ones
from eager.kernels._common import meta_from_rule, operand, register, result
from eager.kernels.gradients import expand_reduced
from eager.shapes import reduce_dims, reduced_shape
from eager.tensor import ops
from ir import dtypes
from ir.ops import Op
from ir.records import declare

_ONE_DIM = ("prod() received an invalid combination of arguments - got (Tensor, keepdim=bool),"
            " but expected one of:\n * (Tensor input, *, torch.dtype dtype = None)\n * (Tensor "
            "input, int dim, bool keepdim = False, *, torch.dtype dtype = None)")


def prod_rule(self, dim=None, keepdim=False, *, dtype=None):
    if dim is None and keepdim:  # PyTorch has no keepdim without a dim
        raise TypeError(_ONE_DIM)
    dims = reduce_dims(dim, self.dim())
    out = dtype or (self.dtype if self.dtype.is_floating_point else dtypes.int64)
    return reduced_shape(self._shape, dims, keepdim), out


def prod_cpu(self, dim=None, keepdim=False, *, dtype=None):
    shape, dt = prod_rule(self, dim, keepdim, dtype=dtype)
    a, dims = operand(self, dt.np), reduce_dims(dim, self.dim())
    with np.errstate(all="ignore"):  # (an overflow is inf, as PyTorch's)
        if dt in dtypes.HALF:
            return result(_rounded_at_each_step(a, dims).reshape(shape), dt)
        return result(np.multiply.reduce(a, axis=dims, keepdims=keepdim), dt)


def _rounded_at_each_step(a: np.ndarray, dims: tuple) -> np.ndarray:
    """The product over dims (in C order), each product rounded to a's 16-bit type:
    numpy's float16 reduce keeps a float32 accumulator, its accumulate does not."""
    last = tuple(range(a.ndim - len(dims), a.ndim))
    kept = tuple(s for i, s in enumerate(a.shape) if i not in dims)
    rows = np.moveaxis(a, dims, last).reshape(kept + (math.prod(a.shape[d] for d in dims),))
    if rows.shape[-1] == 0:
        return np.ones(rows.shape[:-1], a.dtype)
    return np.multiply.accumulate(rows, axis=-1)[..., -1]


register(Op.PROD, prod_cpu, meta_from_rule(prod_rule))


def prod_ops(self, dim=None, keepdim=False, *, dtype=None):
    """prod in other ops (CUDA's kernel): the dim folded in halves, each half times the
    other (log2(n) elementwise products, an odd element carried), in the result's type."""
    _, dt = prod_rule(self, dim, keepdim, dtype=dtype)
    x = self if self.dtype is dt else ops._to_copy(self, dtype=dt)
    if dim is None or not self.dim():
        x, d = ops.reshape(x, [-1]), 0
    else:
        d = reduce_dims(dim, self.dim())[0]
    n = x._shape[d]
    if n == 0:
        x = _ones_along(x, d, 1)
    while n > 1:
        half = n // 2
        folded = ops.slice(x, d, 0, half) * ops.slice(x, d, half, 2 * half)
        x = ops.cat([folded, ops.slice(x, d, 2 * half, n)], d) if n % 2 else folded
        n = x._shape[d]
    if dim is None or not self.dim():
        return ops.reshape(x, [1] * self.dim() if keepdim else [])
    return x if keepdim else ops.squeeze(x, [d])

PROD = declare(Op.PROD, function=True, method=True)


def _ones_along(x, d: int, n: int):
    return ones(*[n if i == d else s for i, s in enumerate(x._shape)], dtype=x.dtype,
                device=x.device)


def products_of_the_others(x, d: int):
    """Each element's place holds the product of the other elements along dim d."""
    n = x._shape[d]
    if n == 0:
        return x
    one = _ones_along(x, d, 1)
    before = ops.cat([one, ops.slice(x, d, 0, n - 1)], d)  # shifted one place each way
    after = ops.cat([ops.slice(x, d, 1, n), one], d)
    step = 1
    while step < n:  # each place times the one `step` places away: inclusive scans
        pad = _ones_along(x, d, step)
        before = before * ops.cat([pad, ops.slice(before, d, 0, n - step)], d)
        after = after * ops.cat([ops.slice(after, d, step, n), pad], d)
        step *= 2
    return before * after


@PROD.derivative("ProdBackward1", "self", save="self dim keepdim",
                 overloads={"ProdBackward0": lambda a: a["dim"] is None})
def _(ctx, g):
    x = ctx.self
    if x.dim() == 0:
        return g
    if ctx.dim is None:
        others = products_of_the_others(ops.reshape(x, [-1]), 0)
        return ops.reshape(g * others, list(x._shape))
    dim = reduce_dims(ctx.dim, x.dim())
    return expand_reduced(g, x._shape, dim, ctx.keepdim) * products_of_the_others(x, dim[0])
