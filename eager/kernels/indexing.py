"""Kernels of the ops that read an index tensor's values: advanced indexing (`index`,
`index_put`), `gather`, `scatter`, `scatter_add` and `nonzero`.

Every index is checked against the size of the dim it indexes where the kernel runs, with
PyTorch's error type and text (IndexError for `t[i]`, RuntimeError for gather/scatter), so
an index tensor is an ordinary input: nothing about its values is known before the op runs,
and a compiled graph can take new indices at every call. `nonzero`'s output shape depends
on its input's values; it has no Meta kernel (capture breaks the graph there).

The 16-bit floats add as PyTorch's CPU kernels do: index_put with accumulate rounds each
add, in the index's order; scatter_add sums from self in float32 and rounds once
(tests/eager/test_half_accumulate.py).
"""
from __future__ import annotations

import numpy as np

from eager.dispatcher import ATEN
from eager.factories import zeros
from eager.kernels._common import add_at, meta_from_rule, register, result, type_word
from eager.kernels.elementwise import check_no_internal_overlap
from eager.kernels.gradients import sum_to
from ir.records import declare
from eager.shapes import broadcast_shapes, wrap_dim
from eager.tensor import ops
from ir import dtypes
from ir.ops import Op


_INDEX_TYPES = (dtypes.int64, dtypes.int32)


def _first_bad(idx: np.ndarray, low: int, size: int):
    """The first index outside [low, size), or None."""
    if idx.size == 0:
        return None
    bad = (idx < low) | (idx >= size)
    return idx[bad].flat[0] if bad.any() else None


# index / index_put: t[i, j] and t[i, j] = v -------------------------------------------
def index_rule(self, dim, indices):
    for i in indices:
        if i.dtype not in _INDEX_TYPES:
            raise IndexError("tensors used as indices must be long, int or bool tensors")
    if dim < 0 or dim + len(indices) > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    try:
        picked = broadcast_shapes(*(i._shape for i in indices))
    except RuntimeError:
        shapes = ", ".join(str(list(i._shape)) for i in indices)
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together "
                         f"with shapes {shapes}") from None
    shape = tuple(self._shape)
    return shape[:dim] + picked + shape[dim + len(indices):], self.dtype


def _index_key(self, dim, indices) -> tuple:
    """The numpy key of `self[..., i, j, ...]`, every index checked against its size."""
    key = [slice(None)] * dim
    for k, index in enumerate(indices):
        size = self._shape[dim + k]
        idx = index._np()
        bad = _first_bad(idx, -size, size)
        if bad is not None:
            raise IndexError(f"index {bad} is out of bounds for dimension {dim + k} with size "
                             f"{size}")
        key.append(idx)
    return tuple(key)


def index_cpu(self, dim, indices):
    shape, dt = index_rule(self, dim, indices)
    if not indices:
        return result(self._np().copy(), dt)
    return result(self._np()[_index_key(self, dim, indices)].reshape(shape), dt)


def index_put_rule(self, dim, indices, values, accumulate=False):
    if values.dtype is not self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{type_word(self.dtype)} for the destination and "
                           f"{type_word(values.dtype)} for the source.")
    target, _ = index_rule(self, dim, indices)
    try:
        fits = broadcast_shapes(target, values._shape) == target
    except RuntimeError:
        fits = False
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values._shape)} cannot "
                           f"be broadcast to indexing result of shape {list(target)}")
    return tuple(self._shape), self.dtype


def _put(out: np.ndarray, self, dim, indices, values, accumulate) -> None:
    target, _ = index_rule(self, dim, indices)
    key = _index_key(self, dim, indices) if indices else (Ellipsis,)
    src = np.broadcast_to(values._host_np(), target)
    if accumulate:  # in out's type, in the order of the index: 16-bit floats round each add
        np.add.at(out, key, src)
    else:
        out[key] = src


def index_put_cpu(self, dim, indices, values, accumulate=False):
    shape, dt = index_put_rule(self, dim, indices, values, accumulate)
    out = self._np().copy()
    _put(out, self, dim, indices, values, accumulate)
    return result(out, dt)


def index_put_inplace_meta(self, dim, indices, values, accumulate=False):
    check_no_internal_overlap(self)
    index_put_rule(self, dim, indices, values, accumulate)
    return self


def index_put_inplace_cpu(self, dim, indices, values, accumulate=False):
    index_put_inplace_meta(self, dim, indices, values, accumulate)
    _put(self._np(), self, dim, indices, values, accumulate)
    return self


register(Op.INDEX, index_cpu, meta_from_rule(index_rule))
register(Op.INDEX_PUT, index_put_cpu, meta_from_rule(index_put_rule))
register(Op.INDEX_PUT_, index_put_inplace_cpu, index_put_inplace_meta)
for _op in (Op.INDEX, Op.INDEX_PUT, Op.INDEX_PUT_):  # as PyTorch's: CPU indices index any
    ATEN[_op].devices_may_differ = True              # device (its kernel checks the rest)


# gather / scatter: one index per element, along one dim ----------------------------------
def _check_along(name, self, dim, index) -> int:
    if index.dtype not in _INDEX_TYPES:
        raise RuntimeError(f"{name}(): Expected dtype int32/int64 for index")
    if index.dim() != self.dim():
        raise RuntimeError("Index tensor must have the same number of dimensions as input "
                           "tensor")
    return wrap_dim(dim, self.dim())


def gather_rule(self, dim, index, *, sparse_grad=False):
    d = _check_along("gather", self, dim, index)
    for k, (n, size) in enumerate(zip(index._shape, self._shape)):
        if k != d and n > size:
            raise RuntimeError(f"Size does not match at dimension {k} expected index "
                               f"{list(index._shape)} to be no larger than self "
                               f"{list(self._shape)} apart from dimension {d}")
    return tuple(index._shape), self.dtype


def _along(name, idx: np.ndarray, d: int, size: int) -> np.ndarray:
    """Index values `idx` for dim d, checked to lie in [0, size) (as in PyTorch)."""
    bad = _first_bad(idx, 0, size)
    if bad is not None:
        raise RuntimeError(f"{name}(): index {bad} is out of bounds for dimension {d} with "
                           f"size {size}")
    return idx


def _cut(a: np.ndarray, shape, d: int) -> np.ndarray:
    """The leading `shape` corner of `a`, whole along dim d."""
    return a[tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(shape))]


def gather_cpu(self, dim, index, *, sparse_grad=False):
    shape, dt = gather_rule(self, dim, index)
    a = self._np()
    if a.ndim == 0:  # a 0-d tensor is one element along its only "dim"
        _along("gather", index._np(), 0, 1)
        return result(a.copy(), dt)
    d = wrap_dim(dim, a.ndim)
    idx = _along("gather", index._np(), d, a.shape[d])
    return result(np.take_along_axis(_cut(a, shape, d), idx, axis=d), dt)


def scatter_rule(self, dim, index, src):
    d = _check_along("scatter", self, dim, index)
    if src.dtype is not self.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype "
                           f"({type_word(self.dtype)} vs {type_word(src.dtype)})")
    if src.dim() != index.dim():
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    for k, n in enumerate(index._shape):
        if n > src._shape[k] or (k != d and n > self._shape[k]):
            raise RuntimeError(f"Expected index {list(index._shape)} to be no larger than self "
                               f"{list(self._shape)} apart from dimension {d} and to be no "
                               f"larger size than src {list(src._shape)}")
    return tuple(self._shape), self.dtype


def _scatter(self, dim, index, src, add: bool):
    shape, dt = scatter_rule(self, dim, index, src)
    out = self._np().copy()
    if out.ndim == 0:
        _along("scatter", index._np(), 0, 1)
        return result(out + src._np() if add else src._np().copy(), dt)
    d = wrap_dim(dim, out.ndim)
    idx = _along("scatter", index._np(), d, out.shape[d])
    values = _cut(src._np(), index._shape, None)
    if add:
        grid = np.indices(idx.shape, sparse=True)
        key = tuple(idx if k == d else g for k, g in enumerate(grid))
        if dt in dtypes.HALF:  # PyTorch's sums: from self, in float32, rounded once
            wide = out.astype(np.float32)
            add_at(wide, key, values.astype(np.float32))
            return result(wide, dt)
        add_at(out, key, values)
    else:
        np.put_along_axis(_cut(out, index._shape, d), idx, values, axis=d)
    return result(out, dt)


def scatter_cpu(self, dim, index, src):
    return _scatter(self, dim, index, src, add=False)


def scatter_add_cpu(self, dim, index, src):
    return _scatter(self, dim, index, src, add=True)


register(Op.GATHER, gather_cpu, meta_from_rule(gather_rule))
register(Op.SCATTER, scatter_cpu, meta_from_rule(scatter_rule))
register(Op.SCATTER_ADD, scatter_add_cpu, meta_from_rule(scatter_rule))


# nonzero: its output shape depends on the data ------------------------------------------
def nonzero_cpu(self):
    return result(np.argwhere(self._np()), dtypes.int64)


def nonzero_meta(self):
    raise RuntimeError("aten::nonzero: its output shape depends on the input's values, "
                       "which a meta tensor does not have")


register(Op.NONZERO, nonzero_cpu, nonzero_meta)


def _grown(g, sizes):
    """`g` in the leading corner of zeros of `sizes` (a scatter's src may be larger than its
    index: only the corner the index covers was read)."""
    for d, (n, size) in enumerate(zip(g._shape, sizes)):
        if n != size:
            g = ops.slice_backward(g, list(g._shape[:d]) + [size] + list(g._shape[d + 1:]), d,
                                   0, n, 1)
    return g


# records: names and derivatives -----------------------------------------------------
INDEX = declare(Op.INDEX)


@INDEX.derivative("IndexBackward0", "self", save="self_sizes dim indices")
def _(ctx, g):
    base = zeros(ctx.self_sizes, dtype=g.dtype, device=g.device)
    return ops.index_put(base, ctx.dim, ctx.indices, g, True)


INDEX_PUT = declare(Op.INDEX_PUT)


@INDEX_PUT.derivative("IndexPutBackward0", "self values",
                      save="dim indices values_sizes accumulate")


def _(ctx, g):
    grad_self = g if ctx.accumulate else ops.index_put(
        g, ctx.dim, ctx.indices, zeros((), dtype=g.dtype, device=g.device))
    return grad_self, sum_to(ops.index(g, ctx.dim, ctx.indices), ctx.values_sizes)


GATHER = declare(Op.GATHER)


@GATHER.derivative("GatherBackward0", "self", save="self_sizes dim index")
def _(ctx, g):
    base = zeros(ctx.self_sizes, dtype=g.dtype, device=g.device)
    return ops.scatter_add(base, ctx.dim, ctx.index, g)


SCATTER = declare(Op.SCATTER)


@SCATTER.derivative("ScatterBackward0", "self src", save="dim index src_sizes")
def _(ctx, g):
    cleared = ops.scatter(g, ctx.dim, ctx.index,
                          zeros(ctx.index.shape, dtype=g.dtype, device=g.device))
    return cleared, _grown(ops.gather(g, ctx.dim, ctx.index), ctx.src_sizes)


SCATTER_ADD = declare(Op.SCATTER_ADD)


@SCATTER_ADD.derivative("ScatterAddBackward0", "self src", save="dim index src_sizes")
def _(ctx, g):
    return g, _grown(ops.gather(g, ctx.dim, ctx.index), ctx.src_sizes)


NONZERO = declare(Op.NONZERO, differentiable=False)


INDEX_PUT_ = declare(Op.INDEX_PUT_, inplace_of=Op.INDEX_PUT)
