"""Compiled GEMM kernels and the calls into them.

`kernel(dtype, spec)` compiles (once per process, through runtime's disk cache across
processes) the module of gemm_kernel.py for this CPU's tile and returns a `GemmKernel`;
`run(kernel, calls, blocking, threads)` runs `Call`s (one matrix product each: pointers
and element strides) on runtime.threads' pool, cut into pieces along M (sharing one
packing of B) or N, never along K: results are bitwise identical across thread counts
for one blocking. Packing buffers are per thread, 64-byte aligned and reused.
"""
from __future__ import annotations

import ctypes
import itertools
import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from compiler.codegen.gemm_ir import PACK_ALIGN
from compiler.codegen.gemm_kernel import (KERNEL_ARGS, PACK_B_ALL_ARGS, EpilogueSpec, Tile,
                                          build_module, emit_activation)
from compiler import debugging
from compiler.debugging import banner

# Each thread gets at least this many multiply-adds (about 60 us of work on one core):
# waking a pool thread cost 40-100 us here.
PARALLEL_MIN_MACS = 1 << 23
PIECE_MIN_MACS = 1 << 22
PIECES_PER_THREAD = 1
SHARED_B_ELEMENTS = 1 << 22  # the shared packing of B goes column chunk by chunk
CONFLICT_STRIDE = 2048  # bytes


@dataclass(frozen=True)
class Blocking:
    """Cache blocking: MC rows of A and KC of K per packed A block (L2), NC columns per
    packed B block."""
    mc: int
    kc: int
    nc: int


class Call(NamedTuple):
    """One product for the kernel, in KERNEL_ARGS order up to the packing arguments:
    sizes, then pointers (ints, bytes) and element strides of op(A), op(B), C, out, bias
    and residual, and the scalars."""
    m: int
    n: int
    k: int
    a: int
    a_rs: int
    a_cs: int
    b: int
    b_rs: int
    b_cs: int
    c: int
    c_rs: int
    c_cs: int
    out: int
    o_rs: int
    alpha: float
    beta: float
    scale: float
    bias: int
    bias_stride: int
    res: int
    r_rs: int
    r_cs: int
    a_in_place: int

    def rows(self, start: int, stop: int, itemsize: int, bias_per_row: bool) -> "Call":
        """The sub-problem of rows start:stop of C."""
        return self._replace(
            m=stop - start, a=self.a + start * self.a_rs * itemsize,
            c=self.c + start * self.c_rs * itemsize, out=self.out + start * self.o_rs * itemsize,
            res=self.res + start * self.r_rs * itemsize,
            bias=self.bias + (start * self.bias_stride * itemsize if bias_per_row else 0))

    def cols(self, start: int, stop: int, itemsize: int, bias_per_col: bool) -> "Call":
        """The sub-problem of columns start:stop of C."""
        return self._replace(
            n=stop - start, b=self.b + start * self.b_cs * itemsize,
            c=self.c + start * self.c_cs * itemsize, out=self.out + start * itemsize,
            res=self.res + start * self.r_cs * itemsize,
            bias=self.bias + (start * self.bias_stride * itemsize if bias_per_col else 0))


class GemmKernel:
    """The entry points of one compiled (dtype, tile, epilogue): packed, direct, and the
    packing of all of B that threads share."""

    def __init__(self, tile: Tile, spec: EpilogueSpec, addresses: dict[str, int]):
        self.tile, self.spec = tile, spec
        self.dtype = np.dtype(tile.dtype)
        scalar = ctypes.c_float if tile.dtype == "float32" else ctypes.c_double
        kinds = {"i": ctypes.c_int64, "f": scalar, "p": ctypes.c_void_p}
        signature = ctypes.CFUNCTYPE(None, *[kinds[kind] for _, kind in KERNEL_ARGS])
        self.packed = signature(addresses["packed"])
        self.direct = signature(addresses["direct"])
        self.pack_b_all = ctypes.CFUNCTYPE(None, *[kinds[kind] for _, kind in PACK_B_ALL_ARGS])(
            addresses["pack_b_all"])

    def __call__(self, call: Call, blocking: Blocking | None, packed_b: int = 0) -> None:
        """Run one call on this thread: direct if `blocking` is None, else packed, with B
        from `packed_b` (made by pack_b_all with the same blocking) when given."""
        if blocking is None:
            self.direct(*call, None, None, 0, 0, 0, 0)
            return
        t = self.tile
        pack_a = _scratch("a", _round_up(blocking.mc, t.mr) * blocking.kc, self.dtype)
        pack_b = packed_b or _scratch("b", _round_up(blocking.nc, t.nr) * blocking.kc,
                                      self.dtype)
        self.packed(*call, pack_a, pack_b, int(bool(packed_b)), blocking.mc, blocking.kc,
                    blocking.nc)

    def pack_b(self, call: Call, blocking: Blocking) -> int:
        """All of the call's B packed (into a buffer of this thread) for its threads."""
        size = call.k * _round_up(call.n, self.tile.nr)
        packed = _scratch("shared b", size, self.dtype)
        self.pack_b_all(call.b, call.b_rs, call.b_cs, call.k, call.n, blocking.kc,
                        blocking.nc, packed)
        return packed


def default_tile(dtype: str, lanes_f32: int) -> Tile:
    """The register tile for `dtype` on a CPU with `lanes_f32` float32 lanes per vector:
    about 24 accumulators out of 32 registers with AVX-512, 12 of 16 with AVX2."""
    lanes = lanes_f32 if dtype == "float32" else lanes_f32 // 2
    if lanes_f32 >= 16:
        return Tile(dtype, mr=12, nr=2 * lanes, lanes=lanes)
    return Tile(dtype, mr=6, nr=2 * lanes, lanes=lanes)


_kernels: dict = {}
_kernels_lock = threading.Lock()


def kernel(dtype: np.dtype, spec: EpilogueSpec, tile: Tile | None = None) -> GemmKernel:
    """The compiled kernel for (dtype, tile, epilogue), built on first use. Transposes
    need no kernel of their own: packing reads any strides, with a vector path for the
    unit-stride side."""
    key = (np.dtype(dtype), spec, tile)
    found = _kernels.get(key)
    if found is not None:
        return found
    from runtime.jit import host_jit, vector_width
    with _kernels_lock:
        if key not in _kernels:
            chosen = tile or default_tile(key[0].name, vector_width())
            made = _kernels.get((key[0], spec, chosen)) or _compile(host_jit(), chosen, spec)
            _kernels[key] = _kernels[(key[0], spec, chosen)] = made
        return _kernels[key]


def _compile(jit, tile: Tile, spec: EpilogueSpec) -> GemmKernel:
    name = (f"kiln_gemm_{tile.dtype}_{tile.mr}x{tile.nr}u{tile.unroll}_{spec.tag}")
    module = jit.new_module(name)
    build_module(module, name, tile, spec, emit_activation)
    if debugging.level() >= 3:
        banner(f"LLVM IR {name}", str(module), at_level=3)
    entries = ("packed", "direct", "pack_b_all")
    addresses = jit.load(module, [f"{name}_{entry}" for entry in entries])
    if debugging.level() >= 4:
        banner(f"assembly {name}", jit.assembly(module), at_level=4)
    return GemmKernel(tile, spec, {entry: addresses[f"{name}_{entry}"] for entry in entries})


_buffers = threading.local()


def _scratch(role: str, count: int, dtype: np.dtype) -> int:
    """Address of this thread's buffer for `role`, at least `count` elements, 64-byte
    aligned; grown when needed, otherwise reused (first touches cost page faults)."""
    held = getattr(_buffers, "by_role", None)
    if held is None:
        held = _buffers.by_role = {}
    key = (role, dtype.str)
    buffer = held.get(key)
    if buffer is None or buffer.size < count:
        raw = np.empty(count * dtype.itemsize + PACK_ALIGN, dtype=np.uint8)
        offset = -raw.ctypes.data % PACK_ALIGN
        buffer = held[key] = raw[offset:offset + count * dtype.itemsize].view(dtype)
    return buffer.ctypes.data


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def reads_a_in_place(a_rs: int, a_cs: int, itemsize: int) -> bool:
    """Whether the packed path should broadcast from A in place rather than pack it:
    its rows must be contiguous, and not a multiple of 2 KiB apart (then MR rows would
    crowd one or two L1 sets and evict each other)."""
    return a_cs == 1 and (a_rs * itemsize) % CONFLICT_STRIDE != 0


def run(kernel: GemmKernel, calls: list[Call], blocking: Blocking | None,
        threads: int) -> None:
    """Run `calls` (disjoint outputs; `blocking` None: the direct path) on up to
    `threads` threads. Work is split along M or N, never K, so every element of C sees
    the same operations in the same order whatever the thread count.

    Fewer packed calls than threads: each call's M is cut into pieces that share one
    packing of B (made by the calling thread while the pool wakes up) and each pack their
    own rows of A. Otherwise whole calls (or, on the direct path, row pieces) are the
    units. Either way threads take the next unclaimed piece until none is left: pool
    threads wake late here, and whoever is running takes up the slack."""
    macs = sum(call.m * call.n * call.k for call in calls)
    if threads <= 1 or macs < 2 * PARALLEL_MIN_MACS:
        for call in calls:
            kernel(call, blocking)
    elif blocking is not None and len(calls) < threads:
        for call in calls:
            _run_sharing_b(kernel, call, blocking, threads)
    else:
        pieces = calls if len(calls) >= threads else [
            piece for call in calls for piece in _row_pieces(call, kernel, threads)]
        _claim_in_turn(pieces, lambda piece: kernel(piece, blocking), threads)


def _run_sharing_b(kernel: GemmKernel, call: Call, blocking: Blocking, threads: int):
    """One packed call on `threads` threads, column chunk by column chunk (bounding the
    shared packed B), rows split into pieces."""
    nr, itemsize = kernel.tile.nr, kernel.dtype.itemsize
    if -(-call.m // kernel.tile.mr) < 2 * threads:  # too few rows: columns, own B each
        pieces = _column_pieces(call, kernel, threads * PIECES_PER_THREAD)
        _claim_in_turn(pieces, lambda piece: kernel(piece, blocking), threads)
        return
    width = min(call.n, max(nr, SHARED_B_ELEMENTS // call.k // nr * nr))
    for start in range(0, call.n, width):
        chunk = call.cols(start, min(call.n, start + width), itemsize,
                          kernel.spec.bias == "col")
        pieces = _row_pieces(chunk, kernel, threads * PIECES_PER_THREAD)
        ready = threading.Event()
        packed_b = []

        def prepare() -> None:
            try:
                packed_b.append(kernel.pack_b(chunk, blocking))
            finally:
                ready.set()

        def work(piece: Call) -> None:
            ready.wait()
            kernel(piece, blocking, packed_b[0])

        _claim_in_turn(pieces, work, threads, prepare)


def _row_pieces(call: Call, kernel: GemmKernel, parts: int) -> list[Call]:
    """`call` cut into up to `parts` pieces of whole MR-row tiles, none under
    PIECE_MIN_MACS multiply-adds."""
    mr, itemsize = kernel.tile.mr, kernel.dtype.itemsize
    tiles = -(-call.m // mr)
    parts = max(1, min(parts, tiles, call.m * call.n * call.k // PIECE_MIN_MACS))
    bounds = [min(call.m, tiles * i // parts * mr) for i in range(parts + 1)]
    return [call.rows(lo, hi, itemsize, kernel.spec.bias == "row")
            for lo, hi in zip(bounds, bounds[1:])]


def _column_pieces(call: Call, kernel: GemmKernel, parts: int) -> list[Call]:
    """`call` cut into up to `parts` pieces of whole NR-column tiles."""
    nr, itemsize = kernel.tile.nr, kernel.dtype.itemsize
    tiles = -(-call.n // nr)
    parts = max(1, min(parts, tiles, call.m * call.n * call.k // PIECE_MIN_MACS))
    bounds = [min(call.n, tiles * i // parts * nr) for i in range(parts + 1)]
    return [call.cols(lo, hi, itemsize, kernel.spec.bias == "col")
            for lo, hi in zip(bounds, bounds[1:])]


def _claim_in_turn(pieces: list, work, threads: int, prepare=None) -> None:
    """work(piece) for every piece, on up to `threads` threads of runtime's pool, each
    taking the next unclaimed piece; `prepare()` runs first on the calling thread (work
    must wait for what it makes)."""
    from runtime.threads import parallel_for
    claim = itertools.count().__next__  # one step of a C iterator: atomic under the GIL

    def task(start: int, end: int) -> None:
        if start == 0 and prepare is not None:
            prepare()
        index = claim()
        while index < len(pieces):
            work(pieces[index])
            index = claim()

    parallel_for(max(1, min(threads, len(pieces))), task)
