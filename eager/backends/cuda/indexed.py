"""The one CUDA kernel behind eager's index ops: an elementwise copy over an iteration
space in which index tensors move one side's offset (the source's for a gather: index,
index_select, gather, embedding; the destination's for a scatter: index_put, scatter,
scatter_add, index_add), each index checked on the device.

    IndexedSpec              what one kernel does: the element and index dtypes, the rank,
                             which side the indices move, plain store or atomic add, and
                             whether negative indices count from the end
    indexed_copy(...)        launch it over a shape and raise the op's error for a bad index

Kernel parameters, in order: n (elements, i64), the sizes (rank i64s), the destination
and its strides, the source and its strides, per index tensor its pointer, its strides,
the size of the dim it indexes and that dim's stride on the moved side, then the status
word: two i64s the host zeroes, where the first thread to meet an index out of range
(an atomic compare-and-swap on the first word) writes which index tensor (from 1) and,
in the second word, the index. A thread whose element has a bad index writes nothing.
The host reads the status word after the launch (a synchronisation) and raises.

Destinations written twice: an atomic add sums every write (scatter_add, index_put with
accumulate, index_add); a plain store keeps one of them, which one undefined, as on
PyTorch's CUDA (the emulator's threads run in order, so the last, as on the CPU).
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from runtime.cpu import values as V
from runtime.cuda.codegen import CudaKernel
from eager.backends.cuda import device as D
from runtime.cuda.codegen.kernel_ir import THREADS, blocks_for
from eager.backends.cuda.elementwise import layout
from ir import dtypes
from ir.dtypes import DType
from runtime.llvm import toolkit as llvm_ir
from runtime.cuda import nvptx
from runtime.llvm.toolkit import I64, Target, for_range, i64, when

ATOMIC_ADD = {dtypes.float32: "fadd", dtypes.float64: "fadd", dtypes.int32: "add",
              dtypes.int64: "add"}
"""The dtypes an accumulating kernel adds atomically, and LLVM's atomicrmw for each."""

_names = itertools.count(1)


@dataclass(frozen=True)
class IndexedSpec:
    data: DType
    indices: tuple          # the DType of each index tensor
    rank: int
    scatter: bool           # the indices move the destination (else the source)
    accumulate: bool        # atomic add into the destination (else a store)
    wrap: bool              # indices in [-size, size), negative from the end (else [0, size))


@dataclass(frozen=True)
class Index:
    """One index tensor in a launch: its strides over the iteration space (0 where it is
    broadcast), the size of the dim it indexes, that dim's stride on the moved side."""
    tensor: object
    strides: tuple
    size: int
    step: int


@functools.lru_cache(maxsize=256)
def indexed_kernel(spec: IndexedSpec) -> CudaKernel:
    kind = "scatter" if spec.scatter else "gather"
    name = (f"kiln_eager_{kind}{'_add' if spec.accumulate else ''}_{spec.data.name}_"
            f"{'_'.join(d.name for d in spec.indices)}_r{spec.rank}_{next(_names)}")
    module = nvptx.new_module(name)
    target = Target.of(module)
    scalar = V.Lanes(None, None)

    def pointer(dt):
        return ir.PointerType(scalar.memory_type(dt), target.global_space)

    strides = [I64] * spec.rank
    types = [I64] * (1 + spec.rank) + [pointer(spec.data)] + strides + \
        [pointer(spec.data)] + strides
    for dt in spec.indices:
        types += [pointer(dt)] + strides + [I64, I64]
    types.append(pointer(dtypes.int64))
    fn, b = nvptx.kernel(module, name, types, max_threads=THREADS)
    args = iter(fn.args)
    n = next(args)
    sizes = [next(args) for _ in range(spec.rank)]
    dst, dst_strides = next(args), [next(args) for _ in range(spec.rank)]
    src, src_strides = next(args), [next(args) for _ in range(spec.rank)]
    indices = []
    for _ in spec.indices:
        indices.append((next(args), [next(args) for _ in range(spec.rank)], next(args),
                        next(args)))
    status = next(args)
    start, step = target.grid_stride(b)
    with for_range(b, start, n, step) as i:
        offsets = llvm_ir.offsets(b, i, sizes, [dst_strides, src_strides] +
                                  [st for _, st, _, _ in indices])
        moved, ok = i64(0), ir.Constant(ir.IntType(1), 1)
        for k, ((ptr, _, size, stride), dt, at) in enumerate(zip(indices, spec.indices,
                                                                 offsets[2:])):
            value = b.load(b.gep(ptr, [at]))
            value = value if dt is dtypes.int64 else b.sext(value, I64)
            low = b.neg(size) if spec.wrap else i64(0)
            bad = b.or_(b.icmp_signed("<", value, low), b.icmp_signed(">=", value, size))
            when(b, bad, [], lambda _, k=k, value=value: _report(b, status, k, value))
            ok = b.and_(ok, b.not_(bad))
            if spec.wrap:
                value = b.select(b.icmp_signed("<", value, i64(0)), b.add(value, size), value)
            moved = b.add(moved, b.mul(value, stride))
        to, frm = offsets[0], offsets[1]
        if spec.scatter:
            to = b.add(to, moved)
        else:
            frm = b.add(frm, moved)
        when(b, ok, [], lambda _: _move(b, spec, dst, to, src, frm))
    b.ret_void()
    return CudaKernel(module, name, (THREADS, 1, 1))


def _report(b: ir.IRBuilder, status, k: int, value) -> list:
    """The first bad index claims the status word: which index tensor, then the index."""
    won = b.extract_value(b.cmpxchg(status, i64(0), i64(k + 1), "monotonic", "monotonic"), 1)

    def record(_):
        b.store(value, b.gep(status, [i64(1)]))
        return []
    when(b, won, [], record)
    return []


def _move(b: ir.IRBuilder, spec: IndexedSpec, dst, to, src, frm) -> list:
    value = b.load(b.gep(src, [frm]))
    target = b.gep(dst, [to])
    if spec.accumulate:
        b.atomic_rmw(ATOMIC_ADD[spec.data], target, value, "monotonic")
    else:
        b.store(value, target)
    return []


def indexed_copy(shape, dst, dst_strides, src, src_strides, indices: list, *, scatter: bool,
                 accumulate: bool = False, wrap: bool = False, error=None) -> None:
    """For every position of `shape`: dst[...] = src[...] (or += with `accumulate`), the
    offsets from the strides given, one side moved by each Index's value x its step.
    A bad index raises error(k, index) (k: which Index) after the launch."""
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return
    if accumulate and dst.dtype not in ATOMIC_ADD:
        raise NotImplementedError(f"Could not run an accumulating index op on {dst.dtype.name} "
                                  "CUDA tensors: kiln's CUDA kernels add atomically only "
                                  f"{', '.join(dt.name for dt in ATOMIC_ADD)}")
    sizes, strides = layout(tuple(shape), [tuple(dst_strides), tuple(src_strides)] +
                            [tuple(ix.strides) for ix in indices])
    spec = IndexedSpec(dst.dtype, tuple(ix.tensor.dtype for ix in indices), len(sizes),
                       scatter, accumulate, wrap)
    status = D.from_host(np.zeros(2, np.int64), dst.device)
    args = [n, *sizes, dst, *strides[0], src, *strides[1]]
    for ix, st in zip(indices, strides[2:]):
        args += [ix.tensor, *st, ix.size, ix.step]
    args.append(status)
    D.launch(indexed_kernel(spec), (blocks_for(n, THREADS), 1, 1), args, dst.device)
    which, value = (int(v) for v in D.to_host(status))
    if which:
        raise error(which - 1, value)
