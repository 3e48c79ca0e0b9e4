"""Fused elementwise kernels for CUDA: the CPU's fused-node bodies (codegen/pointwise.py's
KernelSpec) at scalar width, one element per thread and trip of a grid-stride loop.

Every kernel takes one global pointer per operand (inputs, then outputs), each at the
operand's first element, and after them, where the kernel gathers, the i64 status word
(codegen/gather.py: set to 1 when an index is out of range). Sizes and element strides
are the graph's and are compiled in (CudaSpec): an element's coordinates come from its
linear index by division by constants, and each operand's offset is the sum of
coordinate x stride (broadcast dims have stride 0, views any strides). What each node
computes is its op record's emitter through values.compute, as on the CPU; vmath's
polynomials use only intrinsics NVPTX lowers (fma, fabs, copysign, rint, trunc, sqrt).
"""
from __future__ import annotations

from dataclasses import dataclass

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
    classes are unused) and its operands' layout: the `outer` dims and the `inner` dim,
    each (size, element stride per operand), as backends/native/pointwise.row_dims merges
    them. An elementwise kernel walks all of them; a row kernel takes the outer dims as
    its rows and reduces along the inner one."""
    kernel: K.KernelSpec
    outer: tuple
    inner: tuple

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
    pointers, the status word, offsets from coordinates, loads and stores by offset."""

    def __init__(self, spec: CudaSpec, threads: int):
        self.spec, self.threads, self.w = spec, threads, None
        k = spec.kernel
        self.operands = list(k.inputs) + list(k.outputs)
        space = llvm_ir.Target(nvptx.TRIPLE).global_space
        S = V.Lanes(None, None)
        types = [ir.PointerType(S.memory_type(v.type.dtype), space) for v in self.operands]
        names = [f"in{j}" for j in range(len(k.inputs))] + \
            [f"out{j}" for j in range(len(k.outputs))]
        if k.gathers:
            types.append(ir.PointerType(I64, space))
            names.append("status")
        self.module = nvptx.new_module(k.name)
        self.fn, self.b = nvptx.kernel(self.module, k.name, types, names, max_threads=threads)
        for arg in self.fn.args:
            arg.add_attribute("noalias")
        self.ptr = list(self.fn.args[:len(self.operands)])
        self.status = self.fn.args[-1] if k.gathers else None
        self.target = llvm_ir.Target.of(self.module)
        self.scalars = dict(k.scalars)

    def finish(self) -> CudaKernel:
        self.b.ret_void()
        return CudaKernel(self.module, self.spec.kernel.name, (self.threads, 1, 1))

    def compute(self, node, env: dict, L: V.Lanes) -> None:
        K.emit_node(node, env, L, self.scalars)

    def constants(self, env: dict) -> None:
        S = V.Lanes(self.b, None)
        for v, value in self.scalars.items():
            env[v] = S.const(value, v.type.dtype)

    def offsets(self, index, dims) -> list:
        """Each operand's element offset (i64) at linear `index` over `dims` (size,
        strides), the last dim fastest."""
        b = self.b
        offsets = [i64(0)] * len(self.operands)
        rest = index
        for position, (size, strides) in enumerate(reversed(dims)):
            last = position == len(dims) - 1
            coordinate = rest if last else b.urem(rest, i64(size))
            if not last:
                rest = b.udiv(rest, i64(size))
            for j, stride in enumerate(strides):
                if stride:
                    offsets[j] = b.add(offsets[j], b.mul(coordinate, i64(stride)))
        return offsets

    def load(self, j: int, offset):
        dt = self.operands[j].type.dtype
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


def build_elementwise(spec: CudaSpec, threads: int | None = None) -> CudaKernel:
    """The elementwise kernel of `spec`: a grid-stride loop over every element, THREADS
    per block unless `threads` says."""
    k = KernelBuilder(spec, threads or THREADS)
    b, kernel = k.b, spec.kernel
    dims = tuple(spec.outer) + (spec.inner,)
    sources = {g.source for g in kernel.gathers}  # read only through their gathers
    gathered = {g.value for g in kernel.gathers}
    start, step = k.target.grid_stride(b)
    with llvm_ir.for_range(b, start, spec.elements, step, "element") as i:
        offsets = k.offsets(i, dims)
        env = {}
        k.constants(env)
        for j, v in enumerate(kernel.inputs):
            if j not in sources:
                env[v] = k.load(j, offsets[j])
        for g in kernel.gathers:
            env[g.value] = k.gathered(g, env, offsets)
        S = V.Lanes(b, None)
        for node in kernel.nodes:
            if node.outputs[0] not in gathered:
                k.compute(node, env, S)
        n_in = len(kernel.inputs)
        for j, v in enumerate(kernel.outputs):
            k.store(n_in + j, offsets[n_in + j], env[v])
    return k.finish()
