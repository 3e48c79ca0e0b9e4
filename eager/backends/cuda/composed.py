"""CUDA kernels written in other CUDA ops, for ops that are not elementwise:
native_layer_norm and its backward (mean, var, rsqrt and elementwise ops; the backward
as eager/kernels/normalization.py's layer_norm_backward_ops), _softmax_backward_data
and _log_softmax_backward_data (a row sum and elementwise ops), im2col and col2im
(slices, stack, slice_backward: eager/kernels/windows.py). Shapes, dtypes and
errors come from the op's Meta kernel."""
from __future__ import annotations

from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.kernels.normalization import layer_norm_backward_ops
from eager.kernels.windows import col2im_ops, im2col_ops
from eager.tensor import Tensor, ops
from eager.backends.cuda.pointwise import device_of
from ir.ops import Op


def _native_layer_norm(input, normalized_shape, weight, bias, eps):
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    mean = ops.mean(input, dims, True)
    rstd = ops.rsqrt(ops.add(ops.var(input, dims, correction=0, keepdim=True), eps))
    out = ops.mul(ops.sub(input, mean), rstd)
    if weight is not None:
        out = ops.mul(out, weight)
    if bias is not None:
        out = ops.add(out, bias)
    return out, mean, rstd


def _native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                output_mask):
    return layer_norm_backward_ops(grad_out, input, normalized_shape, mean, rstd, weight,
                                   output_mask)


def _softmax_backward(grad_output, output, dim, input_dtype):
    total = ops.sum(ops.mul(grad_output, output), [dim], True)
    return ops._to_copy(ops.mul(output, ops.sub(grad_output, total)), dtype=input_dtype)


def _log_softmax_backward(grad_output, output, dim, input_dtype):
    total = ops.sum(grad_output, [dim], True)
    return ops._to_copy(ops.sub(grad_output, ops.mul(ops.exp(output), total)),
                        dtype=input_dtype)


def _composed(op: Op, formula):
    """A CUDA kernel of `op` running `formula` in CUDA ops, after the Meta kernel's checks."""
    meta = ATEN[op].kernels[DispatchKey.Meta][0]

    def kernel(*args, **kwargs):
        meta(*args, **kwargs)
        device_of(op.schema.name, [a for a in (*args, *kwargs.values())
                                   if isinstance(a, Tensor)])
        with exclude_keys(*AUTOGRAD_KEYS):
            return formula(*args, **kwargs)
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


KERNELS = {Op.NATIVE_LAYER_NORM: _composed(Op.NATIVE_LAYER_NORM, _native_layer_norm),
           Op.NATIVE_LAYER_NORM_BACKWARD: _composed(Op.NATIVE_LAYER_NORM_BACKWARD,
                                                    _native_layer_norm_backward),
           Op.SOFTMAX_BACKWARD_DATA: _composed(Op.SOFTMAX_BACKWARD_DATA, _softmax_backward),
           Op.LOG_SOFTMAX_BACKWARD_DATA: _composed(Op.LOG_SOFTMAX_BACKWARD_DATA,
                                                   _log_softmax_backward),
           Op.IM2COL: _composed(Op.IM2COL, im2col_ops),
           Op.COL2IM: _composed(Op.COL2IM, col2im_ops)}
