"""Elementwise kernels for CUDA, one element per thread and trip of a grid-stride loop:
a compiled graph's fused nodes (codegen/pointwise.py's KernelSpec, at scalar width) and
eager's single ops (compiler/eager_cuda/elementwise.py gives its own body), over one
frame of parameters and addressing that rows.py's row kernels share.

Every kernel takes one argument per operand (inputs, then outputs): a global pointer at
the operand's first element, or for an input passed by value its number; after them,
where the kernel gathers, the i64 status word (codegen/gather.py: set to 1 when an index
is out of range), then the spec's extra scalars. Sizes and element strides are either
compiled in (a compiled graph's, CudaSpec.outer/inner: a kernel per layout, whose
coordinates come from the linear index by division by constants) or launch arguments
(CudaSpec.rank: the sizes, then each pointer operand's strides; one kernel serves every
shape and view of that rank). Each operand's offset is the sum of coordinate x stride
(llvm_ir.offsets; broadcast dims have stride 0, views any strides). What each node
computes is its op record's emitter through values.compute, as on the CPU; vmath's
polynomials use only intrinsics NVPTX lowers (fma, fabs, copysign, rint, trunc, sqrt).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from compiler.codegen import gather as G
from compiler.codegen import pointwise as K
from compiler.codegen import values as V
from compiler.codegen.cuda import CudaKernel
from ir import dtypes
from runtime import llvm_ir, nvptx
from runtime.llvm_ir import I64, i64

THREADS = 256      # threads per block of an elementwise kernel
MAX_BLOCKS = 8192  # a grid's blocks at most: the grid-stride loop covers the rest


@dataclass(frozen=True)
class CudaSpec:
    """A CUDA kernel: what it computes (`kernel`, the CPU's spec; its per-operand stride
    classes are unused) and its operands' layout, compiled in or given at launch. Compiled
    in: the `outer` dims and the `inner` dim, each (size, element stride per operand), as
    backends/native/pointwise.row_dims merges them. As launch arguments: `rank` dims (the
    last the inner one), their sizes and strides read from the kernel's parameters. An
    elementwise kernel walks all the dims; a row kernel takes the outer ones as its rows
    and reduces along the inner one. `by_value`: positions of inputs passed as numbers,
    not pointers; `extras`: (name, dtype) of scalar parameters after the operands."""
    kernel: K.KernelSpec
    outer: tuple = ()
    inner: tuple = (1, ())
    rank: int | None = None       # sizes and strides as launch arguments (None: compiled in)
    by_value: frozenset = frozenset()
    extras: tuple = ()

    @property
    def rows(self) -> int:
        count = 1
        for size, _ in self.outer:
            count *= size
        return count

    @property
    def elements(self) -> int:
        return self.rows * self.inner[0]


def blocks_for(items: int, threads: int) -> int:
    """Blocks of `threads` for `items` work items (0: nothing to launch)."""
    return min(-(-items // threads), MAX_BLOCKS)


class KernelBuilder:
    """A CUDA kernel's function and what its emitters share: the operands' global
    pointers (or by-value numbers), the status word and extra scalars, the dims' sizes
    and strides (ints compiled in, or the launch's arguments), offsets from coordinates,
    loads and stores by offset."""

    def __init__(self, spec: CudaSpec, threads: int):
        self.spec, self.threads, self.w = spec, threads, None
        k = spec.kernel
        self.operands = list(k.inputs) + list(k.outputs)
        space = llvm_ir.Target(nvptx.TRIPLE).global_space
        S = V.Lanes(None, None)
        types = [S.memory_type(v.type.dtype) if j in spec.by_value else
                 ir.PointerType(S.memory_type(v.type.dtype), space)
                 for j, v in enumerate(self.operands)]
        names = [f"in{j}" for j in range(len(k.inputs))] + \
            [f"out{j}" for j in range(len(k.outputs))]
        if k.gathers:
            types.append(ir.PointerType(I64, space))
            names.append("status")
        types += [S.type(dt) for _, dt in spec.extras]
        names += [name for name, _ in spec.extras]
        pointers = [j for j in range(len(self.operands)) if j not in spec.by_value]
        if spec.rank is not None:
            types += [I64] * (spec.rank * (1 + len(pointers)))
            names += [f"size{d}" for d in range(spec.rank)] + \
                [f"{names[j]}_stride{d}" for j in pointers for d in range(spec.rank)]
        self.module = nvptx.new_module(k.name)
        self.fn, self.b = nvptx.kernel(self.module, k.name, types, names, max_threads=threads)
        for arg in self.fn.args:
            if isinstance(arg.type, ir.PointerType):
                arg.add_attribute("noalias")
        args = iter(self.fn.args)
        self.ptr = [next(args) for _ in self.operands]
        self.status = next(args) if k.gathers else None
        self.extras = {name: next(args) for name, _ in spec.extras}
        self.target = llvm_ir.Target.of(self.module)
        self.scalars = dict(k.scalars)
        self._dims(args, pointers)

    def _dims(self, args, pointers: list) -> None:
        """self.sizes and self.strides (per operand, along each dim; an operand passed by
        value has zeros) from the spec or from the remaining arguments `args`."""
        spec = self.spec
        if spec.rank is None:
            dims = tuple(spec.outer) + (spec.inner,)
            self.sizes = [size for size, _ in dims]
            self.strides = [[strides[j] for _, strides in dims]
                            for j in range(len(self.operands))]
            self.elements = spec.elements
            return
        self.sizes = [next(args) for _ in range(spec.rank)]
        self.strides = [[0] * spec.rank for _ in self.operands]
        for j in pointers:
            self.strides[j] = [next(args) for _ in range(spec.rank)]
        self.elements = self.product(self.sizes)

    def product(self, sizes: list):
        """The product of `sizes` (ints or i64 values); 1 for none."""
        if all(isinstance(size, int) for size in sizes):
            count = 1
            for size in sizes:
                count *= size
            return count
        count = i64(1)
        for size in sizes:
            count = self.b.mul(count, i64(size) if isinstance(size, int) else size)
        return count

    def finish(self) -> CudaKernel:
        self.b.ret_void()
        return CudaKernel(self.module, self.spec.kernel.name, (self.threads, 1, 1))

    def compute(self, node, env: dict, L: V.Lanes) -> None:
        K.emit_node(node, env, L, self.scalars)

    def constants(self, env: dict) -> None:
        S = V.Lanes(self.b, None)
        for v, value in self.scalars.items():
            env[v] = S.const(value, v.type.dtype)

    def offsets(self, index, dims: slice = slice(None)) -> list:
        """Each operand's element offset (i64) at linear `index` over the dims `dims`
        (all by default), the last dim fastest."""
        return llvm_ir.offsets(self.b, index, self.sizes[dims],
                               [strides[dims] for strides in self.strides])

    def load(self, j: int, offset):
        """Operand j's element at `offset` (an input passed by value: its number)."""
        dt = self.operands[j].type.dtype
        if j in self.spec.by_value:
            return V.Lanes(self.b, None).from_memory(self.ptr[j], dt)
        raw = self.b.load(llvm_ir.at(self.b, self.ptr[j], offset))
        return V.Lanes(self.b, None).from_memory(raw, dt)

    def store(self, j: int, offset, value) -> None:
        dt = self.operands[j].type.dtype
        self.b.store(V.Lanes(self.b, None).to_memory(value, dt),
                     llvm_ir.at(self.b, self.ptr[j], offset))

    def gathered(self, g: G.Gather, env: dict, offsets: list):
        """A gather's element: its index (already in env) checked, wrapped and moved
        along the source's indexed dim."""
        b = self.b
        index_value = self.spec.kernel.inputs[g.index]
        index = V.Lanes(b, None).cast(env[index_value], index_value.type.dtype,
                                      dtypes.int64)
        safe = G.checked(self, g, index)
        return self.load(g.source, b.add(offsets[g.source], b.mul(safe, i64(g.stride))))


def build_elementwise(spec: CudaSpec, threads: int | None = None,
                      body: Callable | None = None) -> CudaKernel:
    """The elementwise kernel of `spec`: a grid-stride loop over every element, THREADS
    per block unless `threads` says; body(k, offsets) emits one element (the operands'
    offsets at it), by default the spec's fused nodes."""
    k = KernelBuilder(spec, threads or THREADS)
    start, step = k.target.grid_stride(k.b)
    with llvm_ir.for_range(k.b, start, k.elements, step, "element") as i:
        (body or _fused_nodes)(k, k.offsets(i))
    return k.finish()


def _fused_nodes(k: KernelBuilder, offsets: list) -> None:
    """One element of a compiled graph's fused node: its inputs loaded (a gather's
    source at the gathered index), its nodes computed, its outputs stored."""
    kernel = k.spec.kernel
    sources = {g.source for g in kernel.gathers}  # read only through their gathers
    gathered = {g.value for g in kernel.gathers}
    env = {}
    k.constants(env)
    for j, v in enumerate(kernel.inputs):
        if j not in sources:
            env[v] = k.load(j, offsets[j])
    for g in kernel.gathers:
        env[g.value] = k.gathered(g, env, offsets)
    S = V.Lanes(k.b, None)
    for node in kernel.nodes:
        if node.outputs[0] not in gathered:
            k.compute(node, env, S)
    n_in = len(kernel.inputs)
    for j, v in enumerate(kernel.outputs):
        k.store(n_in + j, offsets[n_in + j], env[v])
