"""Elementwise kernels for CUDA, one element per thread and trip of a grid-stride loop:
a compiled graph's fused nodes (runtime/cpu/kernel_ir.py's KernelSpec, at scalar width) and
eager's single ops (eager/backends/cuda/elementwise.py gives its own body), over one
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

The vector kernel (CudaSpec.vector: every pointer operand contiguous over the elements,
or one element read by all; the launcher promises each pointer 16-byte aligned) walks
whole vectors of `lanes` elements, one per grid-stride trip: each contiguous operand
one ld.global.v4.f32 / v2.f64 (16 bytes of the widest dtype, at most four lanes, PTX's
widest vector) and one vector store per output, the body emitted once per lane on the
vector's scalars; then the elements past the last whole vector (fewer than `lanes`)
one per thread, as the scalar kernel does them. Its sizes are compiled in or, with rank
1, the launch's `size0`; its strides are always compiled in (no stride arguments).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from runtime.cpu import gather as G
from runtime.cpu import kernel_ir as K
from runtime.cpu import values as V
from runtime.cuda.codegen import VECTOR_BYTES, CudaKernel
from ir import dtypes
from runtime.llvm import toolkit as llvm_ir
from runtime.cuda import nvptx
from runtime.llvm.toolkit import I64, i64

THREADS = 256      # threads per block of an elementwise kernel
MAX_BLOCKS = 8192  # a grid's blocks at most: the grid-stride loop covers the rest
MAX_LANES = 4      # PTX's widest vector


@dataclass(frozen=True)
class CudaSpec:
    """A CUDA kernel: what it computes (`kernel`, the CPU's spec; its per-operand stride
    classes are unused) and its operands' layout, compiled in or given at launch. Compiled
    in: the `outer` dims and the `inner` dim, each (size, element stride per operand), as
    runtime/layout.py's row_dims merges them. As launch arguments: `rank` dims (the
    last the inner one), their sizes and strides read from the kernel's parameters. An
    elementwise kernel walks all the dims; a row kernel takes the outer ones as its rows
    and reduces along the inner one. `by_value`: positions of inputs passed as numbers,
    not pointers; `extras`: (name, dtype) of scalar parameters after the operands.
    `vector`: the vector kernel (see the module docstring), each operand's element stride
    over the one dim of elements, 1 or 0 (0 for an input passed by value too); compiled
    in: the inner dim's strides, no outer dims; as launch arguments: rank 1."""
    kernel: K.KernelSpec
    outer: tuple = ()
    inner: tuple = (1, ())
    rank: int | None = None       # sizes and strides as launch arguments (None: compiled in)
    by_value: frozenset = frozenset()
    extras: tuple = ()
    vector: tuple | None = None   # per operand 1 (contiguous) or 0 (one element for all)

    def __post_init__(self):
        if self.vector is None:
            return
        single = self.rank == 1 if self.rank is not None else \
            not self.outer and tuple(self.inner[1]) == tuple(self.vector)
        outputs = self.vector[len(self.kernel.inputs):]
        if not single or set(self.vector) - {0, 1} or 0 in outputs or self.kernel.gathers:
            raise ValueError(f"a vector kernel walks one dim of contiguous operands, its "
                             f"outputs contiguous, and gathers nothing: {self}")

    @property
    def lanes(self) -> int:
        """Elements per step of a thread: 1, or the vector kernel's lanes."""
        if self.vector is None:
            return 1
        operands = list(self.kernel.inputs) + list(self.kernel.outputs)
        return vector_lanes(v.type.dtype for j, v in enumerate(operands)
                            if j not in self.by_value)

    @property
    def rows(self) -> int:
        count = 1
        for size, _ in self.outer:
            count *= size
        return count

    @property
    def elements(self) -> int:
        return self.rows * self.inner[0]


def _by_value_type(S: V.Lanes, dt):
    """The parameter type of an input of dtype `dt` passed as a number: its memory type,
    but float32 for the 16-bit floats, a number numpy's path computes with in float32
    and does not round to the type first (x_f16 * 0.1 multiplies by 0.1f)."""
    return S.type(dt) if dt in dtypes.HALF else S.memory_type(dt)


def vector_lanes(dts) -> int:
    """Lanes of a vector kernel whose pointer operands have dtypes `dts`: a 16-byte
    vector of the widest, at most MAX_LANES."""
    return min(MAX_LANES, VECTOR_BYTES // max(dt.itemsize for dt in dts))


def blocks_for(items: int, threads: int, lanes: int = 1) -> int:
    """Blocks of `threads` for `items` work items, `lanes` of them a thread's step (0:
    nothing to launch)."""
    return min(-(-items // (threads * lanes)), MAX_BLOCKS)


class KernelBuilder:
    """A CUDA kernel's function and what its emitters share: the operands' global
    pointers (or by-value numbers), the status word and extra scalars, the dims' sizes
    and strides (ints compiled in, or the launch's arguments), offsets from coordinates,
    loads and stores by offset."""

    def __init__(self, spec: CudaSpec, threads: int):
        self.spec, self.threads, self.w = spec, threads, None
        self.vector_step = None  # the vector step being emitted: _VectorStep
        k = spec.kernel
        self.operands = list(k.inputs) + list(k.outputs)
        space = llvm_ir.Target(nvptx.TRIPLE).global_space
        S = V.Lanes(None, None)
        types = [_by_value_type(S, v.type.dtype) if j in spec.by_value else
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
        if spec.vector is not None:
            pointers = []  # strides compiled in
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
        if spec.vector is not None:
            self.strides = [[stride] for stride in spec.vector]
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

    def load(self, j: int, offset, memory: bool = False):
        """Operand j's element at `offset` (an input passed by value: its number); with
        `memory`, as memory holds it (a copy's bits, a NaN's payload kept)."""
        dt = self.operands[j].type.dtype
        if j in self.spec.by_value:
            return self.ptr[j] if dt in dtypes.HALF else \
                V.Lanes(self.b, None).from_memory(self.ptr[j], dt)
        if self.vector_step is not None:
            raw = self.vector_step.loaded[j][self.vector_step.lane]
        else:
            raw = self.b.load(llvm_ir.at(self.b, self.ptr[j], offset))
        return raw if memory else V.Lanes(self.b, None).from_memory(raw, dt)

    def store(self, j: int, offset, value, memory: bool = False) -> None:
        """`value` stored as operand j's element at `offset` (with `memory`: a value as
        memory holds it, load's with `memory`)."""
        dt = self.operands[j].type.dtype
        raw = value if memory else V.Lanes(self.b, None).to_memory(value, dt)
        if self.vector_step is not None:
            self.vector_step.stored.setdefault(j, []).append(raw)
            return
        self.b.store(raw, llvm_ir.at(self.b, self.ptr[j], offset))

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
    """The elementwise kernel of `spec`: a grid-stride loop over every element (a vector
    kernel's over its whole vectors first), THREADS per block unless `threads` says;
    body(k, offsets) emits one element (the operands' offsets at it; in a vector, k.load
    and k.store take the element's lane), by default the spec's fused nodes."""
    k = KernelBuilder(spec, threads or THREADS)
    start, step = k.target.grid_stride(k.b)
    body = body or _fused_nodes
    if spec.vector is not None:
        start = k.b.add(_vector_steps(k, start, step, body), start)
    with llvm_ir.for_range(k.b, start, k.elements, step, "element") as i:
        body(k, k.offsets(i))
    return k.finish()


@dataclass
class _VectorStep:
    """One vector of elements being emitted: the lane whose body is emitted, each
    input's raw lanes (a broadcast one's element in each), each output's stored ones."""
    lane: int
    loaded: dict
    stored: dict


def _vector_steps(k: KernelBuilder, start, step, body: Callable):
    """The whole vectors of k.spec.lanes elements, one a grid-stride trip, body emitted
    per lane; the index of the first element after them (an i64)."""
    b, lanes = k.b, k.spec.lanes
    elements = k.elements if isinstance(k.elements, ir.Value) else i64(k.elements)
    vectors = b.udiv(elements, i64(lanes))
    n_in = len(k.spec.kernel.inputs)
    with llvm_ir.for_range(b, start, vectors, step, "vector") as v:
        first = b.mul(v, i64(lanes))
        offsets = k.offsets(first)
        loaded = {}
        for j in range(n_in):
            if j in k.spec.by_value:
                continue
            pointer = llvm_ir.at(b, k.ptr[j], offsets[j])
            if k.spec.vector[j]:
                loaded[j] = llvm_ir.lanes_of(b, llvm_ir.load_vector(
                    b, pointer, lanes, lanes * k.operands[j].type.dtype.itemsize))
            else:
                loaded[j] = [b.load(pointer)] * lanes
        k.vector_step = _VectorStep(0, loaded, {})
        for lane in range(lanes):
            k.vector_step.lane = lane
            body(k, offsets)
        stored, k.vector_step = k.vector_step.stored, None
        for j, values in stored.items():
            llvm_ir.store_vector(b, llvm_ir.vector_of(b, values), llvm_ir.at(b, k.ptr[j], offsets[j]),
                                 lanes * k.operands[j].type.dtype.itemsize)
    return b.mul(vectors, i64(lanes))


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
