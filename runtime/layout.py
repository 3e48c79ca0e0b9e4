"""Layouts as kernels address them: the dims of an iteration merged where every operand
allows it (as PyTorch's TensorIterator does), leaving rows and one inner dim, with each
operand's strides over them. Shared by the CPU's and CUDA's kernel makers, eager's and
the compiler's."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STRIDED = None  # an operand's inner-stride class when it is neither 1 nor 0


class CannotLower(Exception):
    """A fused node (or one layout of its operands) that no kernel generator, the CPU's
    or CUDA's, takes; the message says why, and the interpreter runs it instead."""


def merge_dims(dims) -> list:
    """The fewest dims addressing the elements of `dims` (in order, each (size, element
    stride per operand)) as they do: dims of size 1 dropped, and a dim merged into the
    one before it where every operand steps through the two as through one (its stride
    there is this dim's size times its stride here), as PyTorch's TensorIterator merges
    them. Each kernel generator (the CPU's, CUDA's, eager CUDA's) addresses through it."""
    merged: list = []
    for size, strides in dims:
        if size == 1:
            continue
        if merged and all(prev == cur * size for prev, cur in zip(merged[-1][1], strides)):
            merged[-1] = (merged[-1][0] * size, tuple(strides))
        else:
            merged.append((size, tuple(strides)))
    return merged


@dataclass(frozen=True)
class Layout:
    """A tensor's layout as the kernel makers read it (numpy's terms: strides in bytes)
    and its first element's address (a device address for a CUDA tensor)."""
    shape: tuple
    strides: tuple
    itemsize: int
    address: int

    @classmethod
    def of(cls, t) -> "Layout":
        size = t.dtype.itemsize
        return cls(tuple(t.shape), tuple(s * size for s in t._stride), size, t.data_ptr())


def stride_class(s: int):
    """An inner stride as kernels are specialised on it: 1, 0 or STRIDED."""
    return s if s in (0, 1) else STRIDED


def broadcast_strides(a: np.ndarray, shape, full, reduced, squeezed: bool) -> list[int]:
    """Element strides of `a` (of `shape`) over the iteration space `full`, its dims
    lined up from the right as broadcasting lines them up: with the dims of `full`, or,
    for a per-row value without its reduced dims (`squeezed`), with the dims of `full`
    that are not reduced (the reduced ones get stride 0). A dim of more than one element
    must have the size of the dim it lines up with: a kernel given other strides would
    read or write outside `a`, so any other shape raises CannotLower."""
    dims = [d for d in range(len(full)) if not squeezed or d not in reduced]
    if len(shape) > len(dims):
        raise CannotLower(f"an operand of shape {tuple(shape)} in an iteration over "
                          f"{tuple(full)}")
    out = [0] * len(full)
    for d, size, stride in zip(dims[len(dims) - len(shape):], shape, a.strides):
        if size != 1:
            if size != full[d]:
                raise CannotLower(f"an operand of shape {tuple(shape)} does not broadcast "
                                  f"to {tuple(full)}" + (" without its reduced dims"
                                                         if squeezed else ""))
            out[d] = stride // a.itemsize
    return out


def row_dims(arrays, shapes, full, reduced, squeezed, placed=None):
    """The iteration space as (outer, inner): the outer dims, each (size, its element
    stride per operand), and the inner dim likewise (the reduced one in a row kernel), the
    kept dims and the reduced dims each merged by merge_dims. `placed`
    gives some operands' strides over the iteration space (gathers' sources and
    indices). `arrays` may be any objects with numpy's shape, strides (in bytes) and
    itemsize."""
    outer, segments, inner = segmented_row_dims(arrays, shapes, full, reduced, squeezed,
                                                placed)
    if segments:
        raise CannotLower("reduced dims that do not merge into one")
    return outer, inner


def segmented_row_dims(arrays, shapes, full, reduced, squeezed, placed=None):
    """row_dims where the reduced dims may stay several: (outer, segments, inner), the
    segments the reduced dims before the innermost, merged, outermost first (a row is
    their every combination in order, an inner run each: BatchNorm's sum over N, H and W
    of (N, C, H, W) is N segments of H * W)."""
    placed = placed or {}
    strides = [placed[j] if j in placed else broadcast_strides(a, s, full, reduced, q)
               for j, (a, s, q) in enumerate(zip(arrays, shapes, squeezed))]

    def dims(ds):
        return [(full[d], [st[d] for st in strides]) for d in ds]
    outer = merge_dims(dims(d for d in range(len(full)) if d not in reduced))
    rows = merge_dims(dims(sorted(reduced)))
    if rows:
        return outer, rows[:-1], rows[-1]
    if reduced or not outer:  # an inner dim of one element
        return outer, [], (1, (1,) * len(arrays))
    return outer[:-1], [], outer[-1]


def _offsets(dims, count: int) -> list:
    """Per operand, the element offsets of every index of `dims` (each (size, strides)),
    the last dim fastest."""
    offsets = []
    for j in range(count):
        off = np.zeros(1, np.int64)
        for size, col in dims:
            off = (off[:, None] + np.arange(size, dtype=np.int64)[None, :] * col[j]).ravel()
        offsets.append(np.ascontiguousarray(off))
    return offsets


def rows_layout(arrays, shapes, full, reduced, squeezed, placed=None):
    """Rows, inner length, per-operand row offsets and inner strides, and the outer dims'
    strides per operand (row_dims)."""
    outer, (inner, inner_strides) = row_dims(arrays, shapes, full, reduced, squeezed,
                                             placed)
    rows = 1
    for size, _ in outer:
        rows *= size
    return rows, inner, _offsets(outer, len(arrays)), list(inner_strides), \
        [col for _, col in outer]


def segmented_rows_layout(arrays, shapes, full, reduced, squeezed, placed=None):
    """rows_layout with the reduced dims as segments and an inner run
    (segmented_row_dims): (rows, segments, inner, offsets, inner strides, outer
    strides), where an operand's offsets are its segments' offsets (none where there is
    one segment) followed by its rows' offsets."""
    outer, segments, (inner, inner_strides) = segmented_row_dims(
        arrays, shapes, full, reduced, squeezed, placed)
    rows = count = 1
    for size, _ in outer:
        rows *= size
    for size, _ in segments:
        count *= size
    row_offsets = _offsets(outer, len(arrays))
    if segments:
        row_offsets = [np.concatenate([s, r]) for s, r in
                       zip(_offsets(segments, len(arrays)), row_offsets)]
    return rows, count, inner, row_offsets, list(inner_strides), [col for _, col in outer]
