"""`t[idx]` and `t[idx] = v`: basic indexing (ints, slices, None, ...) makes views through
select / slice / unsqueeze; integer-tensor and boolean-mask indices gather through
index_select, so gradients flow through both."""
from __future__ import annotations

import numpy as np

from eager.tensor import Tensor, ops
from ir import dtypes


def _normalise(self: Tensor, idx) -> list:
    if not isinstance(idx, tuple):
        idx = (idx,)
    idx = [
        _as_index_tensor(i) if isinstance(i, (list, np.ndarray)) else i for i in idx]
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
    from eager.factories import tensor
    return tensor(i)


def getitem(self: Tensor, idx):
    idx = _normalise(self, idx)
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
            out = ops.select(out, d, int(item))
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
                mask_dims = item.dim()
                advanced.append((d, _mask_positions(item), mask_dims))
                d += mask_dims
            elif item.dtype in (dtypes.int64, dtypes.int32):
                advanced.append((d, item, 1))
                d += 1
            else:
                raise IndexError("tensors used as indices must be long, int or bool tensors")
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or "
                             f"bool tensors are valid indices (got {type(item).__name__})")
    if advanced:
        return _gather(out, advanced)
    return ops.slice(self, 0) if out is self and idx else out  # a new view, never self


def _check_mask_shape(mask: Tensor, t: Tensor, first: int) -> None:
    for k, size in enumerate(mask.shape):
        if size != t.shape[first + k]:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {k} does not "
                             f"match the shape of the indexed tensor {list(t.shape)} at index "
                             f"{first + k}")


def _mask_positions(mask: Tensor) -> list:
    """A boolean mask as one integer index per masked dim (numpy's nonzero)."""
    from eager.factories import tensor
    return [tensor(p) for p in np.nonzero(mask._host_np())]


def _gather(t: Tensor, advanced) -> Tensor:
    """Apply integer-tensor indices that sit on consecutive dims of `t`."""
    from eager.kernels._common import broadcast_shapes
    dims, indices = [], []
    for d, index, span in advanced:
        if isinstance(index, list):  # a mask expanded to one index per dim
            dims.extend(range(d, d + span))
            indices.extend(index)
        else:
            dims.append(d)
            indices.append(index)
    if dims != list(range(dims[0], dims[0] + len(dims))):
        raise IndexError("kiln supports tensor indices only on consecutive dims")
    first = dims[0]
    shape = list(t.shape)
    sizes = shape[first:first + len(dims)]
    index_shape = broadcast_shapes(*(i.shape for i in indices))
    linear = None
    for d, index, size in zip(dims, indices, sizes):
        a = index._host_np().astype(np.int64)
        if a.size and (a.min() < -size or a.max() >= size):
            bad = a[(a < -size) | (a >= size)].flat[0]
            raise IndexError(f"index {bad} is out of bounds for dimension {d} with size {size}")
        a = np.where(a < 0, a + size, a)
        linear = a if linear is None else linear * size + a
    flat_len = int(np.prod(sizes)) if sizes else 1
    merged = ops.reshape(t, shape[:first] + [flat_len] + shape[first + len(dims):])
    from eager.factories import tensor
    picked = ops.index_select(merged, first,
                              tensor(np.broadcast_to(linear, index_shape).reshape(-1)))
    return ops.reshape(picked, shape[:first] + list(index_shape) + shape[first + len(dims):])


def setitem(self: Tensor, idx, value) -> None:
    needs_grad = self.requires_grad or isinstance(value, Tensor) and value.requires_grad
    from eager.autograd.grad_mode import is_grad_enabled
    if needs_grad and is_grad_enabled():
        target = getitem(self, idx)
        if target._base is None or not isinstance(value, Tensor):
            raise RuntimeError("kiln does not support index assignment that needs a gradient "
                               "yet; build the value with where / index ops instead")
        ops.copy_(target, value)
        return
    if self.device.type != "cpu":
        raise RuntimeError(f"index assignment is only implemented for CPU tensors, not "
                           f"{self.device}")
    if not isinstance(idx, tuple):
        idx = (idx,)
    np_idx = tuple(i._host_np() if isinstance(i, Tensor) else i for i in idx)
    src = value.detach()._host_np() if isinstance(value, Tensor) else value
    target = self._np()
    try:
        target[np_idx] = src
    except IndexError as e:  # numpy's text, in PyTorch's words
        raise IndexError(str(e).replace(" for axis ", " for dimension ")) from None
    except ValueError:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(np.shape(src))} cannot "
                           f"be broadcast to indexing result of shape "
                           f"{list(target[np_idx].shape)}") from None
    self._bump()
