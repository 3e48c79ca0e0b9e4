"""CUDA kernels of the reductions that reduces.py's folds do not cover: argmax, argmin,
max.dim and min.dim (which element wins, and where), and var (the CPU's two passes).

An arg-reduction kernel gives each output element one thread (grid-stride over the
outputs, kept and reduced dims merged where the strides allow, sizes and strides launch
arguments, as reductions.py's kernels), which walks the elements it reduces in order,
keeping the best value and its position: a later element wins only when strictly better,
so ties go to the first, as on the CPU; the first NaN wins over everything (PyTorch's and
numpy's argmax and max agree on that). With dim=None the whole tensor is one row and the
position is the flat index. It writes the indices and, for max.dim/min.dim, the values.

var is the CPU kernel's formula in CUDA ops: the mean (sum, then divide), the centred
squares summed, divided by max(n - correction, 0). The narrow dtypes arrive widened
(widened.py), their winning values cast back exactly.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import llvmlite.ir as ir

from runtime.cpu import values as V
from runtime.cuda.codegen import CudaKernel
from eager.backends.cuda import device as D
from runtime.cuda.codegen.kernel_ir import THREADS, blocks_for
from eager.backends.cuda.elementwise import layout
from eager.backends.cuda.widened import widened
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.kernels._common import scalar_value
from eager.shapes import reduce_dims, wrap_dim
from eager.tensor import ops
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op
from runtime.cuda import nvptx
from runtime.llvm.toolkit import I64, Target, fold_range, for_range, i64, offsets

_names = itertools.count(1)


@dataclass(frozen=True)
class ArgSpec:
    largest: bool   # argmax / max (else argmin / min)
    source: DType
    values: bool    # also write the winning values
    kept: int       # merged kept dims
    reduced: int    # merged reduced dims (in order: the position counts through them)


@functools.lru_cache(maxsize=256)
def arg_kernel(spec: ArgSpec) -> CudaKernel:
    kind = "argmax" if spec.largest else "argmin"
    name = f"kiln_eager_{kind}_{spec.source.name}{'_values' if spec.values else ''}_" \
           f"{next(_names)}"
    module = nvptx.new_module(name)
    target = Target.of(module)
    scalar = V.Lanes(None, None)
    names = (["outputs"] + [f"size{d}" for d in range(spec.kept)] + ["values", "indices", "in"]
             + [f"stride{d}" for d in range(spec.kept)] + ["count"]
             + [f"rsize{d}" for d in range(spec.reduced)]
             + [f"rstride{d}" for d in range(spec.reduced)])
    pointers = {"values": spec.source, "indices": dtypes.int64, "in": spec.source}
    types = [ir.PointerType(scalar.memory_type(pointers[n]), target.global_space)
             if n in pointers else I64 for n in names]
    fn, b = nvptx.kernel(module, name, types, names, max_threads=THREADS)
    arg = dict(zip(names, fn.args))
    L = V.Lanes(b, None)
    E = V.Elements(L, spec.source)
    sizes = [arg[f"size{d}"] for d in range(spec.kept)]
    strides = [arg[f"stride{d}"] for d in range(spec.kept)]
    rsizes = [arg[f"rsize{d}"] for d in range(spec.reduced)]
    rstrides = [arg[f"rstride{d}"] for d in range(spec.reduced)]

    def load(at):
        return L.from_memory(b.load(b.gep(arg["in"], [at])), spec.source)
    start, step = target.grid_stride(b)
    with for_range(b, start, arg["outputs"], step, "o") as o:
        (base,) = offsets(b, o, sizes, [strides])

        def fold(r, acc):
            best, where = acc
            x = load(b.add(base, offsets(b, r, rsizes, [rstrides])[0]))
            better = E.gt(x, best) if spec.largest else E.lt(x, best)
            if spec.source.is_floating_point:  # the first NaN wins
                nan = b.fcmp_unordered("uno", x, x)
                had_nan = b.fcmp_unordered("uno", best, best)
                better = b.or_(better, b.and_(nan, b.not_(had_nan)))
            return [b.select(better, x, best), b.select(better, r, where)]
        first = load(base)
        best, where = fold_range(b, i64(1), arg["count"], 1, [first, i64(0)], fold, "r")
        b.store(where, b.gep(arg["indices"], [o]))
        if spec.values:
            b.store(L.to_memory(best, spec.source), b.gep(arg["values"], [o]))
    b.ret_void()
    return CudaKernel(module, name, (THREADS, 1, 1))


def _arg_reduce(self, dims: tuple, largest: bool, indices, values=None) -> None:
    """Write the position (counted through `dims` in order) of each kept element's best
    element into contiguous `indices`, and its value into `values` when given."""
    if indices.numel() == 0:
        return
    kept = [d for d in range(self.dim()) if d not in dims]
    sizes, (strides,) = layout([self._shape[d] for d in kept], [[self._stride[d] for d in kept]])
    rsizes, (rstrides,) = layout([self._shape[d] for d in dims],
                                 [[self._stride[d] for d in dims]])
    count = 1
    for d in dims:
        count *= self._shape[d]
    spec = ArgSpec(largest, self.dtype, values is not None, len(sizes), len(rsizes))
    args = [indices.numel(), *sizes, values if values is not None else indices, indices, self,
            *strides, count, *rsizes, *rstrides]
    D.launch(arg_kernel(spec), (blocks_for(indices.numel(), THREADS), 1, 1), args,
             self.device)


def _argmax(op: Op, largest: bool):
    meta = ATEN[op].kernels[DispatchKey.Meta][0]

    def kernel(self, dim=None, keepdim=False):
        shaped = meta(self, dim, keepdim)
        dims = tuple(range(self.dim())) if dim is None or not self.dim() else \
            (wrap_dim(dim, self.dim()),)
        out = D.empty(shaped.shape, dtypes.int64, self.device)
        _arg_reduce(self, dims, largest, out)
        return out
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


def _max_dim(op: Op, largest: bool):
    meta = ATEN[op].kernels[DispatchKey.Meta][0]

    def kernel(self, dim, keepdim=False):
        values_meta, indices_meta = meta(self, dim, keepdim)
        dims = (wrap_dim(dim, self.dim()),) if self.dim() else ()
        values = D.empty(values_meta.shape, self.dtype, self.device)
        indices = D.empty(indices_meta.shape, dtypes.int64, self.device)
        _arg_reduce(self, dims, largest, indices, values)
        return values, indices
    kernel.__name__ = f"{op.schema.name.replace('.', '_')}_cuda"
    return kernel


def var(self, dim=None, *, correction=None, keepdim=False):
    ATEN[Op.VAR].kernels[DispatchKey.Meta][0](self, dim, correction=correction,
                                              keepdim=keepdim)
    dims = list(reduce_dims(dim, self.dim()))
    ddof = 1 if correction is None else scalar_value(correction)
    n = 1
    for d in dims:
        n *= self._shape[d]
    with exclude_keys(*AUTOGRAD_KEYS):
        centred = ops.sub(self, ops.div(ops.sum(self, dims, True), n))
        squares = ops.sum(ops.mul(centred, centred), dims, keepdim)
        return ops.div(squares, float(max(n - ddof, 0)))


KERNELS = {op: widened(op, kernel) for op, kernel in (
    (Op.ARGMAX, _argmax(Op.ARGMAX, True)), (Op.ARGMIN, _argmax(Op.ARGMIN, False)),
    (Op.MAX_DIM, _max_dim(Op.MAX_DIM, True)), (Op.MIN_DIM, _max_dim(Op.MIN_DIM, False)),
    (Op.VAR, var))}
