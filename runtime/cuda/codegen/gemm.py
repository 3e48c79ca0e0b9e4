"""A shared-memory tiled SGEMM and DGEMM for CUDA, as LLVM IR for NVPTX, with the CPU
GEMM's fused epilogue (runtime/cpu/gemm/api.py) applied in registers before the store:

    out = residual + scale * act(alpha * op(A) @ op(B) + beta * C + bias)

Matrices are row-major, each an element pointer and a leading dimension (elements
between rows, which may exceed the width). op(A) is m x k: A[i*lda + p], or with trans_a
A is k x m and op(A)[i, p] = A[p*lda + i]; op(B) is k x n: B[p*ldb + j], or with trans_b
B[j*ldb + p]. C is read only when beta != 0 (NaNs in it do not leak, as in BLAS) and
may be `out` itself; out must not overlap A or B (they are marked noalias).

Launch arguments, in this order (CudaGemmRequest.arguments() names them):

    m, n, k             i64      sizes, any of them 0, 1 or odd
    alpha               T        (T: float for float32, double for float64)
    a, lda              T*, i64
    b, ldb              T*, i64
    beta                T
    c, ldc              T*, i64  ldc may be 0 (one row broadcast)
    out, ldo            T*, i64
    scale               T        always applied, as on the CPU
    bias, bias_stride   T*, i64  only with a bias: bias[j*stride] ("col") or bias[i*stride] ("row")
    residual, ldr       T*, i64  only with a residual: residual[i*ldr + j]

Grid: tiles.grid_for(m, n), one block of tiles.threads threads per block_m x block_n tile
of out (x along n, y along m; at least one block, so every launch is valid). Each thread
owns a thread_m x thread_n tile of accumulators, its rows and columns in groups of one
16-byte vector, the groups spread over the block tile (a warp's shared-memory reads of
B's fragment are contiguous, so free of bank conflicts, and its stores coalesce).

The K loop is double-buffered: shared memory holds two block_k-deep slices of A (stored
k-major, transposed on the way in when A's rows run along k) and of B; while the block
computes on one slice, each thread holds its part of the next slice in registers (loaded
before the compute, so the global loads are in flight during it) and stores it to the
other buffer after; one barrier per slice. Global loads are 16-byte vectors where a
request is `aligned` (the caller promises 16-byte aligned pointers and leading dimensions
that are multiples of 16 bytes) and the vector lies inside the matrix; elsewhere each
element is loaded under its own bounds check, zero outside: no access is ever out of
bounds. Stores, and the epilogue's loads of C, bias and residual, are guarded alike.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import llvmlite.ir as ir

from runtime.cuda.codegen import VECTOR_BYTES, CudaKernel
from runtime.cpu.values import emit_activation
from runtime.cpu.gemm.emit.kernel import EpilogueSpec
from runtime.cuda import nvptx
from runtime.llvm.toolkit import (I64, Target, at, choose, constant, fold_range, i32, i64,
                                  intrinsic, lanes_of, load_vector, store_vector, vector_of,
                                  when)

_TYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType()}
_ITEMSIZE = {"float32": 4, "float64": 8}
_CONTRACT = ("contract",)  # lets LLVM fuse a multiply and an add into one FMA


@dataclass(frozen=True)
class CudaGemmTiles:
    """A block computes a block_m x block_n tile of out, walking K in slices of
    block_k; each of its threads a thread_m x thread_n tile."""
    block_m: int
    block_n: int
    block_k: int
    thread_m: int
    thread_n: int
    min_blocks: int = 1  # blocks per multiprocessor that ptxas must leave room for

    @property
    def threads(self) -> int:
        return (self.block_m // self.thread_m) * (self.block_n // self.thread_n)

    def grid_for(self, m: int, n: int) -> tuple:
        """The grid (x, y, z) that covers an m x n output: at least one block per axis."""
        return (max(1, -(-n // self.block_n)), max(1, -(-m // self.block_m)), 1)

    def check(self, dtype: str) -> None:
        """ValueError unless these tiles can be generated for `dtype`: thread tiles that
        divide the block tile in groups of one 16-byte vector, slices of A and B that
        the threads load in whole vectors."""
        lanes = VECTOR_BYTES // _ITEMSIZE[dtype]
        problems = []
        for extent, part in ((self.block_m, self.thread_m), (self.block_n, self.thread_n)):
            if part % lanes or extent % part:
                problems.append(f"a thread tile side {part} must be a multiple of {lanes} "
                                f"and divide its block tile side {extent}")
            if (extent * self.block_k) % (lanes * self.threads) or extent % lanes:
                problems.append(f"a {extent} x {self.block_k} slice is not a whole number "
                                f"of {lanes}-element vectors per thread")
        if self.block_k % lanes:
            problems.append(f"block_k {self.block_k} is not a multiple of {lanes}")
        if problems:
            raise ValueError(f"{self} cannot be generated for {dtype}: "
                             + "; ".join(problems))


# ptxas 13.0 -arch=sm_90 over the kernels tests/compiler/test_cuda_gemm.py assembles
# (every layout and epilogue; the tests hold these limits): float32 128x128x8 / 8x8,
# 256 threads, 121-128 registers (minnctapersm 2 holds them at 128 for any epilogue;
# earlier versions of this kernel took 148-255 without it), 16 KiB shared; float64 64x64x8 / 4x4, 256 threads, 76-98
# registers, 16 KiB shared; no spills. SMALL_TILES: 63 (float32), 120 (float64).
DEFAULT_TILES = {"float32": CudaGemmTiles(128, 128, 8, 8, 8, min_blocks=2),
                 "float64": CudaGemmTiles(64, 64, 8, 4, 4)}
SMALL_TILES = CudaGemmTiles(32, 32, 8, 4, 4)
"""64 threads: for the emulator, which runs each thread in Python."""


@dataclass(frozen=True)
class CudaGemmRequest:
    """What one generated kernel computes; sizes, strides and scalars are launch
    arguments. `tiles` None picks DEFAULT_TILES for the dtype."""
    dtype: str = "float32"
    trans_a: bool = False
    trans_b: bool = False
    epilogue: EpilogueSpec = field(default_factory=EpilogueSpec)
    aligned: bool = False
    tiles: CudaGemmTiles | None = None

    def __post_init__(self):
        if self.dtype not in _TYPES:
            raise ValueError(f"the CUDA GEMM is float32 or float64, not {self.dtype}")
        if self.tiles is None:
            object.__setattr__(self, "tiles", DEFAULT_TILES[self.dtype])
        self.tiles.check(self.dtype)

    @property
    def name(self) -> str:
        t = self.tiles
        return "_".join(["kiln_gemm", self.dtype, "t" if self.trans_a else "n",
                         "t" if self.trans_b else "n", self.epilogue.tag,
                         "v" if self.aligned else "s",
                         f"{t.block_m}x{t.block_n}x{t.block_k}_{t.thread_m}x{t.thread_n}"])

    def arguments(self) -> tuple:
        """The launch arguments' names, in order (see the module's docstring)."""
        names = ["m", "n", "k", "alpha", "a", "lda", "b", "ldb", "beta", "c", "ldc",
                 "out", "ldo", "scale"]
        if self.epilogue.bias:
            names += ["bias", "bias_stride"]
        if self.epilogue.residual:
            names += ["residual", "ldr"]
        return tuple(names)


@functools.lru_cache(maxsize=256)
def gemm_kernel(request: CudaGemmRequest) -> CudaKernel:
    """The kernel for `request`, built once per request (its PTX is made once per
    architecture by CudaKernel)."""
    module = nvptx.new_module(request.name)
    _GemmBuilder(module, request)
    return CudaKernel(module, request.name, (request.tiles.threads, 1, 1))


@dataclass(frozen=True)
class _Slice:
    """How one operand's block_k slice is read: `extent` (block_m or block_n) along
    m or n; `k_inner` when its memory rows run along k (A, or B transposed), so its
    global slice is extent x block_k; `shared` the two buffers, k-major."""
    pointer: ir.Value
    ld: ir.Value
    size: ir.Value      # m or n
    origin: ir.Value    # the block's first row (of A) or column (of B)
    extent: int
    k_inner: bool
    shared: ir.GlobalVariable


class _GemmBuilder:
    """Builds the kernel for one request into `module`."""

    def __init__(self, module: ir.Module, request: CudaGemmRequest):
        self.request, self.tiles, self.spec = request, request.tiles, request.epilogue
        self.T = _TYPES[request.dtype]
        self.itemsize = _ITEMSIZE[request.dtype]
        self.lanes = VECTOR_BYTES // self.itemsize
        target = Target.of(module)
        pointer = ir.PointerType(self.T, target.global_space)
        kinds = {"m": I64, "n": I64, "k": I64, "alpha": self.T, "beta": self.T,
                 "scale": self.T}
        names = request.arguments()
        types = [kinds.get(name, pointer if name in _POINTERS else I64) for name in names]
        fn, self.b = nvptx.kernel(module, request.name, types, names,
                                  max_threads=self.tiles.threads)
        if request.tiles.min_blocks > 1:  # a register budget: 64K / (threads * blocks)
            module.add_named_metadata("nvvm.annotations",
                                      [fn, "minctasm", i32(request.tiles.min_blocks)])
        for arg in fn.args[4], fn.args[6]:  # a and b: read only, never out
            arg.add_attribute("noalias")
        self.arg = dict(zip(names, fn.args))
        b, t = self.b, self.tiles
        self.tid = b.zext(target.special_register(b, "tid"), I64)
        block_col = b.zext(target.special_register(b, "ctaid", "x"), I64)
        block_row = b.zext(target.special_register(b, "ctaid", "y"), I64)
        self.thread_col = b.urem(self.tid, i64(t.block_n // t.thread_n))
        self.thread_row = b.udiv(self.tid, i64(t.block_n // t.thread_n))
        self.row0 = b.mul(block_row, i64(t.block_m))
        self.col0 = b.mul(block_col, i64(t.block_n))
        self.a = self._slice("a", self.arg["m"], self.row0, t.block_m, not request.trans_a,
                             module, target)
        self.b_slice = self._slice("b", self.arg["n"], self.col0, t.block_n,
                                   request.trans_b, module, target)
        self.places = [(s, self._slice_lanes(s)) for s in (self.a, self.b_slice)]
        self._emit()

    def _slice(self, name, size, origin, extent, k_inner, module, target) -> _Slice:
        ty = ir.ArrayType(self.T, 2 * self.tiles.block_k * extent)
        shared = ir.GlobalVariable(module, ty, f"{name}_slices", addrspace=target.shared_space)
        shared.linkage = "internal"
        shared.align = VECTOR_BYTES
        shared.initializer = ir.Constant(ty, ir.Undefined)
        return _Slice(self.arg[name], self.arg[f"ld{name}"], size, origin, extent, k_inner,
                      shared)

    # the K loop ---------------------------------------------------------------------
    def _emit(self) -> None:
        b, t = self.b, self.tiles
        k = self.arg["k"]
        slices = b.udiv(b.add(k, i64(t.block_k - 1)), i64(t.block_k))
        zero = constant(self.T, 0.0)

        def first(_):
            self._store_slices(self._load_slices(i64(0)), i64(0))
            return []

        when(b, b.icmp_signed(">", slices, i64(0)), [], first)
        self._barrier()

        def step(s, accs):
            has_next = b.icmp_signed("<", b.add(s, i64(1)), slices)
            buffer = b.and_(s, i64(1))
            count = self.lanes * sum(len(places) for _, places in self.places)
            staged = when(b, has_next, [zero] * count,
                          lambda _: self._load_slices(b.mul(b.add(s, i64(1)),
                                                            i64(t.block_k))))
            accs = self._multiply(buffer, accs)

            def stage(_):
                self._store_slices(staged, b.xor(buffer, i64(1)))
                return []

            when(b, has_next, [], stage)
            self._barrier()
            return accs

        accs = fold_range(b, 0, slices, 1, [zero] * (t.thread_m * t.thread_n), step, "slice")
        self._store(accs)
        b.ret_void()

    def _barrier(self) -> None:
        intrinsic(self.b, "nvvm.barrier.cta.sync.aligned.all", [i32(0)])

    # global slices into shared memory -----------------------------------------------
    def _slice_lanes(self, s: _Slice) -> list:
        """This thread's vectors of a slice: (row, column) of each in the global slice
        (extent x block_k when k_inner, else block_k x extent), i64 values."""
        b, t = self.b, self.tiles
        columns = t.block_k if s.k_inner else s.extent
        per_row = columns // self.lanes
        vectors = s.extent * t.block_k // self.lanes
        places = []
        for first in range(0, vectors, t.threads):
            q = b.add(self.tid, i64(first))
            places.append((b.udiv(q, i64(per_row)),
                           b.mul(b.urem(q, i64(per_row)), i64(self.lanes))))
        return places

    def _load_slices(self, k0) -> list:
        values = []
        for s, places in self.places:
            for row, column in places:
                values += self._load_vector(s, row, column, k0)
        return values

    def _load_vector(self, s: _Slice, row, column, k0) -> list:
        """`lanes` elements of a slice from global memory, zero outside the matrix."""
        b, k = self.b, self.arg["k"]
        if s.k_inner:
            row, column, rows, columns = b.add(s.origin, row), b.add(k0, column), s.size, k
        else:
            row, column, rows, columns = b.add(k0, row), b.add(s.origin, column), k, s.size
        inside = b.icmp_signed("<", row, rows)
        first = at(b, s.pointer, b.mul(row, s.ld), column)

        def by_element():
            values = []
            for lane in range(self.lanes):
                present = b.and_(inside, b.icmp_signed("<", b.add(column, i64(lane)), columns))
                values += when(b, present, [constant(self.T, 0.0)],
                               lambda _, lane=lane: [b.load(at(b, first, lane),
                                                            align=self.itemsize)])
            return values

        if not self.request.aligned:
            return by_element()
        whole = b.and_(inside, b.icmp_signed("<=", b.add(column, i64(self.lanes)), columns))
        return choose(b, whole, lambda: lanes_of(b, load_vector(b, first, self.lanes,
                                                                 VECTOR_BYTES)),
                      by_element)

    def _store_slices(self, values, buffer) -> None:
        b, t = self.b, self.tiles
        values = iter(values)
        for s, places in self.places:
            base = b.mul(buffer, i64(t.block_k * s.extent))
            for row, column in places:
                lanes = [next(values) for _ in range(self.lanes)]
                if s.k_inner:  # transposed into the k-major slice, one element at a time
                    for lane, value in enumerate(lanes):
                        index = b.add(b.mul(b.add(column, i64(lane)), i64(s.extent)), row)
                        b.store(value, self._shared(s, base, index), align=self.itemsize)
                else:
                    index = b.add(b.mul(row, i64(s.extent)), column)
                    store_vector(b, vector_of(b, lanes), self._shared(s, base, index),
                                 VECTOR_BYTES)


    def _shared(self, s: _Slice, *offsets) -> ir.Value:
        b = self.b
        return at(b, b.gep(s.shared, [i64(0), i64(0)]), *offsets)

    # the product of one slice ---------------------------------------------------------
    def _places(self, thread_index, part: int, extent: int) -> list:
        """The offsets in the block tile of a thread's `part` rows (or columns): groups
        of `lanes`, the groups `extent / groups` apart."""
        b, groups = self.b, part // self.lanes
        start = b.mul(thread_index, i64(self.lanes))
        return [b.add(start, i64(g * (extent // groups) + lane))
                for g in range(groups) for lane in range(self.lanes)]

    def _fragment(self, s: _Slice, buffer, kk: int, start, part: int) -> list:
        """A thread's `part` values of row kk of a shared slice, loaded as vectors; the
        first at `start`."""
        b, groups = self.b, part // self.lanes
        base = b.add(b.mul(buffer, i64(self.tiles.block_k * s.extent)), i64(kk * s.extent))
        values = []
        for g in range(groups):
            pointer = self._shared(s, base, start, i64(g * (s.extent // groups)))
            values += lanes_of(b, load_vector(b, pointer, self.lanes, VECTOR_BYTES))
        return values

    def _multiply(self, buffer, accs) -> list:
        b, t = self.b, self.tiles
        accs = list(accs)
        row, column = (b.mul(x, i64(self.lanes)) for x in (self.thread_row, self.thread_col))
        for kk in range(t.block_k):
            a = self._fragment(self.a, buffer, kk, row, t.thread_m)
            bb = self._fragment(self.b_slice, buffer, kk, column, t.thread_n)
            for i, x in enumerate(a):
                for j, y in enumerate(bb):
                    index = i * t.thread_n + j
                    accs[index] = b.fadd(accs[index], b.fmul(x, y, flags=_CONTRACT),
                                         flags=_CONTRACT)
        return accs

    # the epilogue and the store -------------------------------------------------------
    def _store(self, accs) -> None:
        """The epilogue and the store, one group of `lanes` columns of a row at a time
        (so that only the group's values are live beside the accumulators)."""
        b, t, arg, spec = self.b, self.tiles, self.arg, self.spec
        rows = [b.add(self.row0, r)
                for r in self._places(self.thread_row, t.thread_m, t.block_m)]
        columns = [b.add(self.col0, c)
                   for c in self._places(self.thread_col, t.thread_n, t.block_n)]
        row_in = [b.icmp_signed("<", r, arg["m"]) for r in rows]
        column_in = [b.icmp_signed("<", c, arg["n"]) for c in columns]
        read_c = b.fcmp_unordered("!=", arg["beta"], constant(self.T, 0.0))
        if spec.bias:
            places = zip(columns, column_in) if spec.bias == "col" else zip(rows, row_in)
            bias = [self._guarded(arg["bias"], b.mul(index, arg["bias_stride"]), inside)
                    for index, inside in places]
        for i in range(t.thread_m):
            for g in range(0, t.thread_n, self.lanes):
                values = []
                for j in range(g, g + self.lanes):
                    present = b.and_(row_in[i], column_in[j])
                    x = b.fmul(arg["alpha"], accs[i * t.thread_n + j])
                    x = when(b, read_c, [x], lambda xs, i=i, j=j, present=present: [
                        b.fadd(xs[0], b.fmul(arg["beta"], self._guarded(
                            arg["c"], b.mul(rows[i], arg["ldc"]), present, columns[j])))])[0]
                    if spec.bias:
                        x = b.fadd(x, bias[j] if spec.bias == "col" else bias[i])
                    if spec.activation is not None:
                        x = emit_activation(b, spec.activation, x)
                    x = b.fmul(x, arg["scale"])
                    if spec.residual:
                        x = b.fadd(x, self._guarded(arg["residual"],
                                                    b.mul(rows[i], arg["ldr"]), present,
                                                    columns[j]))
                    values.append(x)
                self._store_group(values, rows[i], columns[g], row_in[i],
                                  column_in[g:g + self.lanes])

    def _guarded(self, pointer, offset, present, column=0) -> ir.Value:
        """pointer[offset + column], or zero where `present` is false (not read)."""
        b = self.b
        return when(b, present, [constant(self.T, 0.0)],
                    lambda _: [b.load(at(b, pointer, offset, column), align=self.itemsize)])[0]

    def _store_group(self, values, row, column, row_in, column_in) -> None:
        """One group of `lanes` consecutive elements of a row of out: a vector store
        where aligned and whole, else each element where inside."""
        b, arg = self.b, self.arg
        first = at(b, arg["out"], b.mul(row, arg["ldo"]), column)

        def by_element():
            for lane, (value, present) in enumerate(zip(values, column_in)):
                with b.if_then(b.and_(row_in, present)):
                    b.store(value, at(b, first, lane), align=self.itemsize)
            return []

        if not self.request.aligned:
            by_element()
            return
        whole = b.and_(row_in, column_in[-1])

        def as_vector():
            store_vector(b, vector_of(b, values), first, VECTOR_BYTES)
            return []

        choose(b, whole, as_vector, by_element)


_POINTERS = frozenset({"a", "b", "c", "out", "bias", "residual"})
