"""CUDA kernels of the ops that write parts of a new tensor: cat (one copy kernel per
input, into its slice of the result), and the backward ops of select and slice (zeros,
then the gradient copied into the selected or sliced view). Each copy is elementwise.py's
strided kernel, so inputs of any layout and any dtype (the narrow ones too) are read in
place and cast to the result's dtype (cat promotes as the CPU does). Shapes, dtypes and
errors from the Meta kernels."""
from __future__ import annotations

from eager.backends.cuda import device as D
from eager.backends.cuda.pointwise import copy_into, device_of
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.shapes import wrap_dim
from eager.tensor import ops
from ir.ops import Op


def _meta(op: Op):
    return ATEN[op].kernels[DispatchKey.Meta][0]


def _zeros(shape, dtype, dev):
    out = D.empty(shape, dtype, dev)
    with exclude_keys(*AUTOGRAD_KEYS):
        return ops.zero_(out)


def cat(tensors, dim=0):
    shaped = _meta(Op.CAT)(tensors, dim)
    dev = device_of("cat", tensors)
    out = D.empty(shaped.shape, shaped.dtype, dev)
    d = wrap_dim(dim, out.dim())
    start = 0
    with exclude_keys(*AUTOGRAD_KEYS):
        for t in tensors:
            if t.dim() == 1 and t._shape[0] == 0:  # legacy empty tensors join anything
                continue
            part = ops.slice(out, d, start, start + t._shape[d])
            copy_into(part, t)
            start += t._shape[d]
    return out


def select_backward(grad_output, input_sizes, dim, index):
    shaped = _meta(Op.SELECT_BACKWARD)(grad_output, input_sizes, dim, index)
    out = _zeros(shaped.shape, shaped.dtype, grad_output.device)
    with exclude_keys(*AUTOGRAD_KEYS):
        copy_into(ops.select(out, dim, index), grad_output)
    return out


def slice_backward(grad_output, input_sizes, dim, start, end, step):
    shaped = _meta(Op.SLICE_BACKWARD)(grad_output, input_sizes, dim, start, end, step)
    out = _zeros(shaped.shape, shaped.dtype, grad_output.device)
    with exclude_keys(*AUTOGRAD_KEYS):
        copy_into(ops.slice(out, dim, start, end, step), grad_output)
    return out


KERNELS = {Op.CAT: cat, Op.SELECT_BACKWARD: select_backward,
           Op.SLICE_BACKWARD: slice_backward}
