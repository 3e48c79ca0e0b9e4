"""Views: they only compute a new (shape, strides, offset) over the same Storage, so one
kernel serves every backend. (Copies are in copies.py.)"""
from __future__ import annotations

from eager.arguments import int_arg, int_list, size_args
from eager.dispatcher import ATEN, DispatchKey
from eager.kernels.gradients import sum_to
from ir.records import declare
from eager.shapes import infer_size, view_strides, wrap_dim
from eager.tensor import Size, Tensor, ops
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
    if len(self._shape) == 2:  # the common case, without transpose's general steps
        (rows, cols), (row_stride, col_stride) = self._shape, self._stride
        return _view_of(self, Size((cols, rows)), (col_stride, row_stride), self._offset)
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


# records: names and derivatives -----------------------------------------------------
VIEW = declare(Op.VIEW)


@VIEW.derivative("ViewBackward0", "self", save="self_sizes")
def _(ctx, g):
    return ops.reshape(g, ctx.self_sizes)


TRANSPOSE = declare(Op.TRANSPOSE, function=True, method=True)


@TRANSPOSE.derivative("TransposeBackward0", "self", save="dim0 dim1")
def _(ctx, g):
    return ops.transpose(g, ctx.dim0, ctx.dim1)


T = declare(Op.T, function=True, method=True)


@T.derivative("TBackward0", "self")
def _(ctx, g):
    return ops.t(g)


PERMUTE = declare(Op.PERMUTE, function=True)


@PERMUTE.derivative("PermuteBackward0", "self", save="dims")
def _(ctx, g):
    n = len(ctx.dims)
    dims = [d % n for d in ctx.dims]
    inverse = [0] * n
    for i, d in enumerate(dims):
        inverse[d] = i
    return ops.permute(g, inverse)


EXPAND = declare(Op.EXPAND, function=True)


@EXPAND.derivative("ExpandBackward0", "self", save="self_sizes")
def _(ctx, g):
    return sum_to(g, ctx.self_sizes)


UNSQUEEZE = declare(Op.UNSQUEEZE, function=True, method=True)


@UNSQUEEZE.derivative("UnsqueezeBackward0", "self", save="dim")
def _(ctx, g):
    return ops.squeeze(g, [ctx.dim])


SQUEEZE = declare(Op.SQUEEZE, function=True)


@SQUEEZE.derivative("SqueezeBackward2", "self", save="self_sizes",
                    overloads={"SqueezeBackward0": lambda a: a["dim"] is None,
                    "SqueezeBackward1": lambda a: isinstance(a["dim"], int)})


def _(ctx, g):
    return ops.reshape(g, ctx.self_sizes)


SELECT = declare(Op.SELECT, function=True, method=True)


@SELECT.derivative("SelectBackward0", "self", save="self_sizes dim index")
def _(ctx, g):
    return ops.select_backward(g, ctx.self_sizes, ctx.dim, ctx.index)


SLICE = declare(Op.SLICE)


@SLICE.derivative("SliceBackward0", "self", save="self_sizes dim start end step")
def _(ctx, g):
    return ops.slice_backward(g, ctx.self_sizes, ctx.dim, ctx.start, ctx.end, ctx.step)


DETACH = declare(Op.DETACH, function=True, method=True, differentiable=False)
