"""Eager's CUDA backend: CUDA tensors in device memory, and a CUDA kernel for each op of
the vocabulary it covers, registered under DispatchKey.CUDA through the dispatcher's
public API, as any third-party backend would register (`ATEN[op].register(key, fn)`).

eager/backends loads it the first time a CUDA tensor is asked for, once the driver is
found (runtime.cuda.current.driver()); `load()` registers the kernels once and returns the
backend (`from_host`). Each op runs single-op kernels from kiln's CUDA code generators,
built once per op, dtypes and rank and cached (elementwise.py), launched through
device.py. An op with no CUDA kernel raises the dispatcher's NotImplementedError
("Could not run 'aten::xxx' with arguments from the 'CUDA' backend"): nothing runs on
the host in its place.

Every kernel takes every dtype that PyTorch's CPU takes, bar integer products (the GEMM
is a float one), adding bools into an index (no atomic add) and the few pointwise ops
that round each step in a 16-bit float (Pointwise.own_half): those raise
NotImplementedError naming the dtype and the op. The narrow
dtypes (float16, bfloat16, uint8, int8, int16) compute in elementwise code in float32 or
their own width; the kernels that reduce, multiply or add into an index widen them
(widened.py); the ones that move elements move their words.

    pointwise.py    pointwise ops from their records, copies and casts, fill_/zero_/
                    copy_, in-place arithmetic
    widened.py      the narrow dtypes through the kernels below: cast to float32 or
                    int32 on the device, the kernel, each result cast to its Meta dtype
    reductions.py   sum, mean, amax, amin over dims; softmax, log_softmax; argmax,
                    argmin and var of floats: one launch of the row kernels where the
                    reduced dims merge into one (the narrow dtypes widened)
    matmul.py       mm, bmm, addmm, mv, dot through runtime/cuda/codegen/gemm.py (16-bit
                    floats widened to float32, rounded once)
    composed.py     native_layer_norm, its backward and softmax's backward, im2col,
                    col2im and isin in other CUDA ops (the narrow dtypes widened
                    where they compute)
    argreduce.py    argmax, argmin, max.dim, min.dim; var (where reductions.py's
                    rows do not take them)
    joins.py        cat; select_backward, slice_backward
    indexing.py     index, index_put(_), index_select, index_add, embedding, gather,
                    scatter, scatter_add (indexed.py's kernel, indices checked on the
                    device; the ones that add widen the narrow dtypes); nonzero (through
                    the host)
    views           the CPU's view kernels (eager/kernels/shape.py): they compute
                    strides over the same storage, whatever the device
"""
from __future__ import annotations

from eager.backends.cuda import (argreduce, composed, device, indexing, joins, matmul,
                                 pointwise, reductions)
from eager.dispatcher import ATEN, DispatchKey
from ir.records import RECORDS
from ir.ops import VIEW, Op

_loaded = False


class CudaBackend:
    """What eager/backends asks of a device backend."""

    @staticmethod
    def from_host(a, dev):
        return device.from_host(a, dev)


def load() -> type:
    global _loaded
    if not _loaded:
        _register()
        _loaded = True
    return CudaBackend


def _register() -> None:
    def register(op: Op, kernel) -> None:
        ATEN[op].register(DispatchKey.CUDA, kernel)

    for op, record in RECORDS.items():
        if record.pointwise is not None and record.pointwise.emit is not None and \
                not record.pointwise.not_on_cuda:
            register(op, pointwise.pointwise_kernel(record))
    for op, record in RECORDS.items():
        if record.inplace_of is not None and DispatchKey.CUDA in ATEN[record.inplace_of].kernels:
            register(op, pointwise.inplace_kernel(op, record.inplace_of))
    for op in VIEW:
        if DispatchKey.CPU in ATEN[op].kernels:  # composites (reshape, ...) need none
            fn, where = ATEN[op].kernels[DispatchKey.CPU]
            ATEN[op].register(DispatchKey.CUDA, fn, where)
    for op, kernel in ((Op.CLONE, pointwise.clone), (Op.TO_COPY, pointwise.to_copy),
                       (Op.COPY_, pointwise.copy_), (Op.FILL_, pointwise.fill_),
                       (Op.ZERO_, pointwise.zero_), *reductions.KERNELS.items(),
                       *matmul.KERNELS.items(), *argreduce.KERNELS.items(),
                       *joins.KERNELS.items(), *indexing.KERNELS.items(),
                       *composed.KERNELS.items()):
        register(op, kernel)
    for op, kernel in reductions.ROW_KERNELS.items():  # argmax, argmin, var as rows
        register(op, kernel)
