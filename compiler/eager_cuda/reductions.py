"""CUDA kernels of eager's reductions over dims (sum, mean, amax, amin) and of softmax
and log_softmax.

A reduction kernel gives each output element one thread, which folds the elements it
reduces in order (grid-stride over the outputs; kept and reduced dims each merged where
the strides allow, sizes and strides are launch arguments). Simple and exact in its
order, not fast for a few long rows: the block reductions of codegen/cuda/reduce.py and
rows.py are made per fused graph node with their sizes compiled in, so an eager call
would compile a kernel per shape; taking them needs a size-generic entry there.
softmax and log_softmax are written here in the CUDA ops (amax, sub, exp, sum, div, log)
until then. Shapes, dtypes and errors come from each op's Meta kernel.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import llvmlite.ir as ir

from compiler.codegen import values as V
from compiler.codegen.cuda import CudaKernel
from compiler.eager_cuda import device as D
from compiler.eager_cuda.elementwise import THREADS, blocks_for, layout
from compiler.eager_cuda.pointwise import check_dtypes
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.shapes import reduce_dims
from eager.tensor import ops
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op
from runtime import nvptx
from runtime.llvm_ir import I64, Target, fold_range, for_range, i64

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
    name = f"kiln_eager_{spec.kind}_{spec.source.name}_to_{spec.out.name}_{next(_names)}"
    module = nvptx.new_module(name)
    target = Target.of(module)
    scalar = V.Lanes(None, None)
    names = (["outputs"] + [f"size{d}" for d in range(spec.kept)] + ["out", "in"]
             + [f"stride{d}" for d in range(spec.kept)] + ["count"]
             + [f"rsize{d}" for d in range(spec.reduced)]
             + [f"rstride{d}" for d in range(spec.reduced)])
    pointers = {"out": spec.out, "in": spec.source}
    types = [ir.PointerType(scalar.memory_type(pointers[n]), target.global_space)
             if n in pointers else I64 for n in names]
    fn, b = nvptx.kernel(module, name, types, names, max_threads=THREADS)
    arg = dict(zip(names, fn.args))
    L = V.Lanes(b, None)
    E = V.Elements(L, spec.out)
    sizes = [arg[f"size{d}"] for d in range(spec.kept)]
    strides = [arg[f"stride{d}"] for d in range(spec.kept)]
    rsizes = [arg[f"rsize{d}"] for d in range(spec.reduced)]
    rstrides = [arg[f"rstride{d}"] for d in range(spec.reduced)]
    start, step = target.grid_stride(b)
    with for_range(b, start, arg["outputs"], step, "o") as o:
        base = _offset(b, o, sizes, strides)

        def fold(r, acc):
            at = b.add(base, _offset(b, r, rsizes, rstrides))
            x = L.from_memory(b.load(b.gep(arg["in"], [at])), spec.source)
            x = L.cast(x, spec.source, spec.out)
            return [E.add(acc[0], x) if spec.kind == "sum" else
                    E.max(acc[0], x) if spec.kind == "amax" else E.min(acc[0], x)]
        (acc,) = fold_range(b, i64(0), arg["count"], 1, [_identity(L, spec)], fold, "r")
        b.store(L.to_memory(acc, spec.out), b.gep(arg["out"], [o]))
    b.ret_void()
    return CudaKernel(module, name, (THREADS, 1, 1))


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


def _offset(b: ir.IRBuilder, i, sizes: list, strides: list):
    offset, rest = i64(0), i
    for d in reversed(range(len(sizes))):
        index = b.urem(rest, sizes[d]) if d else rest
        if d:
            rest = b.udiv(rest, sizes[d])
        offset = b.add(offset, b.mul(index, strides[d]))
    return offset


def reduce(kind: str, self, dims: tuple, out):
    """Fold `self` over `dims` into contiguous `out` (its elements: the kept ones, in
    order) with `kind`, in out's dtype."""
    check_dtypes(kind, self.dtype, out.dtype)
    if out.numel() == 0:
        return out
    kept = [d for d in range(self.dim()) if d not in dims]
    sizes, (strides,) = layout([self._shape[d] for d in kept], [[self._stride[d] for d in kept]])
    rsizes, (rstrides,) = layout([self._shape[d] for d in dims], [[self._stride[d] for d in dims]])
    count = 1
    for d in dims:
        count *= self._shape[d]
    spec = ReductionSpec(kind, self.dtype, out.dtype, len(sizes), len(rsizes))
    args = [out.numel(), *sizes, out, self, *strides, count, *rsizes, *rstrides]
    D.launch(reduction_kernel(spec), (blocks_for(out.numel()), 1, 1), args, self.device)
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
