"""Shape-specialised GEMM kernels for small products.

    out = residual + scale * act(alpha * A @ B + beta * C + bias)

the semantics of gemm_kernel's tile store, with M, N, K and every stride compiled in as
constants: loop bounds, the M and N tails (their row counts and lane masks) and the
register tile are fixed when the kernel is built, so a call does no blocking, packing
or tail arithmetic. A is read in place (scalar broadcasts, any strides); B is read in
place when its rows are contiguous, otherwise first copied into a stack buffer as rows
(a transposed B through in-register vector transposes, any other layout element by
element). C is not read when the kernel has no C (beta == 0).

`small_kernel(...)` returns a `SmallKernel` (compiled once per key; the disk cache of
runtime.jit serves later processes) with two entry points taking only the operands and
the scalars the key leaves at runtime: `fn` on addresses (~0.3 us per call through
ctypes) and `on_arrays` on the ndarrays themselves (~0.5 us: their data pointers are
read natively, where `x.ctypes.data` costs ~1 us each in Python). `fits(m, n, k)` says
which products these kernels are for; at most MAX_KERNELS variants are compiled per
process (MCJIT never frees code), after which `small_kernel` returns None and the
caller uses the generic kernel.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from compiler import debugging
from compiler.codegen.gemm_ir import I1, I32, I64, PACK_ALIGN
from compiler.codegen.gemm_native import ARRAY_DATA_OFFSET
from compiler.codegen.gemm_kernel import (KERNEL_ARGS, EpilogueSpec, Tile,
                                          emit_activation, export_item)
from compiler.codegen.gemm_store import TileStore, Update

SMALL_MAX_MACS = 200 ** 3  # above this the packed kernel's cache blocking wins
BUFFER_MAX_ELEMENTS = 48 * 1024  # K x N of a B copied to the stack (384 KiB in float64)
MAX_KERNELS = 512  # compiled variants per process; MCJIT never frees code
FULL_UNROLL_K = 8  # K up to this is unrolled completely
K_UNROLL = 4
L1_PANEL_BYTES = 32 * 1024  # a B panel up to this stays in L1 (48 KiB) next to A's rows


def fits(m: int, n: int, k: int) -> bool:
    """Whether a product of these sizes is small enough for a specialised kernel: at
    most SMALL_MAX_MACS multiply-adds, and B within the stack buffer should it need a
    copy."""
    return m >= 1 and n >= 1 and k >= 1 and m * n * k <= SMALL_MAX_MACS and (
        k * (n + 16) <= BUFFER_MAX_ELEMENTS)


@dataclass(frozen=True)
class SmallKey:
    """Everything a specialised kernel is compiled for. Strides are in elements; out
    has unit column stride. `c_strides` None: no C (beta == 0). `alpha`/`scale` False:
    compiled as 1; True: runtime arguments."""
    dtype: str
    m: int
    n: int
    k: int
    a_strides: tuple[int, int]
    b_strides: tuple[int, int]
    out_row_stride: int
    spec: EpilogueSpec = EpilogueSpec()
    c_strides: tuple[int, int] | None = None
    bias_stride: int = 1
    residual_strides: tuple[int, int] | None = None
    alpha: bool = False
    scale: bool = False

    @property
    def args(self) -> tuple:
        """The kernel's arguments, (name, kind) as in gemm_ir.Emitter.define."""
        wanted = [("a", "p"), ("b", "p"), ("out", "p"), ("c", "p", self.c_strides),
                  ("bias", "p", self.spec.bias), ("res", "p", self.residual_strides),
                  ("alpha", "f", self.alpha), ("beta", "f", self.c_strides),
                  ("scale", "f", self.scale)]
        return tuple(arg[:2] for arg in wanted if len(arg) == 2 or arg[2])

    def name(self, tile: Tile) -> str:
        """The function's name: sizes, a digest of the key, the tile."""
        digest = hashlib.sha256(repr(self).encode()).hexdigest()[:16]
        return (f"kiln_gemm_small_{self.dtype}_{self.m}x{self.n}x{self.k}_{digest}_"
                f"{tile.mr}x{tile.nr}")


class SmallKernel:
    """A compiled specialised kernel, two ways to call it with the arguments `key.args`
    lists, in that order (a, b, out, then c, bias, res, alpha, beta, scale where
    present): `fn` takes addresses (ints) for the operands; `on_arrays` takes the numpy
    arrays themselves (base-class ndarrays laid out as the key says, unchecked) and
    reads their data pointers natively, saving the ~1 us per operand that
    `x.ctypes.data` costs in Python. `item` is the address of the kernel as a
    runtime.pool item on a record of gemm_kernel.KERNEL_ARGS (as the generic kernels'
    items are), for batches."""

    def __init__(self, key: SmallKey, tile: Tile, addresses: tuple[int, int], item: int):
        self.key, self.tile, self.item = key, tile, item
        scalar = ctypes.c_float if key.dtype == "float32" else ctypes.c_double
        kinds = {"p": ctypes.c_void_p, "f": scalar}
        self.fn = ctypes.CFUNCTYPE(None, *[kinds[kind] for _, kind in key.args])(addresses[0])
        if addresses[1]:
            objects = {"p": ctypes.py_object, "f": scalar}
            self.on_arrays = ctypes.CFUNCTYPE(None, *[objects[kind] for _, kind in key.args])(
                addresses[1])
        else:
            self.on_arrays = self._addresses_in_python

    def _addresses_in_python(self, *args) -> None:
        self.fn(*[x.__array_interface__["data"][0] if isinstance(x, np.ndarray) else x
                  for x in args])


_kernels: dict[SmallKey, SmallKernel] = {}
_lock = threading.Lock()


def small_kernel(dtype, m: int, n: int, k: int, a_strides: tuple[int, int],
                 b_strides: tuple[int, int], out_row_stride: int,
                 spec: EpilogueSpec = EpilogueSpec(), *, c_strides=None, bias_stride: int = 1,
                 residual_strides=None, alpha: bool = False, scale: bool = False
                 ) -> SmallKernel | None:
    """The kernel for this product (see SmallKey), compiled on first use (the disk cache
    of runtime.jit serves later processes); None once MAX_KERNELS variants exist (use the
    generic kernel then). Requires fits(m, n, k)."""
    if not fits(m, n, k):
        raise ValueError(f"gemm_small: {m}x{n}x{k} is not small (see fits)")
    key = SmallKey(np.dtype(dtype).name, m, n, k, tuple(a_strides), tuple(b_strides),
                   out_row_stride, spec, c_strides and tuple(c_strides), bias_stride,
                   residual_strides and tuple(residual_strides), alpha, scale)
    found = _kernels.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _kernels:
            if len(_kernels) >= MAX_KERNELS:
                return None
            _kernels[key] = _compile(key)
        return _kernels[key]


_seen: set = set()
SEEN_LIMIT = 4096  # keys remembered while waiting for their second sight


def for_call(call, spec: EpilogueSpec, dtype) -> SmallKernel | None:
    """The kernel for a gemm_native.Call (its sizes, strides, and which of C, bias and
    residual it has), if `fits` and seen before: a kernel is compiled (~50-150 ms) for a
    product seen twice, not once. Its results are bitwise those of the generic direct
    kernel (one FMA chain along K per element, the same store), so when the switch
    happens does not show."""
    c = call
    if not fits(c.m, c.n, c.k):
        return None
    key = (np.dtype(dtype).name, c.m, c.n, c.k, (c.a_rs, c.a_cs), (c.b_rs, c.b_cs), c.o_rs,
           spec, (c.c_rs, c.c_cs) if c.c else None, c.bias_stride if c.bias else 1,
           (c.r_rs, c.r_cs) if c.res else None, c.alpha != 1, c.scale != 1)
    found = _by_call.get(key)
    if found is not None:
        return found
    if key not in _seen:
        if len(_seen) >= SEEN_LIMIT:
            _seen.clear()
        _seen.add(key)
        return None
    made = small_kernel(key[0], *key[1:4], *key[4:7], spec, c_strides=key[8],
                        bias_stride=key[9], residual_strides=key[10], alpha=key[11],
                        scale=key[12])
    if made is not None:
        _by_call[key] = made
    return made


_by_call: dict[tuple, SmallKernel] = {}


def choose_tile(dtype: str, m: int, n: int, k: int, lanes: int) -> Tile:
    """The register tile (rows x vectors) with the least modelled time: per tile, K
    steps of max(FMAs, 4-cycle FMA latency) and the loads, plus a store and loop
    overhead, every lane of a partly used vector counted; accumulators and B vectors fit
    the registers. A B panel (K x tile width) past L1_PANEL_BYTES costs 10% (measured:
    at 160^3 float32, 14x32 beat 6x64 by about that)."""
    vectors_n = -(-n // lanes)
    itemsize = 4 if dtype == "float32" else 8
    registers = 32 if lanes * itemsize >= 64 else 16  # AVX-512 has 32 vector registers
    best = None
    for nv in range(1, min(4, vectors_n) + 1):
        spill = 1.1 if k * nv * lanes * itemsize > L1_PANEL_BYTES else 1.0
        for mr in range(1, min(m, (registers - 1) // nv - 1) + 1):
            tiles_m = [mr] * (m // mr) + ([m % mr] if m % mr else [])
            tiles_n = [nv] * (vectors_n // nv) + ([vectors_n % nv] if vectors_n % nv else [])
            cost = spill * sum(k * (max(r * v, 4) + (r + v) / 2) + 4 * r * v + 40
                               for r in tiles_m for v in tiles_n)
            if best is None or cost < best[0]:
                best = (cost, mr, nv)
    return Tile(dtype, best[1], best[2] * lanes, lanes, unroll=K_UNROLL)


def _compile(key: SmallKey) -> SmallKernel:
    from runtime.jit import host_jit, vector_width
    lanes = vector_width() // (1 if key.dtype == "float32" else 2)
    tile = choose_tile(key.dtype, key.m, key.n, key.k, lanes)
    jit = host_jit()
    name = key.name(tile)
    module = jit.new_module(name)
    _SmallGemm(module, name, key, tile).build()
    if debugging.level() >= 3:
        debugging.banner(f"LLVM IR {name}", str(module), at_level=3)
    names = [name, f"{name}_item"] + ([f"{name}_arrays"] if ARRAY_DATA_OFFSET else [])
    addresses = jit.load(module, names)
    if debugging.level() >= 4:
        debugging.banner(f"assembly {name}", jit.assembly(module), at_level=4)
    return SmallKernel(key, tile, (addresses[name], addresses.get(f"{name}_arrays", 0)),
                       addresses[f"{name}_item"])




class _SmallGemm(TileStore):
    """Builds one specialised kernel: TileStore's row store, fed compile-time constants
    for every size and stride (LLVM folds its runtime checks away)."""

    def __init__(self, module: ir.Module, name: str, key: SmallKey, tile: Tile):
        super().__init__(module, tile)
        self.key, self.main, self.spec, self.activation = key, tile, key.spec, emit_activation
        self.fn = self.define(name, key.args)
        given = {name: arg for arg, (name, _) in zip(self.fn.args, key.args)}
        c_rs, c_cs = key.c_strides or (0, 0)
        r_rs, r_cs = key.residual_strides or (0, 0)
        null, one = ir.Constant(self.P, None), ir.Constant(self.T, 1.0)
        self.arg = {"c": null, "bias": null, "res": null, "alpha": one, "scale": one,
                    "beta": ir.Constant(self.T, 0.0), **given,
                    "c_rs": self.i64(c_rs), "c_cs": self.i64(c_cs),
                    "o_rs": self.i64(key.out_row_stride),
                    "bias_stride": self.i64(key.bias_stride),
                    "r_rs": self.i64(r_rs), "r_cs": self.i64(r_cs)}
        self.row_buffer = self.b.alloca(ir.ArrayType(self.T, tile.nr), name="row")
        self.row_buffer.align = PACK_ALIGN
        if ARRAY_DATA_OFFSET:
            self._array_entry(f"{name}_arrays")
        export_item(module, f"{name}_item", tile, self.fn, KERNEL_ARGS,
                    wanted=tuple(arg_name for arg_name, _ in key.args))

    def _array_entry(self, name: str) -> None:
        """`name`(objects...): the kernel on ndarray objects, their data pointers read at
        ARRAY_DATA_OFFSET."""
        kernel, builder = self.fn, self.b
        byte_pointer = ir.IntType(8).as_pointer()
        kinds = [byte_pointer if kind == "p" else self.T for _, kind in self.key.args]
        entry = ir.Function(self.module, ir.FunctionType(ir.VoidType(), kinds), name)
        entry.attributes.add("nounwind")
        b = ir.IRBuilder(entry.append_basic_block("entry"))
        offset = ir.Constant(I64, ARRAY_DATA_OFFSET)
        args = [arg if kind == "f" else b.load(b.bitcast(b.gep(arg, [offset]),
                                                         self.P.as_pointer()), align=8)
                for arg, (_, kind) in zip(entry.args, self.key.args)]
        b.call(kernel, args)
        b.ret_void()
        self.b = builder

    def build(self) -> None:
        """B as rows (in place or copied), then column blocks of NR, each row tiles of
        MR, the tails last."""
        key, lanes = self.key, self.main.lanes
        b_rows, b_rs, aligned = self._b_rows()
        nr = self.main.nr
        full_n, tail_n = divmod(key.n, nr)
        self._loop(full_n, nr, lambda j0: self._column_block(j0, nr, b_rows, b_rs, aligned))
        if tail_n:
            width = -(-tail_n // lanes) * lanes
            self._column_block(self.i64(full_n * nr), width, b_rows, b_rs, aligned,
                               cols=tail_n)
        self.b.ret_void()

    def _column_block(self, j0, width, b_rows, b_rs, aligned, cols=None) -> None:
        mr, m = self.main.mr, self.key.m
        full_m, tail_m = divmod(m, mr)
        tile = (b_rows, b_rs, aligned, width, cols or width)
        self._loop(full_m, mr, lambda i0: self._tile(i0, j0, mr, *tile))
        if tail_m:
            self._tile(self.i64(full_m * mr), j0, tail_m, *tile)

    def _loop(self, count: int, step: int, body) -> None:
        """body(start) for start = 0, step, ..., (count - 1) * step: straight-line for
        one, else a loop."""
        if count == 1:
            body(self.i64(0))
        elif count > 1:
            with self.loop(self.i64(0), self.i64(count * step), self.i64(step), "t") as start:
                body(start)

    def _tile(self, i0, j0, rows, b_rows, b_rs, aligned, width, cols) -> None:
        """A rows x width tile at (i0, j0), all of K, stored through TileStore's row store
        (masks for the `cols` < width columns)."""
        b, key = self.b, self.key
        a_rs, a_cs = key.a_strides
        lanes = self.main.lanes
        self.tile = Tile(key.dtype, rows, width, lanes)
        vectors = width // lanes
        a_rows = [self.at(self.arg["a"], b.mul(b.add(i0, self.i64(i)), self.i64(a_rs)))
                  for i in range(rows)]
        b_col = self.at(b_rows, j0)
        masks = [ir.Constant(ir.VectorType(I1, lanes), [v * lanes + j < cols
                                                        for j in range(lanes)])
                 for v in range(vectors)]

        def load_a(kk, i):
            return b.load(self.at(a_rows[i], b.mul(kk, self.i64(a_cs))), align=self.itemsize)

        def load_b(kk, v):
            ptr = self.at(b_col, b.mul(kk, self.i64(b_rs)), self.i64(v * lanes))
            if aligned or (v + 1) * lanes <= cols:
                return self.load_vector(ptr, PACK_ALIGN if aligned else self.itemsize)
            return self.masked_load(ptr, masks[v])

        accs = self._product(rows, vectors, load_a, load_b)
        update, true = Update(self, ir.Constant(I1, 1)), ir.Constant(I1, 1)
        for i in range(rows):
            row = accs[i * vectors:(i + 1) * vectors]
            self._store_row(row, b.add(i0, self.i64(i)), j0, self.i64(cols), masks, update,
                            true)

    def _product(self, rows, vectors, load_a, load_b) -> list:
        """rows x vectors accumulators over all of K: unrolled completely for small K,
        else a loop of K_UNROLL steps and the remainder unrolled."""
        k = self.key.k
        accs = [ir.Constant(self.V, None)] * (rows * vectors)
        if k <= FULL_UNROLL_K:
            return self._steps(accs, [self.i64(kk) for kk in range(k)], rows, vectors,
                               load_a, load_b)
        main = k - k % K_UNROLL
        accs = self._k_loop(accs, main, rows, vectors, load_a, load_b)
        return self._steps(accs, [self.i64(kk) for kk in range(main, k)], rows, vectors,
                           load_a, load_b)

    def _k_loop(self, accs, stop, rows, vectors, load_a, load_b) -> list:
        b = self.b
        before = b.block
        head, body, done = (b.append_basic_block(f"k.{p}") for p in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        kk = b.phi(I64, name="kk")
        kk.add_incoming(self.i64(0), before)
        phis = []
        for acc in accs:
            phi = b.phi(self.V)
            phi.add_incoming(acc, before)
            phis.append(phi)
        b.cbranch(b.icmp_signed("<", kk, self.i64(stop)), body, done)
        b.position_at_end(body)
        steps = [b.add(kk, self.i64(u)) if u else kk for u in range(K_UNROLL)]
        values = self._steps(list(phis), steps, rows, vectors, load_a, load_b)
        kk.add_incoming(b.add(kk, self.i64(K_UNROLL)), b.block)
        for phi, value in zip(phis, values):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(done)
        return phis

    def _steps(self, accs, ks, rows, vectors, load_a, load_b) -> list:
        """One rank-1 update of the accumulators per k in `ks`."""
        for kk in ks:
            b_vectors = [load_b(kk, v) for v in range(vectors)]
            for i in range(rows):
                a_i = self.splat(load_a(kk, i))
                for v in range(vectors):
                    accs[i * vectors + v] = self.fma(a_i, b_vectors[v], accs[i * vectors + v])
        return accs

    # B as rows with unit column stride
    def _b_rows(self) -> tuple:
        """(pointer, row stride, whether rows are PACK_ALIGN-aligned and padded to whole
        vectors): B itself when its columns are contiguous, else a stack copy."""
        key, lanes = self.key, self.main.lanes
        b_rs, b_cs = key.b_strides
        if b_cs == 1 or key.n == 1:
            return self.arg["b"], b_rs, False
        padded = -(-key.n // lanes) * lanes
        buffer = self.b.alloca(ir.ArrayType(self.T, key.k * padded), name="b_rows")
        buffer.align = PACK_ALIGN
        rows = self.b.bitcast(buffer, self.P)
        if b_rs == 1:
            self._transpose_b(rows, padded, b_cs)
        else:
            self._copy_b(rows, padded, b_rs, b_cs)
        return rows, padded, True

    def _copy_b(self, rows, padded, b_rs, b_cs) -> None:
        """B (any strides) element by element into rows `padded` apart, zero past N."""
        b, key = self.b, self.key
        zero = ir.Constant(self.T, 0.0)
        with self.loop(self.i64(0), self.i64(key.k), self.i64(1), "copy_k") as kk:
            source = self.at(self.arg["b"], b.mul(kk, self.i64(b_rs)))
            target = self.at(rows, b.mul(kk, self.i64(padded)))
            with self.loop(self.i64(0), self.i64(key.n), self.i64(1), "copy_j") as j:
                value = b.load(self.at(source, b.mul(j, self.i64(b_cs))), align=self.itemsize)
                b.store(value, self.at(target, j), align=self.itemsize)
            for j in range(key.n, padded):
                b.store(zero, self.at(target, self.i64(j)), align=self.itemsize)

    def _transpose_b(self, rows, padded, ldb) -> None:
        """A column-major B (element (k, j) at j * ldb + k) into rows, lanes x lanes blocks
        at a time through shuffles; zero past N."""
        key, lanes = self.key, self.main.lanes
        for k_start, k_count, k_blocks in _blocks(key.k, lanes):
            for j_start, j_count, j_blocks in _blocks(key.n, lanes):
                self._loop_from(k_start, k_blocks, lanes, lambda k0: self._loop_from(
                    j_start, j_blocks, lanes, lambda j0: self._transpose_block(
                        rows, padded, ldb, k0, j0, k_count, j_count)))

    def _loop_from(self, start: int, count: int, step: int, body) -> None:
        self._loop(count, step, lambda i: body(self.b.add(i, self.i64(start))))

    def _transpose_block(self, rows, padded, ldb, k0, j0, k_count, j_count) -> None:
        b, lanes = self.b, self.main.lanes
        mask = ir.Constant(ir.VectorType(I1, lanes), [j < k_count for j in range(lanes)])
        columns = []
        for j in range(lanes):
            if j >= j_count:
                columns.append(ir.Constant(self.V, None))
                continue
            ptr = self.at(self.arg["b"], b.mul(b.add(j0, self.i64(j)), self.i64(ldb)), k0)
            columns.append(self.load_vector(ptr, self.itemsize) if k_count == lanes
                           else self.masked_load(ptr, mask))
        for kk, row in enumerate(_transposed(b, columns, lanes)[:k_count]):
            target = self.at(rows, b.mul(b.add(k0, self.i64(kk)), self.i64(padded)), j0)
            self.store_vector(row, target, PACK_ALIGN)


def _blocks(size: int, lanes: int) -> list:
    """(start, size, count) of the whole blocks of `lanes` in range(size), then of the
    partial block if any."""
    full, tail = divmod(size, lanes)
    return [block for block in ((0, lanes, full), (full * lanes, tail, 1)) if block[1]
            and block[2]]


def _transposed(b: ir.IRBuilder, vectors: list, lanes: int) -> list:
    """The lanes x lanes matrix with rows `vectors` transposed: log2(lanes) stages, each
    swapping the off-diagonal d x d blocks of every 2d x 2d block with two-input
    shuffles."""
    d = lanes // 2
    mask_type = ir.VectorType(I32, lanes)
    while d:
        swapped = list(vectors)
        for r in range(lanes):
            if r & d:
                continue
            low, high = vectors[r], vectors[r + d]
            keep_low = [c if not c & d else lanes + c - d for c in range(lanes)]
            keep_high = [c + d if not c & d else lanes + c for c in range(lanes)]
            swapped[r] = b.shuffle_vector(low, high, ir.Constant(mask_type, keep_low))
            swapped[r + d] = b.shuffle_vector(low, high, ir.Constant(mask_type, keep_high))
        vectors, d = swapped, d // 2
    return vectors
