"""Copies: clone, _to_copy, cat, the index ops index_select, index_add and embedding,
and the backward ops of select and slice; their kernels use numpy."""
from __future__ import annotations

import math

import numpy as np

from eager.arguments import tensor_list
from eager.backends import backend_for
from eager.device import as_device
from eager.factories import zeros
from eager.kernels._common import (add_at, load_native, meta_from_rule, operand, promote,
                                   register, result, scalar_value, type_word)
from eager.kernels.shape import slice_bounds
from ir.records import declare
from eager.shapes import wrap_dim
from eager.tensor import from_array, ops
from ir import dtypes
from ir.ops import Op


def clone_cpu(self):
    return result(self._np().copy(), self.dtype)


def clone_rule(self):
    return self._shape, self.dtype


register(Op.CLONE, clone_cpu, meta_from_rule(clone_rule))


def to_copy_rule(self, *, dtype=None, device=None):
    return self._shape, dtype or self.dtype


def to_copy_cpu(self, *, dtype=None, device=None):
    dt = dtype or self.dtype
    target = as_device(device) if device is not None else self.device
    if target.type != "cpu":
        return backend_for(target).from_host(dtypes.cast(self._np(), dt), target)
    a = self._np()
    converted = dtypes.cast(a, dt)
    return result(converted.copy() if converted is a else converted, dt)


register(Op.TO_COPY, to_copy_cpu, meta_from_rule(to_copy_rule))


def cat_rule(tensors, dim=0):
    tensors = tensor_list("cat", tensors)
    if not tensors:
        raise ValueError("cat(): expected a non-empty list of Tensors")
    # PyTorch skips legacy 1-D empty tensors
    shaped = [t for t in tensors if not (t.dim() == 1 and t._shape[0] == 0)] or tensors[:1]
    ref = shaped[0]
    if ref.dim() == 0:
        raise RuntimeError("zero-dimensional tensor (at position 0) cannot be concatenated")
    d = wrap_dim(dim, ref.dim())
    total = 0
    for i, t in enumerate(shaped):
        if t.dim() != ref.dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.dim()} "
                               f"and {t.dim()}")
        for j in range(ref.dim()):
            if j != d and t._shape[j] != ref._shape[j]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. "
                                   f"Expected size {ref._shape[j]} but got size {t._shape[j]} "
                                   f"for tensor number {i} in the list.")
        total += t._shape[d]
    shape = list(ref._shape)
    shape[d] = total
    return tuple(shape), promote(*tensors) if len(tensors) > 1 else ref.dtype


def cat_cpu(tensors, dim=0):
    shape, dt = cat_rule(tensors, dim)
    d = wrap_dim(dim, len(shape))
    parts = [operand(t, dt.np) for t in tensors if not (t.dim() == 1 and t._shape[0] == 0)]
    if not parts:
        return result(np.empty(shape, dt.np), dt)
    if math.prod(shape) * dt.itemsize >= CAT_NATIVE_BYTES and \
            all(t.dtype == dt for t in tensors) and \
            not all(part.flags.c_contiguous for part in parts):
        out = _native_cat(parts, shape, d, dt.np)
        if out is not None:
            return from_array(out)
    return result(np.concatenate(parts, axis=d), dt)


def _native_cat(parts: list, shape: tuple, d: int, np_dtype) -> np.ndarray | None:
    """cat of same-dtype parts as one call of the generated strided copy, each part into
    its slice of the result; None where numpy must serve (no llvmlite, the kernel still
    compiling, a layout it does not take)."""
    native = _copies or native_copies()
    if native is None:
        return None
    out = np.empty(shape, np_dtype)
    pairs, start = [], 0
    for part in parts:
        stop = start + part.shape[d]
        pairs.append((out[(slice(None),) * d + (slice(start, stop),)], part))
        start = stop
    return out if native.copy(pairs) else None


CAT_NATIVE_BYTES = 1 << 19
"""From this many result bytes, a cat of parts of the result's dtype, one of them not
contiguous, runs as the generated strided copy (eager/backends/native/copies.py, loaded
at the first such call). numpy's concatenate copies contiguous parts as fast (a cat of
three contiguous (8, 256, 256) float32 parts: 364 us numpy, 388 native) and small ones
faster (~10 us less in Python); with a transposed part: 48 us each at 384 KiB, 3 MiB
620 -> 458 us, the GPT step's q/k/v gradients ((8, 64, 384) float32 x3, 2.3 MiB) 445 ->
300 us (medians, one thread, a loaded 2-core machine)."""
_copies = None  # eager/backends/native/copies.py once loaded; False: it cannot be


def native_copies():
    """The generated strided copy's module, loaded at its first use; None where numpy
    must serve (KILN_EAGER_NATIVE=0, no llvmlite)."""
    global _copies
    if _copies is None:
        _copies = load_native(_import_copies)
    return _copies or None


def _import_copies():
    from eager.backends.native import copies as native
    return native


register(Op.CAT, cat_cpu, meta_from_rule(cat_rule))


def _check_index(name, index, ndim_max=1):
    if index.dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError(f"{name}(): Expected dtype int32 or int64 for index")
    if index.dim() > ndim_max:
        raise IndexError(f"{name}(): Index is supposed to be a vector")


def _check_bounds(name, idx: np.ndarray, size: int):
    """Index ops take indices in [0, size), as in PyTorch (t[-1] is normalised before)."""
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        bad = idx[(idx < 0) | (idx >= size)].flat[0]
        raise IndexError(f"{name}(): index {bad} is out of bounds for dimension with size {size}")


def index_select_rule(self, dim, index):
    _check_index("index_select", index)
    d = wrap_dim(dim, self.dim())
    shape = list(self._shape)
    if shape:
        shape[d] = index.numel()
    return tuple(shape), self.dtype


def index_select_cpu(self, dim, index):
    shape, dt = index_select_rule(self, dim, index)
    idx = index._np().reshape(-1)
    a = self._np()
    if a.ndim == 0:
        _check_bounds("index_select", idx, 1)
        return result(a.reshape(1)[idx].reshape(shape), dt)
    d = wrap_dim(dim, self.dim())
    _check_bounds("index_select", idx, a.shape[d])
    return result(np.take(a, idx, axis=d), dt)


register(Op.INDEX_SELECT, index_select_cpu, meta_from_rule(index_select_rule))


def index_add_rule(self, dim, index, source, *, alpha=1):
    _check_index("index_add", index)
    if source.dtype is not self.dtype:
        raise RuntimeError(f"index_add_(): self ({type_word(self.dtype)}) and source "
                           f"({type_word(source.dtype)}) must have the same scalar type")
    d = wrap_dim(dim, self.dim())
    want = list(self._shape)
    if want:
        want[d] = index.numel()
        if source.dim() == self.dim() and source._shape[d] != index.numel():
            raise RuntimeError(f"index_add_(): Number of indices ({index.numel()}) should be "
                               f"equal to source.size(dim): ({source._shape[d]}), for dim: {d}")
    if list(source._shape) != want and not (source.dim() == 0 and self.dim() == 0):
        raise RuntimeError(f"index_add_(): Source/destination tensor must have same slice shapes."
                           f" Destination slice shape: {want} and source slice shape: "
                           f"{list(source._shape)}")
    return self._shape, self.dtype


def index_add_cpu(self, dim, index, source, *, alpha=1):
    shape, dt = index_add_rule(self, dim, index, source, alpha=alpha)
    idx = index._np().reshape(-1)
    d = wrap_dim(dim, self.dim()) if self.dim() else 0
    _check_bounds("index_add", idx, self._shape[d] if self.dim() else 1)
    if dt in dtypes.HALF:
        return result(_index_add_half(self, d, idx, source, scalar_value(alpha), index.dtype), dt)
    out = operand(self, dt.np).copy()
    src = operand(source, dt.np) * scalar_value(alpha)
    if out.ndim == 0:
        return result(out + src.sum(), dt)
    grid = np.indices(src.shape, sparse=True)
    add_at(out, tuple(idx.reshape(g.shape) if k == d else g for k, g in enumerate(grid)), src)
    return result(out, dt)


def _index_add_half(self, d, idx, source, alpha, index_dtype) -> np.ndarray:
    """index_add of a 16-bit float as PyTorch's CPU kernel adds (measured bit for bit):
    along the first or last dim of a tensor of two dims or more, with alpha 1 and int64
    indices, it is scatter_add, whose sums start from self and run in float32, rounded once;
    otherwise slice after slice in the index's order, each sum rounded: self + alpha *
    source in float32 (alpha of the 16-bit type, as add's), and for a tensor of one dim or
    none the product rounded first too. (PyTorch rounds the product first in the scalar
    tail of a slice too, the last slice.numel() % vector-width elements: a property of the
    machine, not copied.)"""
    out, src = self._np(), source._np()
    if out.ndim > 1 and d in (0, out.ndim - 1) and alpha == 1 and index_dtype is dtypes.int64:
        wide = out.astype(np.float32)
        grid = np.indices(src.shape, sparse=True)
        add_at(wide, tuple(idx.reshape(g.shape) if k == d else g for k, g in enumerate(grid)),
               src.astype(np.float32))
        return wide
    dt = self.dtype
    addends = src.astype(np.float32) * dtypes.cast(np.float32(alpha), dt).astype(np.float32)
    out = out.copy()
    if out.ndim <= 1:
        addends = dtypes.cast(addends, dt).astype(np.float32)
        if out.ndim == 0:  # one element along its only "dim"
            out, addends = out.reshape(1), np.broadcast_to(addends.reshape(-1), idx.shape)
    _add_in_turn(out, d, idx, addends)
    return out


def _add_in_turn(out: np.ndarray, d: int, idx: np.ndarray, addends: np.ndarray) -> None:
    """out's slice idx[i] along dim d plus addends' slice i (float32), in the order of idx,
    each sum rounded to out's type: all first sightings of an index at once, then all
    second sightings, ..."""
    order = np.argsort(idx, kind="stable")
    ranked = idx[order]
    turn = np.empty(idx.size, np.int64)
    turn[order] = np.arange(idx.size) - np.searchsorted(ranked, ranked)
    rows, parts = np.moveaxis(out, d, 0), np.moveaxis(addends, d, 0)
    dt = dtypes.from_numpy(out.dtype)
    for t in range(int(turn.max()) + 1 if idx.size else 0):
        now = turn == t
        rows[idx[now]] = dtypes.cast(rows[idx[now]].astype(np.float32) + parts[now], dt)


register(Op.INDEX_ADD, index_add_cpu, meta_from_rule(index_add_rule))


def embedding_rule(weight, indices, padding_idx=-1):
    if indices.dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the "
                           f"following scalar types: Long, Int; but got {indices.dtype.name} "
                           "instead (while checking arguments for embedding)")
    if weight.dim() != 2:
        raise RuntimeError(f"'weight' must be 2-D, got {weight.dim()}-D")
    return tuple(indices._shape) + (weight._shape[1],), weight.dtype


def embedding_cpu(weight, indices, padding_idx=-1):
    shape, dt = embedding_rule(weight, indices, padding_idx)
    idx = indices._np()
    _check_bounds("embedding", idx, weight._shape[0])
    return result(weight._np()[idx], dt)


register(Op.EMBEDDING, embedding_cpu, meta_from_rule(embedding_rule))


def select_backward_rule(grad_output, input_sizes, dim, index):
    return tuple(input_sizes), grad_output.dtype


def select_backward_cpu(grad_output, input_sizes, dim, index):
    out = np.zeros(tuple(input_sizes), grad_output.dtype.np)
    d = wrap_dim(dim, len(input_sizes))
    np.moveaxis(out, d, 0)[index] = grad_output._np()
    return result(out, grad_output.dtype)


def slice_backward_rule(grad_output, input_sizes, dim, start, end, step):
    return tuple(input_sizes), grad_output.dtype


def slice_backward_cpu(grad_output, input_sizes, dim, start, end, step):
    out = np.zeros(tuple(input_sizes), grad_output.dtype.np)
    d = wrap_dim(dim, len(input_sizes))
    start, end, step = slice_bounds(input_sizes[d], start, end, step)
    np.moveaxis(out, d, 0)[start:end:step] = np.moveaxis(grad_output._np(), d, 0)
    return result(out, grad_output.dtype)


register(Op.SELECT_BACKWARD, select_backward_cpu, meta_from_rule(select_backward_rule))
register(Op.SLICE_BACKWARD, slice_backward_cpu, meta_from_rule(slice_backward_rule))


# records: names and derivatives -----------------------------------------------------
CLONE = declare(Op.CLONE, function=True, method=True)


@CLONE.derivative("CloneBackward0", "self")
def _(ctx, g):
    return g


TO_COPY = declare(Op.TO_COPY)


@TO_COPY.derivative("ToCopyBackward0", "self", save="self_dtype self_device")
def _(ctx, g):
    return ops._to_copy(g, dtype=ctx.self_dtype, device=ctx.self_device)


CAT = declare(Op.CAT, function=True)


@CAT.derivative("CatBackward0", "tensors", save="tensors_sizes dim")
def _(ctx, g):
    sizes = ctx.tensors_sizes
    ref = next((s for s in sizes if not (len(s) == 1 and s[0] == 0)), sizes[0])
    d = ctx.dim % len(ref)
    grads, start = [], 0
    for s in sizes:
        if len(s) == 1 and s[0] == 0 and len(ref) != 1:
            grads.append(None)
            continue
        grads.append(ops.slice(g, d, start, start + s[d]))
        start += s[d]
    return tuple(grads)


INDEX_SELECT = declare(Op.INDEX_SELECT, function=True, method=True)


@INDEX_SELECT.derivative("IndexSelectBackward0", "self", save="self_sizes dim index")
def _(ctx, g):
    base = zeros(ctx.self_sizes, dtype=g.dtype, device=g.device)
    return ops.index_add(base, ctx.dim, ctx.index, g)


INDEX_ADD = declare(Op.INDEX_ADD, function=True, method=True)


@INDEX_ADD.derivative("IndexAddBackward0", "self source", save="dim index alpha")
def _(ctx, g):
    picked = ops.index_select(g, ctx.dim, ctx.index)
    return g, picked if ctx.alpha == 1 else picked * ctx.alpha


EMBEDDING = declare(Op.EMBEDDING, function=True)


@EMBEDDING.derivative("EmbeddingBackward0", "weight", save="weight_sizes indices padding_idx")
def _(ctx, g):
    rows, width = ctx.weight_sizes
    flat_idx = ops.reshape(ctx.indices, [-1])
    flat_g = ops.reshape(g, [-1, width])
    if ctx.padding_idx is not None and ctx.padding_idx >= 0:
        flat_g = flat_g * ops.unsqueeze(ops.ne(flat_idx, ctx.padding_idx), 1)
    # index_put's sums, not index_add's: PyTorch's embedding_dense_backward adds row after
    # row, each 16-bit sum rounded, where its index_add sums in float32 and rounds once
    return ops.index_put(zeros([rows, width], dtype=g.dtype, device=g.device), 0, [flat_idx],
                         flat_g, True)


SELECT_BACKWARD = declare(Op.SELECT_BACKWARD)


@SELECT_BACKWARD.derivative("SelectBackwardBackward0", "grad_output", save="dim index")
def _(ctx, gg):
    return ops.select(gg, ctx.dim, ctx.index)


SLICE_BACKWARD = declare(Op.SLICE_BACKWARD)


@SLICE_BACKWARD.derivative("SliceBackwardBackward0", "grad_output",
                           save="dim start end step")


def _(ctx, gg):
    return ops.slice(gg, ctx.dim, ctx.start, ctx.end, ctx.step)
