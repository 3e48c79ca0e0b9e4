"""Compiled GEMM kernels and the calls into them.

`kernel(dtype, spec)` compiles (once per process, through runtime's disk cache across
processes) the module of gemm_kernel.py for this CPU's tile and returns a `GemmKernel`;
`run(kernel, calls, ...)` splits each `Call` (one matrix product, pointers and element
strides) into per-thread sub-problems and runs them on runtime.threads' pool.

Work is split along N or M (see `split`), never along K, so every element
of C is computed by the same sequence of operations whatever the thread count: results
are bitwise identical across thread counts for one blocking. Each thread packs the
panels it uses into its own buffers (allocated here, 64-byte aligned, reused).
"""
from __future__ import annotations

import ctypes
import functools
import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from compiler.codegen.gemm_kernel import (KERNEL_ARGS, PACK_ALIGN, EpilogueSpec, Tile,
                                          build_module, emit_activation)
from compiler.debugging import banner

# Each thread gets at least this many multiply-adds (about 60 us of work on one core):
# waking a pool thread cost 40-100 us here.
PARALLEL_MIN_MACS = 1 << 23


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
    """The packed and direct entry points of one compiled (dtype, tile, epilogue)."""

    def __init__(self, tile: Tile, spec: EpilogueSpec, packed: int, direct: int):
        self.tile, self.spec = tile, spec
        self.dtype = np.dtype(tile.dtype)
        scalar = ctypes.c_float if tile.dtype == "float32" else ctypes.c_double
        kinds = {"i": ctypes.c_int64, "f": scalar, "p": ctypes.c_void_p}
        signature = ctypes.CFUNCTYPE(None, *[kinds[kind] for _, kind in KERNEL_ARGS])
        self.packed = signature(packed)
        self.direct = signature(direct)

    def __call__(self, call: Call, blocking: Blocking | None) -> None:
        """Run one call on this thread: packed with `blocking`, or direct if None."""
        if blocking is None:
            self.direct(*call, None, None, 0, 0, 0)
            return
        pack_a, pack_b = _pack_buffers(self.dtype, self.tile, blocking)
        self.packed(*call, pack_a, pack_b, blocking.mc, blocking.kc, blocking.nc)


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
    banner(f"LLVM IR {name}", str(module), at_level=3)
    addresses = jit.load(module, [f"{name}_packed", f"{name}_direct"])
    banner(f"assembly {name}", jit.assembly(module), at_level=4)
    return GemmKernel(tile, spec, addresses[f"{name}_packed"], addresses[f"{name}_direct"])


@functools.cache
def native_activations() -> frozenset:
    """Activations the epilogue can compute in native code: relu always, the rest once
    compiler/codegen/vmath.py provides the math they need."""
    try:
        from compiler.codegen import vmath  # noqa: F401
    except ImportError:
        return frozenset({"relu"})
    return frozenset({"relu", "gelu", "gelu_tanh", "silu", "tanh"})


_buffers = threading.local()


def _pack_buffers(dtype: np.dtype, tile: Tile, blocking: Blocking) -> tuple[int, int]:
    """This thread's packed-A and packed-B buffers (addresses), 64-byte aligned and big
    enough for `blocking`; grown when needed, otherwise reused."""
    round_up = lambda x, to: -(-x // to) * to  # noqa: E731
    need_a = round_up(blocking.mc, tile.mr) * blocking.kc
    need_b = round_up(blocking.nc, tile.nr) * blocking.kc
    key = (dtype.str, tile.mr, tile.nr)
    cached = getattr(_buffers, "by_key", None)
    if cached is None:
        cached = _buffers.by_key = {}
    held = cached.get(key)
    if held is None or held[0] < need_a or held[1] < need_b:
        held = (need_a, need_b, _aligned(need_a, dtype), _aligned(need_b, dtype))
        cached[key] = held
    return held[2].ctypes.data, held[3].ctypes.data


def _aligned(count: int, dtype: np.dtype) -> np.ndarray:
    raw = np.empty(count * dtype.itemsize + PACK_ALIGN, dtype=np.uint8)
    offset = -raw.ctypes.data % PACK_ALIGN
    return raw[offset:offset + count * dtype.itemsize].view(dtype)


def split(call: Call, kernel: GemmKernel, parts: int, packed: bool) -> list[Call]:
    """`call` as up to `parts` sub-problems over disjoint columns or rows of C, cut at
    tile boundaries. A packed product splits N when it can: each thread then packs only
    its own columns of B, and A, read in place when its rows are contiguous, needs no
    packing at all; otherwise (and on the direct path) it splits M."""
    t, itemsize = kernel.tile, kernel.dtype.itemsize
    parts = max(1, min(parts, call.m * call.n * call.k // PARALLEL_MIN_MACS or 1))
    column_tiles = -(-call.n // t.nr)
    by_columns = packed and column_tiles >= parts and (call.a_cs == 1 or call.n >= call.m)
    size, step = (call.n, t.nr) if by_columns else (call.m, t.mr)
    tiles = -(-size // step)
    parts = min(parts, tiles)
    if parts <= 1:
        return [call]
    bounds = [min(size, tiles * i // parts * step) for i in range(parts + 1)]
    if by_columns:
        return [call.cols(lo, hi, itemsize, kernel.spec.bias == "col")
                for lo, hi in zip(bounds, bounds[1:])]
    return [call.rows(lo, hi, itemsize, kernel.spec.bias == "row")
            for lo, hi in zip(bounds, bounds[1:])]


def run(kernel: GemmKernel, work: list[Call], blocking: Blocking | None) -> None:
    """Run every call of `work` (disjoint outputs) across the pool, in contiguous
    chunks; `blocking` None takes the direct path."""
    from runtime.threads import parallel_for
    if len(work) == 1:
        kernel(work[0], blocking)
        return

    def task(start: int, end: int) -> None:
        for call in work[start:end]:
            kernel(call, blocking)

    parallel_for(len(work), task)
