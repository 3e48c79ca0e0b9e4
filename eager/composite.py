"""CompositeImplicitAutograd kernels: ops that decompose into other ops. They run above
Autograd, so autograd records the ops they decompose into (matmul -> MmBackward0)."""
from __future__ import annotations

from eager.arguments import int_arg, int_list, tensor_list
from eager.dispatcher import ATEN, DispatchKey
from ir.records import declare
from eager.shapes import broadcast_shapes, infer_size, view_strides, wrap_dim
from eager.tensor import ops
from ir.ops import Op


def _composite(op: Op, **names):
    """Register the decorated function as `op`'s composite kernel, and declare the op's
    record with `names` (see ir/records.py)."""
    declare(op, **names)

    def register(fn):
        ATEN[op].register(DispatchKey.CompositeImplicitAutograd, fn)
        return fn
    return register


@_composite(Op.MATMUL, function=True, method=True)
def matmul(self, other):
    """Pick dot / mv / mm / bmm by rank, as torch.matmul documents."""
    da, db = len(self._shape), len(other._shape)
    if da == 2 and db == 2:  # the common case first
        return ops.mm(self, other)
    if da == 0 or db == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{da}D and {db}D")
    if da == 1 and db == 1:
        return ops.dot(self, other)
    if da == 2 and db == 1:
        return ops.mv(self, other)
    if da == 1 and db == 2:
        return ops.squeeze(ops.mm(ops.unsqueeze(self, 0), other), [0])
    if da >= 3 and db <= 2:
        # fold the batch into rows: one mm instead of a batched product
        rows = self.reshape(_numel(self._shape[:-1]), self._shape[-1])  # no -1: k may be 0
        if db == 1:
            return ops.mv(rows, other).view(self._shape[:-1])
        return ops.mm(rows, other).view(self._shape[:-1] + (other._shape[-1],))
    return _batched_matmul(self, other)


def _batched_matmul(a, b):
    if len(a._shape) == 3 and len(b._shape) == 3 and a._shape[0] == b._shape[0] and \
            a._shape[2] == b._shape[1]:
        return ops.bmm(a, b)  # the common case: one batch dim, the same on both sides
    a_vec, b_vec = a.dim() == 1, b.dim() == 1
    if a_vec:
        a = ops.unsqueeze(a, 0)
    if b_vec:
        b = ops.unsqueeze(b, -1)
    n, k = a._shape[-2:]
    k2, m = b._shape[-2:]
    if k != k2:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{_numel(a._shape[:-2])}, {k}] but got: [{_numel(b._shape[:-2])}, "
                           f"{k2}].")
    batch = broadcast_shapes(a._shape[:-2], b._shape[:-2])
    nb = _numel(batch)
    a3 = ops.expand(a, batch + (n, k)).reshape(nb, n, k)
    b3 = ops.expand(b, batch + (k, m)).reshape(nb, k, m)
    out = ops.bmm(a3, b3).view(batch + (n, m))
    if a_vec:
        out = ops.squeeze(out, [-2])
    if b_vec:
        out = ops.squeeze(out, [-1])
    return out


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


@_composite(Op.LINEAR, function=True)
def linear(input, weight, bias=None):
    """As aten's linear: with a bias, a 2-d input, a 1-d one, or a contiguous one of more
    dims folded into rows, is one addmm (the bias added before the product rounds: a
    16-bit float rounds once), and the rest a product, then the bias added."""
    if bias is not None and (input.dim() == 2 or input.dim() == 1 or
                             input.dim() >= 3 and input.is_contiguous()):
        if input.dim() == 2:
            return ops.addmm(bias, input, ops.t(weight))
        rows = ops.view(input, (-1, input._shape[-1]))
        out = ops.addmm(bias, rows, ops.t(weight))
        return ops.view(out, input._shape[:-1] + (out._shape[-1],))
    out = ops.matmul(input, ops.t(weight))
    return out if bias is None else ops.add(out, bias)


@_composite(Op.RESHAPE, function=True)
def reshape(self, shape):
    shape = infer_size(int_list("reshape", "shape", shape), self.numel())
    if view_strides(self._shape, self._stride, shape) is not None:
        return ops.view(self, shape)
    return copied_as(self, shape)


def copied_as(self, shape):
    """`self` copied and viewed as `shape`, and no view of anything, as PyTorch's
    _unsafe_view makes it: nothing else holds the copy, so an in-place op on the result
    (which kiln's autograd refuses on a view) is safe."""
    out = ops.view(ops.clone(self), shape)
    out._base = None
    return out


@_composite(Op.FLATTEN, function=True, method=True)
def flatten(self, start_dim=0, end_dim=-1):
    if self.dim() == 0:
        return ops.reshape(self, [1])
    s, e = wrap_dim(start_dim, self.dim()), wrap_dim(end_dim, self.dim())
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return self
    shape = self._shape[:s] + (_numel(self._shape[s:e + 1]),) + self._shape[e + 1:]
    return ops.reshape(self, shape)


@_composite(Op.SPLIT, function=True)
def split(self, split_size, dim=0):
    d = wrap_dim(dim, self.dim())
    size = self._shape[d]
    if isinstance(split_size, (list, tuple)):
        sizes = int_list("split_with_sizes", "split_sizes", split_size)
        if any(s < 0 for s in sizes):
            raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative "
                               f"entries, but got split_sizes={list(sizes)}")
        if sum(sizes) != size:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {size} "
                               f"(input tensor's size at dimension {d}), but got split_sizes="
                               f"{list(sizes)}")
        bounds, start = [], 0
        for s in sizes:
            bounds.append((start, start + s))
            start += s
    else:
        split_size = int_arg("split", "split_size", split_size)
        if split_size < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got "
                               f"split_size={split_size}")
        if split_size == 0 and size:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got "
                               f"dimension size of {size}")
        step = max(split_size, 1)
        bounds = [(i, min(i + step, size)) for i in range(0, size, step)] or [(0, 0)]
    return tuple(ops.slice(self, d, a, b) for a, b in bounds)


@_composite(Op.CONTIGUOUS, method=True)
def contiguous(self):
    return self if self.is_contiguous() else ops.clone(self)


@_composite(Op.STACK, function=True)
def stack(tensors, dim=0):
    tensors = tensor_list("stack", tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors[1:], 1):
        if t._shape != tensors[0]._shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(tensors[0]._shape)} at entry 0 and {list(t._shape)} at "
                               f"entry {i}")
    d = wrap_dim(dim, tensors[0].dim() + 1)
    return ops.cat([ops.unsqueeze(t, d) for t in tensors], d)
