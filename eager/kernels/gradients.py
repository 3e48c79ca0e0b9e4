"""Helpers the derivative formulas of several op families share."""
from __future__ import annotations

from eager.shapes import reduce_dims
from eager.tensor import ops


def sum_to(g, shape):
    """Undo broadcasting: sum `g` down to `shape`."""
    shape = tuple(shape)
    if g is None or tuple(g._shape) == shape:
        return g
    lead = g.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                if s == 1 and g._shape[lead + i] != 1]
    r = ops.sum(g, dims, True) if dims else g
    return ops.view(r, shape) if tuple(r._shape) != shape else r


def expand_reduced(g, sizes, dim, keepdim):
    """Broadcast a reduction's gradient back over the reduced dims."""
    if not keepdim:
        for d in reduce_dims(dim, len(sizes)):
            g = ops.unsqueeze(g, d)
    return ops.expand(g, list(sizes))


def numel_over(sizes, dim) -> int:
    """Elements a reduction over `dim` of a tensor of `sizes` folds into one."""
    n = 1
    for d in reduce_dims(dim, len(sizes)):
        n *= sizes[d]
    return n
