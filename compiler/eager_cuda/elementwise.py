"""Single-op elementwise CUDA kernels for eager: one output element per grid-stride
step, its operands found through their strides, so broadcast (stride 0), transposed,
sliced and expanded views are read in place, and a strided output is written in place
(copies into views, fills, in-place ops).

    ElementwiseSpec       what one kernel computes: the op (Op.TO_COPY: a cast), the
                          operands' dtypes and which are Python numbers (passed by value),
                          the result and compute dtypes, attributes compiled in, the rank
    elementwise_kernel    spec -> CudaKernel, built once per spec
    layout(shape, views)  the iteration space with dims merged where every operand's
                          strides allow it (a contiguous tensor is one dim)

What each op computes is its record's emitter (compiler/codegen/values.py), as in the
CPU's native kernels. Kernel parameters, in order: n (elements, i64), the sizes (rank
i64s), the output pointer and its strides, then per operand its pointer and strides, or
its value (a Python number, in the type it is used in), then the scale of the last
operand when the op's record names a scaled attribute (add's alpha): it is a launch
argument, so an optimiser's changing step size reuses the kernel.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import llvmlite.ir as ir

from compiler.codegen import values as V
from compiler.codegen.cuda import CudaKernel
from eager.records import RECORDS
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op
from runtime import nvptx
from runtime.llvm_ir import I64, Target, for_range, i64

THREADS = 128
MAX_BLOCKS = 4096  # more elements than threads: the grid-stride loop takes them


@dataclass(frozen=True)
class ElementwiseSpec:
    op: Op
    inputs: tuple            # (DType, by value) per operand
    out: DType
    compute: DType
    attrs: tuple = ()        # (name, value) compiled into the kernel
    rank: int = 1
    scaled: bool = False     # the last operand is multiplied by a launch argument

    def name(self) -> str:
        """A name for this spec's kernel, new at each call (kernels are found by name)."""
        operands = "_".join(d.name + ("s" if by_value else "") for d, by_value in self.inputs)
        return (f"kiln_eager_{self.op.schema.name}_{operands}_to_{self.out.name}"
                f"_r{self.rank}_{next(_numbers)}")


_numbers = itertools.count(1)


def blocks_for(n: int) -> int:
    return max(1, min(MAX_BLOCKS, -(-n // THREADS)))


def layout(shape, strides: list) -> tuple:
    """(sizes, [strides per operand]) over the fewest dims: size-1 dims dropped, and
    neighbouring dims merged where every operand steps through them as through one."""
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1]
    merged: list = []
    for n, st in dims:
        if merged:
            m, prev = merged[-1]
            if all(p == q * n for p, q in zip(prev, st)):
                merged[-1] = (m * n, st)
                continue
        merged.append((n, st))
    sizes = tuple(n for n, _ in merged)
    return sizes, [tuple(st[j] for _, st in merged) for j in range(len(strides))]


@functools.lru_cache(maxsize=1024)
def elementwise_kernel(spec: ElementwiseSpec) -> CudaKernel:
    name = spec.name()
    module = nvptx.new_module(name)
    target = Target.of(module)
    scalar = V.Lanes(None, None)  # the types of scalars (one lane)

    def pointer(dt):
        return ir.PointerType(scalar.memory_type(dt), target.global_space)

    types, names = [I64] * (1 + spec.rank), ["n"] + [f"size{d}" for d in range(spec.rank)]
    types += [pointer(spec.out)] + [I64] * spec.rank
    names += ["out"] + [f"out_stride{d}" for d in range(spec.rank)]
    for j, (dt, by_value) in enumerate(spec.inputs):
        if by_value:
            types.append(scalar.memory_type(dt))
            names.append(f"value{j}")
        else:
            types += [pointer(dt)] + [I64] * spec.rank
            names += [f"in{j}"] + [f"in{j}_stride{d}" for d in range(spec.rank)]
    if spec.scaled:
        types.append(scalar.type(spec.compute))
        names.append("scale")
    fn, b = nvptx.kernel(module, name, types, names, max_threads=THREADS)
    L = V.Lanes(b, None)
    args = iter(fn.args)
    n = next(args)
    sizes = [next(args) for _ in range(spec.rank)]
    out = (next(args), [next(args) for _ in range(spec.rank)])
    operands = []
    for dt, by_value in spec.inputs:
        operands.append(next(args) if by_value else
                        (next(args), [next(args) for _ in range(spec.rank)]))
    scale = next(args) if spec.scaled else None
    start, step = target.grid_stride(b)
    with for_range(b, start, n, step) as i:
        offsets = _offsets(b, i, sizes, [out[1]] + [o[1] for o in operands
                                                    if isinstance(o, tuple)])
        at = iter(offsets[1:])
        values = []
        for (dt, by_value), operand in zip(spec.inputs, operands):
            if by_value:
                values.append(L.from_memory(operand, dt))
            else:
                loaded = b.load(b.gep(operand[0], [next(at)]))
                values.append(L.from_memory(loaded, dt))
        result = _compute(L, spec, values, scale)
        b.store(L.to_memory(result, spec.out), b.gep(out[0], [offsets[0]]))
    b.ret_void()
    return CudaKernel(module, name, (THREADS, 1, 1))


def _offsets(b: ir.IRBuilder, i, sizes: list, strides: list) -> list:
    """Each operand's element offset for linear index i (the last dim varies fastest)."""
    offsets = [i64(0)] * len(strides)
    rest = i
    for d in reversed(range(len(sizes))):
        index = b.urem(rest, sizes[d]) if d else rest
        if d:
            rest = b.udiv(rest, sizes[d])
        offsets = [b.add(o, b.mul(index, st[d])) for o, st in zip(offsets, strides)]
    return offsets


def _compute(L: V.Lanes, spec: ElementwiseSpec, values: list, scale):
    in_dts = [dt for dt, _ in spec.inputs]
    if spec.op is Op.TO_COPY:
        return L.cast(values[0], in_dts[0], spec.out)
    if scale is not None:
        values = [L.cast(v, d, spec.compute) for v, d in zip(values, in_dts)]
        values[-1] = V.Elements(L, spec.compute).mul(values[-1], scale)
        in_dts = [spec.compute] * len(values)
    rule = RECORDS[spec.op].pointwise.rule
    result = V.compute(L, spec.op, values, in_dts, spec.out, dict(spec.attrs), spec.compute)
    result_dt = dtypes.bool_ if rule in ("compare", "logical") else spec.compute
    return L.cast(result, result_dt, spec.out)
