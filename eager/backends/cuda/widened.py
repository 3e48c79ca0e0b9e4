"""The narrow dtypes (float16, bfloat16, uint8, int8, int16) in CUDA kernels that compute
(reductions, softmax, layer norm, matmul, the index ops that add): each such kernel is
wrapped by `widened`, which casts the narrow tensors on the device to their compute type
(WIDER), runs the kernel, and casts each result to the dtype the op's Meta kernel gives.

That is how PyTorch's CPU kernels and eager's numpy kernels compute them: a 16-bit float
in float32, rounded once at the end (a sum or a product accumulates in float32); a narrow
integer in a wider integer, which wraps to its width when cast back, as arithmetic in
the narrow type wraps. Widening is exact, so amax, argmax, max.dim and the like give the
narrow input's own values. The Meta kernel runs first, on the narrow arguments, so an
op that PyTorch refuses for a narrow dtype (softmax of an integer, var of an integer)
raises PyTorch's error naming that dtype, not the wider one.

A `dtype=` argument of a narrow type is widened too (sum(x, dtype=float16) sums in
float32 and rounds once). An in-place op (index_put_) runs on a wide copy of `self`,
then writes it back into `self`.

Kernels that only move elements (cat, the backward of select and slice, index, gather,
scatter, index_select, embedding, index_put without accumulate) take the narrow dtypes
as they are: they copy words and compute nothing.
"""
from __future__ import annotations

import functools

from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.tensor import Tensor, ops
from eager.backends.cuda.pointwise import copy_into
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op

WIDER = {dtypes.float16: dtypes.float32, dtypes.bfloat16: dtypes.float32,
         dtypes.uint8: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.int16: dtypes.int32}
"""Each narrow dtype's compute type on CUDA."""
NARROW = tuple(WIDER)


def widened(op: Op, kernel, narrow: tuple = NARROW, when=None):
    """`kernel` of `op`, taking the `narrow` dtypes through their WIDER types (`when`, if
    given, says from the call's arguments whether to widen: index_put only adds when
    asked to)."""
    meta = ATEN[op].kernels[DispatchKey.Meta][0]

    @functools.wraps(kernel)  # (the dispatch-table dump names the kernel's definition)
    def wide_kernel(*args, **kwargs):
        shaped = meta(*args, **kwargs)
        if not any(_narrow(a, narrow) for a in (*args, *kwargs.values())) or \
                (when is not None and not when(*args, **kwargs)):
            return kernel(*args, **kwargs)
        with exclude_keys(*AUTOGRAD_KEYS):
            out = kernel(*(_widen(a, narrow) for a in args),
                         **{k: _widen(v, narrow) for k, v in kwargs.items()})
            if op.schema.is_mutable:  # (self, the one argument an op of kiln's mutates)
                return copy_into(args[0], out)
            if isinstance(out, tuple):
                return tuple(_cast(o, m) for o, m in zip(out, shaped))
            return _cast(out, shaped)
    return wide_kernel


def _narrow(a, narrow: tuple) -> bool:
    """Whether argument `a` is a tensor or a dtype of the `narrow` dtypes."""
    dt = a.dtype if isinstance(a, Tensor) else a
    return isinstance(dt, DType) and dt in narrow


def _widen(a, narrow: tuple):
    if not _narrow(a, narrow):
        return a
    if isinstance(a, DType):
        return WIDER[a]
    return ops._to_copy(a, dtype=WIDER[a.dtype])


def _cast(out, meta):
    """A result in the dtype of its Meta tensor (None where the op gives none)."""
    return out if out is None or out.dtype is meta.dtype else ops._to_copy(out, dtype=meta.dtype)
