"""`t[idx]` and `t[idx] = v`: basic indexing (ints, slices, None, ...) makes views through
select / slice / unsqueeze; integer-tensor indices (lists and ranges of ints become such
tensors) go to `index` / `index_put_` as tensors
(their values are read only by those ops' kernels, which check them), and a boolean mask
becomes the positions of its True elements (`nonzero`). Gradients flow through all of
them."""
from __future__ import annotations

import warnings

import numpy as np

from eager.factories import full, tensor
from eager.tensor import Tensor, ops
from ir import dtypes


_SEQUENCE_WARNING = ("Using a non-tuple sequence for multidimensional indexing is deprecated "
                     "and will be changed in pytorch 2.9; use x[tuple(seq)] instead of x[seq]. "
                     "In pytorch 2.9 this will be interpreted as tensor index, "
                     "x[torch.tensor(seq)], which will result either in an error or a "
                     "different result")


def _as_tuple(idx) -> tuple:
    """The index as a tuple of per-dim indices. A list holding a sequence, slice, tensor,
    None or ... is one index per dim (NumPy's old rule, which PyTorch keeps with a warning);
    any other list or range is one integer or bool index."""
    if isinstance(idx, tuple):
        return idx
    if isinstance(idx, list) and len(idx) < 32 and any(
            i is None or i is Ellipsis or isinstance(i, (Tensor, list, tuple, range, slice,
                                                         np.ndarray)) for i in idx):
        warnings.warn(_SEQUENCE_WARNING, UserWarning, stacklevel=4)  # the caller of t[...]
        return tuple(idx)
    return (idx,)


def _normalise(self: Tensor, idx) -> list:
    idx = [_as_index_tensor(i) if isinstance(i, (list, range, np.ndarray)) else i
           for i in _as_tuple(idx)]
    used = sum(0 if i is None or i is Ellipsis or isinstance(i, bool) else 1 for i in idx)
    used += sum(t.dim() - 1 for t in idx if isinstance(t, Tensor) and t.dtype is dtypes.bool_)
    if sum(i is Ellipsis for i in idx) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if used > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    if Ellipsis in [i for i in idx if not isinstance(i, Tensor)]:
        at = next(k for k, i in enumerate(idx) if i is Ellipsis)
        idx = idx[:at] + [slice(None)] * (self.dim() - used) + idx[at + 1:]
    return idx


def _as_index_tensor(i) -> Tensor:
    """A list, range or array of indices as a tensor: int64, or bool for bools (an empty
    one is int64, as PyTorch makes it)."""
    i = list(i) if isinstance(i, range) else i
    return tensor(i, dtype=dtypes.int64) if len(i) == 0 else tensor(i)


def _views(self: Tensor, idx: list):
    """Apply the basic indices (ints, slices, None, Python bools) as views of `self`; returns
    the view and the advanced ones as (dim of the view, index tensor or mask)."""
    out, d, advanced = self, 0, []
    for item in idx:
        if item is None:
            out = ops.unsqueeze(out, d)
            d += 1
        elif isinstance(item, bool) or isinstance(item, Tensor) and item.dim() == 0 \
                and item.dtype is dtypes.bool_:
            out = ops.unsqueeze(out, d)  # a new dim of size 1, or 0 when the index is False
            if not bool(item):
                out = ops.slice(out, d, 0, 0)
            d += 1
        elif isinstance(item, int) or (isinstance(item, Tensor) and item.dim() == 0
                                       and item.dtype in (dtypes.int64, dtypes.int32)):
            out = ops.select(out, d, int(item))  # a view, as in PyTorch: reads the value
        elif isinstance(item, slice):
            step = 1 if item.step is None else item.step
            if step <= 0:
                raise ValueError("step must be greater than zero")
            # a full `:` beside other indices is no op at all, as in PyTorch
            if item != slice(None) or len(idx) == 1:
                out = ops.slice(out, d, item.start, item.stop, step)
            d += 1
        elif isinstance(item, Tensor):
            if item.dtype is dtypes.bool_:
                _check_mask_shape(item, out, d)
            elif item.dtype not in (dtypes.int64, dtypes.int32):
                raise IndexError("tensors used as indices must be long, int or bool tensors")
            advanced.append((d, item))
            d += item.dim() if item.dtype is dtypes.bool_ else 1
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"bool tensors are valid indices (got {type(item).__name__})")
    return out, advanced


def getitem(self: Tensor, idx):
    idx = _normalise(self, idx)
    out, advanced = _views(self, idx)
    if advanced:
        dim, indices = _indices(advanced)
        return ops.index(out, dim, indices)
    return ops.slice(self, 0) if out is self and idx else out  # a new view, never self


def _check_mask_shape(mask: Tensor, t: Tensor, first: int) -> None:
    for k, size in enumerate(mask.shape):
        if size != t.shape[first + k]:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {k} does not "
                             f"match the shape of the indexed tensor {list(t.shape)} at index "
                             f"{first + k}")


def _indices(advanced) -> tuple[int, list]:
    """The first indexed dim and one integer index tensor per indexed dim. A mask becomes
    the positions of its True elements (`nonzero`: a shape that depends on the data)."""
    dims, indices = [], []
    for d, index in advanced:
        if index.dtype is dtypes.bool_:
            positions = ops.nonzero(index)
            dims.extend(range(d, d + index.dim()))
            indices.extend(ops.select(positions, 1, k) for k in range(index.dim()))
        else:
            dims.append(d)
            indices.append(index)
    if dims != list(range(dims[0], dims[0] + len(dims))):
        raise IndexError("kiln supports tensor indices only on consecutive dims")
    return dims[0], indices


def setitem(self: Tensor, idx, value) -> None:
    """`self[idx] = value`, through dispatched in-place ops (copy_, fill_, index_put_), so
    autograd, version counters and graph capture see the write."""
    idx = _normalise(self, idx)
    target, advanced = _views(self, idx)
    if not advanced:
        if isinstance(value, Tensor):
            ops.copy_(target, value)
        elif isinstance(value, (list, tuple, np.ndarray)):
            ops.copy_(target, _as_index_tensor(value))
        else:
            ops.fill_(target, value)
        return
    if len(advanced) == 1 and advanced[0][1].dtype is dtypes.bool_ and _one_value(value):
        d, mask = advanced[0]  # t[mask] = v: a select over the masked dims, no data read
        trailing = target.dim() - d - mask.dim()
        where = ops.reshape(mask, list(mask.shape) + [1] * trailing)
        ops.copy_(target, ops.where(where, value, target))
        return
    dim, indices = _indices(advanced)
    if isinstance(value, Tensor):
        value = value if value.dtype is target.dtype else value.to(target.dtype)
    else:
        value = tensor(value, dtype=target.dtype, device=target.device)
    ops.index_put_(target, dim, indices, value)


def _one_value(value) -> bool:
    return isinstance(value, (int, float, bool)) or isinstance(value, Tensor) and \
        value.dim() == 0


# the functions and methods: torch.gather, Tensor.scatter_, Tensor.index_put_, ... ----------
def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    return ops.gather(input, dim, index, sparse_grad=sparse_grad)


def _src(self: Tensor, index: Tensor, src, value) -> Tensor:
    """scatter's source: a tensor, or one number (PyTorch's scatter.value) as a tensor."""
    if src is None and value is None:
        raise TypeError("scatter() missing 1 required argument: 'src' or 'value'")
    number = value if src is None else src
    if isinstance(number, Tensor):
        return number
    return full(tuple(index.shape), number, dtype=self.dtype, device=self.device)


def _check_reduce(reduce) -> None:
    if reduce is not None:
        raise NotImplementedError(f"scatter(reduce={reduce!r}) is not supported by kiln; use "
                                  "scatter_add")


def scatter(input: Tensor, dim: int, index: Tensor, src=None, *, value=None,
            reduce=None) -> Tensor:
    _check_reduce(reduce)
    return ops.scatter(input, dim, index, _src(input, index, src, value))


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return ops.scatter_add(input, dim, index, src)


def scatter_(self: Tensor, dim: int, index: Tensor, src=None, *, value=None,
             reduce=None) -> Tensor:
    return ops.copy_(self, scatter(self, dim, index, src, value=value, reduce=reduce))


def scatter_add_(self: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return ops.copy_(self, ops.scatter_add(self, dim, index, src))


def nonzero(input: Tensor, *, as_tuple: bool = False):
    positions = ops.nonzero(input)
    if not as_tuple:
        return positions
    return tuple(ops.select(positions, 1, k) for k in range(max(input.dim(), 1)))


def _put_args(self: Tensor, indices) -> tuple[int, list]:
    """PyTorch's index_put indices (a tuple of index tensors or masks, from dim 0) as the
    op's first dim and integer indices."""
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"index_put(): indices must be a tuple of tensors, got "
                        f"{type(indices).__name__}")
    advanced, d = [], 0
    for index in indices:
        if index.dtype is dtypes.bool_:
            _check_mask_shape(index, self, d)
        advanced.append((d, index))
        d += index.dim() if index.dtype is dtypes.bool_ else 1
    return _indices(advanced) if advanced else (0, [])


def index_put(input: Tensor, indices, values: Tensor, accumulate: bool = False) -> Tensor:
    return ops.index_put(input, *_put_args(input, indices), values, accumulate)


def index_put_(self: Tensor, indices, values: Tensor, accumulate: bool = False) -> Tensor:
    return ops.index_put_(self, *_put_args(self, indices), values, accumulate)
