"""CUDA kernels of eager's reductions over dims (sum, mean, amax, amin, argmax, argmin,
var) and of softmax and log_softmax.

Each runs as one launch of runtime/cuda/codegen/rows.py's row kernel where its reduced dims merge
into one inner dim (eager.shapes.merge_dims, through the native backend's row_dims):
one block per row, the threads' partial results combined with warp shuffles and shared
memory. The row length, the rows and their strides are launch arguments, so one kernel
per op, dtypes, rank and block size (a warp for rows up to 32 elements, else
rows.MAX_THREADS) serves every shape. The rows' bodies are eager/backends/row_ops.py's
graphs, made from the ops' records' formulas as the compiler's decompose pass makes its
own, a mean's and a var's divisors passed by value.

sum, mean, amax and amin take the rows only over contiguous rows of floats: over a
leading dim (a strided inner dim, where one block per row would read memory a column at
a time) and over integers, a reduction kernel gives each output element one thread,
which folds the elements it reduces in order (grid-stride over the outputs; kept and
reduced dims each merged, sizes and strides launch arguments), and a mean divides after
it. argmax, argmin and var of floats over dims that merge take the rows; the others run
argreduce.py's kernels (a thread per output; var in CUDA ops). Shapes, dtypes and errors
come from each op's Meta kernel. The narrow dtypes arrive widened (widened.py): these
kernels see bool, int32, int64, float32 and float64 only.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from runtime.layout import Layout, CannotLower, row_dims
from runtime.cpu import kernel_ir as K
from runtime.cpu import values as V
from runtime.cuda.codegen import CudaKernel
from runtime.cuda.codegen.kernel_ir import (MAX_BLOCKS, THREADS, CudaSpec, KernelBuilder,
                                            blocks_for, build_elementwise)
from runtime.cuda.codegen.reduce import WARP
from runtime.cuda.codegen.rows import MAX_THREADS, build_rows
from eager.backends.row_ops import row_op_graph
from eager.backends.cuda import argreduce
from eager.backends.cuda import device as D
from eager.backends.cuda.elementwise import layout, operand
from eager.backends.cuda.widened import widened
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.kernels._common import scalar_value
from eager.shapes import contiguous_strides, reduce_dims
from eager.tensor import ops
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op
from runtime.llvm.toolkit import fold_range, i64, offsets

_names = itertools.count(1)
ROWS = {Op.SUM: "sum", Op.MEAN: "mean", Op.AMAX: "amax", Op.AMIN: "amin",
        Op.ARGMAX: "argmax", Op.ARGMIN: "argmin", Op.VAR: "var", Op.SOFTMAX: "softmax",
        Op.LOG_SOFTMAX: "log_softmax"}
"""The ops a row kernel computes, and their kernels' names."""


# row kernels --------------------------------------------------------------------------
@dataclass(frozen=True)
class RowSpec:
    op: Op          # one of ROWS
    source: DType
    out: DType
    rank: int       # merged dims: the rows' dims, then the reduced one
    threads: int


@functools.lru_cache(maxsize=256)
def row_kernel(spec: RowSpec) -> CudaKernel:
    """rows.py's kernel of `spec`: the op's row body, sizes and strides launch
    arguments; a mean's and a var's divisors are inputs passed by value."""
    kernel = _row_body(spec, f"kiln_eager_rows_{ROWS[spec.op]}_{spec.source.name}_to_"
                             f"{spec.out.name}_r{spec.rank}_{next(_names)}")
    by_value = frozenset(range(1, len(kernel.inputs)))
    return build_rows(CudaSpec(kernel, rank=spec.rank, by_value=by_value), spec.threads)


def _row_body(spec: RowSpec, name: str) -> K.KernelSpec:
    """The op over rows of x as a KernelSpec (eager/backends/row_ops.py's graph)."""
    graph, per_row = row_op_graph(spec.op, spec.source, spec.out, ("count", "corrected_count"))
    return K.KernelSpec(name, "reduction", graph.inputs, graph.nodes, graph.outputs, (),
                        per_row, ())


def rows(op: Op, self, dims: tuple, out, numbers=()) -> bool:
    """out = op over `dims` of `self` as one row-kernel launch, if the dims merge into
    one (else False, nothing launched); `numbers`: a mean's and a var's divisors."""
    try:
        outer, inner = row_dims([Layout.of(self), Layout.of(out)],
                                [tuple(self._shape), tuple(out._shape)], tuple(self._shape),
                                frozenset(dims), [False, out.dim() < self.dim()])
    except CannotLower:
        return False
    if op in (Op.SUM, Op.MEAN, Op.AMAX, Op.AMIN) and inner[1][0] != 1 and inner[0] > 1:
        return False  # a column per block: the per-output kernel reads rows together
    if out.numel() == 0:
        return True
    dims = list(outer) + [inner]
    threads = WARP if inner[0] <= WARP else MAX_THREADS
    kernel = row_kernel(RowSpec(op, self.dtype, out.dtype, len(dims), threads))
    count = 1
    for size, _ in outer:
        count *= size
    args = [self, *numbers, out, *(size for size, _ in dims),
            *(strides[j] for j in range(2) for _, strides in dims)]
    D.launch(kernel, (min(count, MAX_BLOCKS), 1, 1), args, self.device)
    return True


# a thread per output ------------------------------------------------------------------
@dataclass(frozen=True)
class ReductionSpec:
    kind: str       # "sum", "amax" or "amin"
    source: DType
    out: DType      # also the type the fold computes in
    kept: int       # merged kept dims
    reduced: int    # merged reduced dims


@functools.lru_cache(maxsize=256)
def reduction_kernel(spec: ReductionSpec) -> CudaKernel:
    """runtime/cuda/codegen/kernel_ir.py's elementwise kernel over the outputs (sizes and strides
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


# the ops ------------------------------------------------------------------------------
def _meta(op: Op):
    return ATEN[op].kernels[DispatchKey.Meta][0]


def _floats(*dts: DType) -> bool:
    return all(dt in (dtypes.float32, dtypes.float64) for dt in dts)


def _reduction(op: Op, kind: str):
    meta = _meta(op)

    def kernel(self, dim=None, keepdim=False, **kwargs):
        shaped = meta(self, dim, keepdim, **kwargs)
        dims = tuple(reduce_dims(dim, self.dim()))
        out = D.empty(shaped.shape, shaped.dtype, self.device)
        count = 1
        for d in dims:
            count *= self._shape[d]
        numbers = (float(count),) if op is Op.MEAN else ()
        if _floats(self.dtype, out.dtype) and rows(op, self, dims, out, numbers):
            return out
        out = reduce(kind, self, dims, out)
        if op is Op.MEAN:
            with exclude_keys(*AUTOGRAD_KEYS):  # 0 / 0 is NaN, as on the CPU
                out = ops.div(out, count)
        return out
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


def _rows_kernel(op: Op, dims_of, numbers_of=lambda self, dims, kwargs: ()):
    """The CUDA kernel of an op that argreduce.py also runs: as rows over the dims that
    dims_of(self, *args, **kwargs) names, for floats where they merge into one; else
    argreduce.py's kernel."""
    meta, elsewhere = _meta(op), argreduce.KERNELS[op]

    def kernel(self, *args, **kwargs):
        shaped = meta(self, *args, **kwargs)
        if not _floats(self.dtype):
            return elsewhere(self, *args, **kwargs)
        dims = dims_of(self, *args, **kwargs)
        out = D.empty(shaped.shape, shaped.dtype, self.device)
        if rows(op, self, dims, out, numbers_of(self, dims, kwargs)):
            return out
        return elsewhere(self, *args, **kwargs)
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


def _dims(self, dim=None, *args, **kwargs) -> tuple:
    """The dims an op reduces, from its `dim` argument (None: all)."""
    return tuple(reduce_dims(dim, self.dim()))


def _var_numbers(self, dims, kwargs):
    count = 1
    for d in dims:
        count *= self._shape[d]
    correction = kwargs.get("correction")
    correction = 1 if correction is None else scalar_value(correction)
    return float(count), float(max(count - correction, 0))


def _softmax(op: Op):
    """softmax over one dim: always one row kernel (a cast first where `dtype` asks)."""
    meta = _meta(op)

    def kernel(self, dim, dtype=None):
        shaped = meta(self, dim, dtype)
        x = self if self.dtype is shaped.dtype else ops._to_copy(self, dtype=shaped.dtype)
        out = D.empty(shaped.shape, shaped.dtype, self.device)
        rows(op, x, _dims(x, dim), out)
        return out
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


KERNELS = {op: widened(op, kernel) for op, kernel in (
    (Op.SUM, _reduction(Op.SUM, "sum")), (Op.MEAN, _reduction(Op.MEAN, "sum")),
    (Op.AMAX, _reduction(Op.AMAX, "amax")), (Op.AMIN, _reduction(Op.AMIN, "amin")),
    (Op.SOFTMAX, _softmax(Op.SOFTMAX)), (Op.LOG_SOFTMAX, _softmax(Op.LOG_SOFTMAX)))}
ROW_KERNELS = {op: widened(op, kernel) for op, kernel in (
    (Op.ARGMAX, _rows_kernel(Op.ARGMAX, _dims)), (Op.ARGMIN, _rows_kernel(Op.ARGMIN, _dims)),
    (Op.VAR, _rows_kernel(Op.VAR, _dims, _var_numbers)))}
"""Kernels in place of argreduce.py's (registered after them in __init__)."""
