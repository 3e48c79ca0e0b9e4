"""Shape ops. Views only compute new (shape, strides, offset) over the same Storage, so
one kernel serves every backend; copies (clone, _to_copy, cat, index ops) use numpy."""
from __future__ import annotations

import numpy as np

from eager.arguments import int_arg, int_list, size_args, tensor_list
from eager.backends import backend_for
from eager.device import as_device
from eager.dispatcher import DispatchKey, ATEN
from eager.kernels._common import (meta_from_rule, operand, promote, register, result,
                                   scalar_value, type_word)
from eager.shapes import infer_size, view_strides, wrap_dim
from eager.tensor import Tensor
from ir import dtypes
from ir.ops import Op


def _view_of(self: Tensor, shape, stride, offset: int) -> Tensor:
    return Tensor._make(self._storage, shape, stride, offset, self.dtype, self.device,
                        base=self._base if self._base is not None else self)


def _register_view(op: Op, fn) -> None:
    for key in (DispatchKey.CPU, DispatchKey.Meta):
        ATEN[op].register(key, fn)


def view(self, size):
    shape = infer_size(size_args("view", size if isinstance(size, (tuple, list)) else (size,)),
                       self.numel())
    stride = view_strides(self._shape, self._stride, shape)
    if stride is None:
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at "
                           "least one dimension spans across two contiguous subspaces). Use "
                           ".reshape(...) instead.")
    return _view_of(self, shape, stride, self._offset)


def transpose(self, dim0, dim1):
    n = self.dim()
    d0, d1 = wrap_dim(dim0, n), wrap_dim(dim1, n)
    shape, stride = list(self._shape), list(self._stride)
    if n:
        shape[d0], shape[d1] = shape[d1], shape[d0]
        stride[d0], stride[d1] = stride[d1], stride[d0]
    return _view_of(self, shape, stride, self._offset)


def t(self):
    if self.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.dim()}D")
    return transpose(self, 0, 1) if self.dim() == 2 else _view_of(self, self._shape,
                                                                   self._stride, self._offset)


def permute(self, dims):
    n = self.dim()
    dims = int_list("permute", "dims", dims)
    if len(dims) != n:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does "
                           f"not match the length of the desired ordering of dimensions i.e. "
                           f"input.dim() = {n} is not equal to len(dims) = {len(dims)}"
                           .replace("(sparse_coo)", ""))
    dims = tuple(wrap_dim(d, n) for d in dims)
    if len(set(dims)) != n:
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return _view_of(self, [self._shape[d] for d in dims], [self._stride[d] for d in dims],
                    self._offset)


def expand(self, size, *, implicit=False):
    size = size_args("expand", size)
    if len(size) < self.dim():
        raise RuntimeError(f"expand({self.dtype.name} {{{list(self._shape)}}}, size={list(size)}): "
                           "the number of sizes provided ({len(size)}) must be greater or equal "
                           f"to the number of dimensions in the tensor ({self.dim()})"
                           .replace("{len(size)}", str(len(size))))
    lead = len(size) - self.dim()
    shape, stride = [], []
    for i, want in enumerate(size):
        if i < lead:
            if want < 0:
                raise RuntimeError(f"The expanded size of the tensor ({want}) isn't allowed in a "
                                   "leading, non-existing dimension 0")
            shape.append(want)
            stride.append(0)
            continue
        have, have_stride = self._shape[i - lead], self._stride[i - lead]
        if want == -1:
            want = have
        if want < 0:
            raise RuntimeError(f"The expanded size of the tensor ({want}) must be -1 (keep the "
                               f"size) or non-negative at dimension {i}.  Target sizes: "
                               f"{list(size)}.  Tensor sizes: {list(self._shape)}")
        if have == want:
            shape.append(have)
            stride.append(have_stride)
        elif have == 1:
            shape.append(want)
            stride.append(0)
        else:
            raise RuntimeError(f"The expanded size of the tensor ({want}) must match the existing "
                               f"size ({have}) at non-singleton dimension {i}.  Target sizes: "
                               f"{list(size)}.  Tensor sizes: {list(self._shape)}")
    return _view_of(self, shape, stride, self._offset)


def unsqueeze(self, dim):
    d = wrap_dim(dim, self.dim() + 1)
    shape, stride = list(self._shape), list(self._stride)
    new_stride = shape[d] * stride[d] if d < len(shape) else 1
    shape.insert(d, 1)
    stride.insert(d, new_stride)
    return _view_of(self, shape, stride, self._offset)


def squeeze(self, dim=None):
    n = self.dim()
    if dim is None:
        dims = set(range(n))
    else:
        dims = {wrap_dim(d, n) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))}
    keep = [i for i in range(n) if not (i in dims and self._shape[i] == 1)]
    return _view_of(self, [self._shape[i] for i in keep], [self._stride[i] for i in keep],
                    self._offset)


def select(self, dim, index):
    if self.dim() == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d, index = wrap_dim(dim, self.dim()), int_arg("select", "index", index)
    size = self._shape[d]
    if not -size <= index < size:
        raise IndexError(f"index {index} is out of bounds for dimension {d} with size {size}")
    index += size if index < 0 else 0
    shape, stride = list(self._shape), list(self._stride)
    del shape[d]
    offset_step = stride.pop(d)
    return _view_of(self, shape, stride, self._offset + index * offset_step)


def slice_bounds(size: int, start, end, step) -> tuple[int, int, int]:
    if step <= 0:
        raise ValueError("slice step must be positive")
    start = 0 if start is None else start
    end = size if end is None else end
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    return start, end, step


def slice_(self, dim=0, start=None, end=None, step=1):
    if self.dim() == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    d = wrap_dim(dim, self.dim())
    start, end, step = slice_bounds(self._shape[d], start, end, step)
    shape, stride = list(self._shape), list(self._stride)
    shape[d] = (end - start + step - 1) // step
    stride[d] = stride[d] * step
    return _view_of(self, shape, stride, self._offset + start * self._stride[d])


def detach(self):
    out = _view_of(self, self._shape, self._stride, self._offset)
    out._np_cache = self._np_cache
    return out


for _op, _fn in ((Op.VIEW, view), (Op.TRANSPOSE, transpose), (Op.T, t), (Op.PERMUTE, permute),
                 (Op.EXPAND, expand), (Op.UNSQUEEZE, unsqueeze), (Op.SQUEEZE, squeeze),
                 (Op.SELECT, select), (Op.SLICE, slice_), (Op.DETACH, detach)):
    _register_view(_op, _fn)


# copies --------------------------------------------------------------------------------
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
        return backend_for(target).from_host(self._np().astype(dt.np), target)
    return result(self._np().astype(dt.np, copy=True), dt)


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
    return result(np.concatenate(parts, axis=d) if parts else np.empty(shape, dt.np), dt)


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
    out = operand(self, dt.np).copy()
    src = operand(source, dt.np) * scalar_value(alpha)
    idx = index._np().reshape(-1)
    if out.ndim == 0:
        _check_bounds("index_add", idx, 1)
        out = out + src.sum()
        return result(out, dt)
    d = wrap_dim(dim, self.dim())
    _check_bounds("index_add", idx, out.shape[d])
    np.add.at(np.moveaxis(out, d, 0), idx, np.moveaxis(src, d, 0))
    return result(out, dt)


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
