"""CUDA kernels of eager's reductions over dims (sum, mean, amax, amin) and of softmax
and log_softmax.

A reduction kernel gives each output element one thread, which folds the elements it
reduces in order: codegen/cuda/pointwise.py's elementwise kernel over the outputs, kept
and reduced dims each merged where the strides allow, sizes and strides launch
arguments. Simple and exact in its order, not fast for a few long rows: the block
reductions of codegen/cuda/reduce.py and rows.py are made per fused graph node with
their sizes compiled in, so an eager call would compile a kernel per shape; taking
them needs a size-generic entry there. softmax and log_softmax are written here in the CUDA ops (amax, sub, exp, sum, div, log)
until then. Shapes, dtypes and errors come from each op's Meta kernel.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from compiler.codegen import pointwise as K
from compiler.codegen import values as V
from compiler.codegen.cuda import CudaKernel
from compiler.codegen.cuda.pointwise import (THREADS, CudaSpec, KernelBuilder, blocks_for,
                                             build_elementwise)
from compiler.eager_cuda import device as D
from compiler.eager_cuda.elementwise import layout, operand
from compiler.eager_cuda.pointwise import check_dtypes
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.shapes import contiguous_strides, reduce_dims
from eager.tensor import ops
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op
from runtime.llvm_ir import fold_range, i64, offsets

_names = itertools.count(1)


@dataclass(frozen=True)
class ReductionSpec:
    kind: str       # "sum", "amax" or "amin"
    source: DType
    out: DType      # also the type the fold computes in
    kept: int       # merged kept dims
    reduced: int    # merged reduced dims


@functools.lru_cache(maxsize=256)
def reduction_kernel(spec: ReductionSpec) -> CudaKernel:
    """codegen/cuda/pointwise.py's elementwise kernel over the outputs (sizes and strides
    launch arguments), each folding its elements; the fold's count, sizes and strides
    are extra arguments."""
    name = f"kiln_eager_{spec.kind}_{spec.source.name}_to_{spec.out.name}_{next(_names)}"
    kernel = K.KernelSpec(name, "elementwise", (operand("x", spec.source),), (),
                          (operand("out", spec.out),), (), frozenset(), ())
    extras = tuple((f"{what}{d}", dtypes.int64) for what in ("rsize", "rstride")
                   for d in range(spec.reduced))

    def body(k: KernelBuilder, at: list) -> None:
        b, L = k.b, V.Lanes(k.b, None)
        E = V.Elements(L, spec.out)
        rsizes, rstrides = ([k.extras[f"{what}{d}"] for d in range(spec.reduced)]
                            for what in ("rsize", "rstride"))

        def fold(r, acc):
            (offset,) = offsets(b, r, rsizes, [rstrides])
            x = L.cast(k.load(0, b.add(at[0], offset)), spec.source, spec.out)
            return [E.add(acc[0], x) if spec.kind == "sum" else
                    E.max(acc[0], x) if spec.kind == "amax" else E.min(acc[0], x)]
        (acc,) = fold_range(b, i64(0), k.extras["count"], 1, [_identity(L, spec)], fold, "r")
        k.store(1, at[1], acc)
    return build_elementwise(CudaSpec(kernel, rank=spec.kept,
                                      extras=(("count", dtypes.int64),) + extras), body=body)


def _identity(L: V.Lanes, spec: ReductionSpec):
    """What the fold starts from: 0, or the lowest (amax) or highest (amin) value."""
    dt = spec.out
    if spec.kind == "sum":
        return L.const(0, dt)
    if dt.is_floating_point:
        lowest, highest = float("-inf"), float("inf")
    elif dt is dtypes.bool_:
        lowest, highest = 0, 1
    else:
        highest = (1 << 8 * dt.itemsize - 1) - 1
        lowest = -highest - 1
    return L.const(lowest if spec.kind == "amax" else highest, dt)


def reduce(kind: str, self, dims: tuple, out):
    """Fold `self` over `dims` into contiguous `out` (its elements: the kept ones, in
    order) with `kind`, in out's dtype, a thread per output."""
    check_dtypes(kind, self.dtype, out.dtype)
    if out.numel() == 0:
        return out
    kept = [d for d in range(self.dim()) if d not in dims]
    kept_sizes = [self._shape[d] for d in kept]
    sizes, strides = layout(kept_sizes, [[self._stride[d] for d in kept],
                                         contiguous_strides(kept_sizes)])
    rsizes, (rstrides,) = layout([self._shape[d] for d in dims],
                                 [[self._stride[d] for d in dims]])
    count = 1
    for d in dims:
        count *= self._shape[d]
    spec = ReductionSpec(kind, self.dtype, out.dtype, len(sizes), len(rsizes))
    args = [self, out, count, *rsizes, *rstrides, *sizes, *strides[0], *strides[1]]
    D.launch(reduction_kernel(spec), (blocks_for(out.numel(), THREADS), 1, 1), args,
             self.device)
    return out


def _reduction(op: Op, kind: str):
    meta = ATEN[op].kernels[DispatchKey.Meta][0]

    def kernel(self, dim=None, keepdim=False, **kwargs):
        shaped = meta(self, dim, keepdim, **kwargs)
        dims = tuple(reduce_dims(dim, self.dim()))
        out = reduce(kind, self, dims, D.empty(shaped.shape, shaped.dtype, self.device))
        if op is Op.MEAN:
            count = 1
            for d in dims:
                count *= self._shape[d]
            with exclude_keys(*AUTOGRAD_KEYS):  # 0 / 0 is NaN, as on the CPU
                out = ops.div(out, count)
        return out
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


def _softmax(op: Op, log: bool):
    meta = ATEN[op].kernels[DispatchKey.Meta][0]

    def kernel(self, dim, dtype=None):
        shaped = meta(self, dim, dtype)
        x = self if self.dtype is shaped.dtype else ops._to_copy(self, dtype=shaped.dtype)
        if x.numel() == 0:
            return ops.clone(x)
        with exclude_keys(*AUTOGRAD_KEYS):  # the op's own Autograd kernel records it
            shifted = ops.sub(x, ops.amax(x, [dim], True))
            e = ops.exp(shifted)
            total = ops.sum(e, [dim], True)
            return ops.sub(shifted, ops.log(total)) if log else ops.div(e, total)
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


KERNELS = {Op.SUM: _reduction(Op.SUM, "sum"), Op.MEAN: _reduction(Op.MEAN, "sum"),
           Op.AMAX: _reduction(Op.AMAX, "amax"), Op.AMIN: _reduction(Op.AMIN, "amin"),
           Op.SOFTMAX: _softmax(Op.SOFTMAX, False),
           Op.LOG_SOFTMAX: _softmax(Op.LOG_SOFTMAX, True)}
