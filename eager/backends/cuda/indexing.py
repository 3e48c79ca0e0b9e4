"""CUDA kernels of the ops that read an index tensor's values: index (t[i, j]),
index_put and index_put_, index_select, index_add, embedding, gather, scatter,
scatter_add (each one launch of indexed.py's kernel, after a clone for the scatters
that return a new tensor), and nonzero. They move the narrow dtypes' words as they are;
the ones that add (index_put with accumulate, index_add, scatter_add) add float16 and
bfloat16 in float32 and the narrow integers in int32 (widened.py), rounding once.

Every index is checked on the device; a bad one raises the CPU kernel's error type and
text, naming the index the device found and the size (eager/kernels/indexing.py and
copies.py). Shapes, dtypes and every other check come from each op's Meta kernel.

nonzero's output size depends on the data: its input is copied to the host, its indices
found there (numpy's argwhere, the CPU kernel's order) and copied back. A device version
needs a count pass, a prefix sum and a write pass; the copy costs a synchronisation that
the count pass would cost too.
"""
from __future__ import annotations

import numpy as np

from eager.backends.cuda import device as D
from eager.backends.cuda.indexed import Index, indexed_copy
from eager.backends.cuda.pointwise import clone, copy_into, device_of
from eager.backends.cuda.widened import widened
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.shapes import broadcast_shapes, wrap_dim
from eager.tensor import Tensor, ops
from ir.ops import Op


def _meta(op: Op):
    return ATEN[op].kernels[DispatchKey.Meta][0]


def _as_1d(t: Tensor) -> Tensor:
    """A 0-d tensor as one element along a dim of size 1 (gather and friends index it)."""
    return t if t.dim() else Tensor._make(t._storage, (1,), (1,), t._offset, t.dtype, t.device)


def _without(strides, d: int) -> tuple:
    return tuple(0 if k == d else s for k, s in enumerate(strides))


def _broadcast(t: Tensor, shape) -> tuple:
    lead = len(shape) - t.dim()
    return tuple(0 if k < lead or t._shape[k - lead] == 1 else t._stride[k - lead]
                 for k in range(len(shape)))


def _out_of_bounds(kind, fmt: str, dims: list, sizes: list):
    def error(k, index):
        return kind(fmt.format(index=index, dim=dims[k], size=sizes[k]))
    return error


# index / index_put: t[i, j] and t[i, j] = v ---------------------------------------------
def _advanced(self: Tensor, dim: int, indices, base_strides) -> tuple:
    """(iteration shape, strides of `base_strides` over it, Index per index tensor) of
    self[..., i, j, ...] with the indices at dims dim, dim+1, ..."""
    picked = broadcast_shapes(*(i._shape for i in indices))
    rest = tuple(self._shape[dim + len(indices):])
    shape = tuple(self._shape[:dim]) + picked + rest
    strides = tuple(base_strides[:dim]) + (0,) * len(picked) + \
        tuple(base_strides[dim + len(indices):])
    ix = []
    for k, index in enumerate(indices):
        inner = _broadcast(index, picked)
        ix.append(Index(index, (0,) * dim + inner + (0,) * len(rest), self._shape[dim + k],
                        base_strides[dim + k]))
    return shape, strides, ix


_INDEX_ERROR = "index {index} is out of bounds for dimension {dim} with size {size}"


def _index_error(self, dim, indices):
    return _out_of_bounds(IndexError, _INDEX_ERROR, [dim + k for k in range(len(indices))],
                          [self._shape[dim + k] for k in range(len(indices))])


def _on_device(self, indices) -> list:
    """Indices on the host copied to self's device, as PyTorch's t[i] takes them (the
    dispatcher lets index and index_put mix devices and runs the device's kernel)."""
    if self.device.type == "cpu" or any(i.device.type != "cpu" and i.device != self.device
                                        for i in indices):
        raise RuntimeError("indices should be either on cpu or on the same device as the "
                           f"indexed tensor ({self.device})")
    return [D.from_host(i._np(), self.device) if i.device.type == "cpu" else i
            for i in indices]


def _values_on_device(self, values):
    """index_put's values: on self's device, or a zero-dim tensor on the host."""
    if values.device == self.device:
        return values
    if values.device.type == "cpu" and values.dim() == 0:
        return D.from_host(values._np(), self.device)
    raise RuntimeError("Expected all tensors to be on the same device, but found at least two "
                       f"devices, {self.device} and {values.device}! (while running "
                       "aten::index_put)")


def index(self, dim, indices):
    shaped = _meta(Op.INDEX)(self, dim, indices)
    indices = _on_device(self, indices)
    device_of("index", (self, *indices))
    if not indices:
        return clone(self)
    out = D.empty(shaped.shape, self.dtype, self.device)
    shape, strides, ix = _advanced(self, dim, indices, self._stride)
    indexed_copy(shape, out, out._stride, self, strides, ix, scatter=False, wrap=True,
                 error=_index_error(self, dim, indices))
    return out


def _put(self, dim, indices, values, accumulate, inplace: bool) -> Tensor:
    values = _values_on_device(self, values)
    indices = _on_device(self, indices)
    device_of("index_put", (self, values, *indices))
    out = self if inplace else clone(self)
    if not indices:
        with exclude_keys(*AUTOGRAD_KEYS):
            return copy_into(out, ops.add(out, values) if accumulate else values)
    shape, strides, ix = _advanced(self, dim, indices, out._stride)
    indexed_copy(shape, out, strides, values, _broadcast(values, shape), ix, scatter=True,
                 accumulate=accumulate, wrap=True, error=_index_error(self, dim, indices))
    return out


def index_put(self, dim, indices, values, accumulate=False):
    _meta(Op.INDEX_PUT)(self, dim, indices, values, accumulate)
    return _put(self, dim, indices, values, accumulate, inplace=False)


def index_put_(self, dim, indices, values, accumulate=False):
    _meta(Op.INDEX_PUT_)(self, dim, indices, values, accumulate)
    return _put(self, dim, indices, values, accumulate, inplace=True)


# gather / scatter: one index per element, along one dim -----------------------------------
def _along_error(name: str, d: int, size: int):
    return _out_of_bounds(RuntimeError, name + "(): index {index} is out of bounds for "
                          "dimension {dim} with size {size}", [d], [size])


def gather(self, dim, index, *, sparse_grad=False):
    shaped = _meta(Op.GATHER)(self, dim, index)
    device_of("gather", (self, index))
    out = D.empty(shaped.shape, self.dtype, self.device)
    source, idx, flat = _as_1d(self), _as_1d(index), _as_1d(out)
    d = wrap_dim(dim, source.dim())
    size = source._shape[d]
    indexed_copy(idx._shape, flat, flat._stride, source, _without(source._stride, d),
                 [Index(idx, idx._stride, size, source._stride[d])], scatter=False,
                 error=_along_error("gather", d, size))
    return out


def _scatter(op: Op, self, dim, index, src):
    _meta(op)(self, dim, index, src)
    device_of(op.schema.name, (self, index, src))
    out = clone(self)
    dest, idx, values = _as_1d(out), _as_1d(index), _as_1d(src)
    d = wrap_dim(dim, dest.dim())
    size = dest._shape[d]
    indexed_copy(idx._shape, dest, _without(dest._stride, d), values, values._stride,
                 [Index(idx, idx._stride, size, dest._stride[d])], scatter=True,
                 accumulate=op is Op.SCATTER_ADD, error=_along_error("scatter", d, size))
    return out


def scatter(self, dim, index, src):
    return _scatter(Op.SCATTER, self, dim, index, src)


def scatter_add(self, dim, index, src):
    return _scatter(Op.SCATTER_ADD, self, dim, index, src)


# index_select, index_add, embedding: a vector of indices into one dim ---------------------
def _vector_error(name: str, size: int):
    return _out_of_bounds(IndexError, name + "(): index {index} is out of bounds for "
                          "dimension with size {size}", [None], [size])


def _along_vector(index: Tensor, d: int, rank: int) -> tuple:
    """The strides of a 1-D (or 0-d) index over a shape whose dim d it runs along."""
    step = index._stride[0] if index.dim() else 0
    return tuple(step if k == d else 0 for k in range(rank))


def index_select(self, dim, index):
    shaped = _meta(Op.INDEX_SELECT)(self, dim, index)
    device_of("index_select", (self, index))
    out = D.empty(shaped.shape, self.dtype, self.device)
    source, flat = _as_1d(self), _as_1d(out)
    d = wrap_dim(dim, source.dim())
    size = source._shape[d]
    indexed_copy(flat._shape, flat, flat._stride, source, _without(source._stride, d),
                 [Index(index, _along_vector(index, d, flat.dim()), size, source._stride[d])],
                 scatter=False, error=_vector_error("index_select", size))
    return out


def index_add(self, dim, index, source, *, alpha=1):
    _meta(Op.INDEX_ADD)(self, dim, index, source, alpha=alpha)
    device_of("index_add", (self, index, source))
    if alpha != 1:
        with exclude_keys(*AUTOGRAD_KEYS):
            source = ops.mul(source, alpha)
    out = clone(self)
    dest, values = _as_1d(out), _as_1d(source)
    d = wrap_dim(dim, dest.dim())
    size = dest._shape[d]
    indexed_copy(values._shape, dest, _without(dest._stride, d), values, values._stride,
                 [Index(index, _along_vector(index, d, values.dim()), size, dest._stride[d])],
                 scatter=True, accumulate=True, error=_vector_error("index_add", size))
    return out


def embedding(weight, indices, padding_idx=-1):
    shaped = _meta(Op.EMBEDDING)(weight, indices, padding_idx)
    device_of("embedding", (weight, indices))
    out = D.empty(shaped.shape, weight.dtype, weight.device)
    rows = weight._shape[0]
    indexed_copy(out._shape, out, out._stride, weight,
                 (0,) * indices.dim() + (weight._stride[1],),
                 [Index(indices, tuple(indices._stride) + (0,), rows, weight._stride[0])],
                 scatter=False, error=_vector_error("embedding", rows))
    return out


# nonzero --------------------------------------------------------------------------------
def nonzero(self):
    return D.from_host(np.argwhere(D.to_host(self)).astype(np.int64), self.device)


def _accumulates(self, dim, indices, values, accumulate=False) -> bool:
    return accumulate


KERNELS = {Op.INDEX: index, Op.INDEX_PUT: widened(Op.INDEX_PUT, index_put, when=_accumulates),
           Op.INDEX_PUT_: widened(Op.INDEX_PUT_, index_put_, when=_accumulates),
           Op.GATHER: gather, Op.SCATTER: scatter,
           Op.SCATTER_ADD: widened(Op.SCATTER_ADD, scatter_add),
           Op.INDEX_SELECT: index_select, Op.INDEX_ADD: widened(Op.INDEX_ADD, index_add),
           Op.EMBEDDING: embedding, Op.NONZERO: nonzero}
