"""Shape-specialised GEMM kernels for small products.

    out = residual + scale * act(alpha * A @ B + beta * C + bias)

the semantics of ir/kernel.py's tile store, with M, N, K and every stride compiled in as
constants: loop bounds, the M and N tails (their row counts and lane masks) and the
register tile are fixed when the kernel is built, so a call does no blocking, packing
or tail arithmetic. A is read in place (scalar broadcasts, any strides); B is read in
place when its rows are contiguous, otherwise first copied into a stack buffer as rows
(a transposed B through in-register vector transposes, any other layout element by
element). C is not read when the kernel has no C (beta == 0).

`small_kernel(key)` returns for a `SmallKey` (sizes, strides, epilogue, cut) a
`SmallKernel` (compiled once per key; the disk cache of runtime.llvm.jit serves later
processes) with two entry points taking only the operands and the scalars the key
leaves at runtime: `fn` on addresses (~0.3 us per call through
ctypes) and `fast` on the ndarrays themselves (~30 ns: a runtime.fastcall builtin
reading their data pointers natively, where `x.ctypes.data` costs ~1 us each in
Python). A kernel compiled with a Cut covers several products in one call: the
equal row pieces of one product, or the elements of a batch, claimed natively by
runtime.pool's threads (a 64^3 float32 product: ~3.2 us on one thread, ~2.1 us in two
pieces on two), its state on the caller's stack: no Python per piece, nothing shared
between calls. `fits(m, n, k)` says
which products these kernels are for; at most config.SMALL_MAX_KERNELS variants are
compiled per process (MCJIT never frees code), after which `small_kernel` returns None
and the caller uses the generic kernel.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from runtime import debugging
from runtime.cpu.gemm import config
from runtime.cpu.gemm.jobs import POINTERS
from runtime.cpu.gemm.kernels import SecondSight
from runtime.cpu.gemm.emit.kernel import EpilogueSpec, Tile
from runtime.cpu.gemm.emit.small import K_UNROLL, SmallGemm, has_fast_entry
from runtime import fastcall
from runtime.pool import available as pool_available

def fits(m: int, n: int, k: int) -> bool:
    """Whether a product of these sizes is small enough for a specialised kernel: at
    most config.SMALL_MAX_MACS multiply-adds, and B within the stack buffer should it
    need a copy."""
    return m >= 1 and n >= 1 and k >= 1 and m * n * k <= config.SMALL_MAX_MACS and (
        k * (n + 16) <= config.SMALL_B_BUFFER_ELEMENTS)


class Cut(NamedTuple):
    """How one call of a kernel covers a product cut in equal row pieces, or a batch:
    `pieces` products of the kernel's sizes, the operands of piece i `i * step` elements
    on from piece 0's (`steps`: (operand, step) for those that move: "a", "b", "c",
    "out", "bias", "res"), run on `threads` threads of runtime.pool (on the caller's
    alone when 1), each claiming the next piece."""
    pieces: int = 1
    steps: tuple = ()
    threads: int = 1


@dataclass(frozen=True)
class SmallKey:
    """Everything a specialised kernel is compiled for: what small_kernel is asked for.
    `dtype` is a numpy dtype's name; strides are in elements; out has unit column
    stride. `c_strides` None: no C (beta == 0). `alpha`/`scale` False: compiled as 1;
    True: runtime arguments. `cut`: how many such products one call computes, where, on
    how many threads (see Cut); its steps a tuple."""
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
    cut: Cut = Cut()

    @property
    def args(self) -> tuple:
        """The kernel's arguments, (name, kind) as in ir.tools.Emitter.define."""
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
    present): `fn` through ctypes, on addresses (ints) for the operands, followed by
    `pool_args` (where the pool is, its run function) for a kernel on threads; `fast`, where
    ir.small.has_fast_entry allows it, a runtime.fastcall builtin on the numpy
    arrays themselves (base-class ndarrays laid out as the key says, unchecked)
    returning out: ~30 ns of call where ctypes and the addresses take ~1 us (it keeps
    the GIL while it runs, as a builtin does: tens of microseconds at most for these
    sizes, where ctypes lets it go). `item` is the address of the kernel as a
    runtime.pool item on a record of ir.kernel.KERNEL_ARGS (as the generic kernels'
    items are), for batches; 0 for a kernel in pieces (which covers its batch itself)."""

    def __init__(self, key: SmallKey, tile: Tile, name: str, addresses: dict[str, int]):
        self.key, self.tile, self.item = key, tile, addresses.get(f"{name}_item", 0)
        scalar = ctypes.c_float if key.dtype == "float32" else ctypes.c_double
        kinds = {"p": ctypes.c_void_p, "f": scalar}
        pool = [ctypes.c_void_p] * 2 if key.cut.threads > 1 else []
        self.pool_args = _pool_args(key.cut.threads) if key.cut.threads > 1 else ()
        self.fn = ctypes.CFUNCTYPE(None, *[kinds[kind] for _, kind in key.args], *pool)(
            addresses[name])
        self.fast = None
        if f"{name}_fast" in addresses:
            self.fast = fastcall.builtin(addresses[f"{name}_fast"], name, self.pool_args)

    def run_call(self, call) -> None:
        """Run on the addresses and scalars of a kernels.Call."""
        self.fn(*[getattr(call, name) for name, _ in self.key.args], *self.pool_args)


def _pool_args(threads: int) -> tuple[int, int]:
    """(runtime.pool's current cell, kiln_pool_run's address) for a kernel on `threads`
    threads, after making sure the pool has that many."""
    from runtime import pool
    pool.pool(threads)
    return pool.current_cell(), pool.run_address()


_kernels: dict[SmallKey, SmallKernel] = {}
_lock = threading.Lock()


def small_kernel(key: SmallKey) -> SmallKernel | None:
    """The kernel for `key`, compiled on first use (the disk cache of runtime.llvm.jit serves
    later processes); None once config.SMALL_MAX_KERNELS variants exist (use the generic
    kernel then). Requires fits(m, n, k); a cut on more than one thread only where
    runtime.pool is available."""
    _check(key)
    found = _kernels.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _kernels:
            if len(_kernels) >= config.SMALL_MAX_KERNELS:
                return None
            _kernels[key] = _compile(key)
        return _kernels[key]


def _check(key: SmallKey) -> None:
    if not fits(key.m, key.n, key.k):
        raise ValueError(f"small_kernel: {key.m}x{key.n}x{key.k} is not small (see fits)")
    cut = key.cut
    if cut.pieces < 1 or not 1 <= cut.threads <= cut.pieces:
        raise ValueError(f"small_kernel: {cut.pieces} pieces cannot run on {cut.threads} "
                         "threads")
    if cut.threads > 1 and not pool_available():
        raise ValueError("small_kernel: threads run on runtime.pool, which this platform "
                         "lacks")
    moving = {name for name, _ in key.args} & {"a", "b", "c", "out", "bias", "res"}
    if not {name for name, _ in cut.steps} <= moving:
        raise ValueError(f"small_kernel: steps {cut.steps} name operands the kernel does "
                         f"not take ({sorted(moving)})")


_sightings = SecondSight()


def for_call(call, spec: EpilogueSpec, dtype, cut: Cut = Cut()) -> SmallKernel | None:
    """The kernel for a kernels.Call (its sizes, strides, and which of C, bias and
    residual it has) and a Cut, if `fits` and seen before: a kernel is
    compiled (~50-150 ms) for a product seen twice, not once. Its results are bitwise
    those of the generic direct kernel (one FMA chain along K per element, the same
    store), so when the switch happens does not show."""
    c = call
    if not fits(c.m, c.n, c.k):
        return None
    # SmallKey's fields as a plain tuple: made for every small product that no plan
    # serves, it costs ~10 ns where a SmallKey costs ~1 us
    key = (np.dtype(dtype).name, c.m, c.n, c.k, (c.a_rs, c.a_cs), (c.b_rs, c.b_cs), c.o_rs,
           spec, (c.c_rs, c.c_cs) if c.c else None, c.bias_stride if c.bias else 1,
           (c.r_rs, c.r_cs) if c.res else None, c.alpha != 1, c.scale != 1, cut)
    found = _by_call.get(key)
    if found is not None or not _sightings.again(key):
        return found
    made = small_kernel(SmallKey(*key))
    if made is not None:
        _by_call[key] = made
    return made


_by_call: dict[tuple, SmallKernel] = {}


def cut(batch, spec: EpilogueSpec, itemsize: int, threads: int | None) -> tuple:
    """(the product of one piece, the Cut) for one specialised kernel call that computes
    all of a kernels.Batch of direct products, or (None, None) when they are not
    evenly spaced in memory. One product from config.SPLIT_MIN_MACS on, when M divides
    by the thread count and runtime.pool is there, is cut in one equal row piece per
    thread (a kernel compiled for their rows serves them all); the products of a batch
    are its pieces, on every thread from config.SPLIT_MIN_MACS on in all. Each element
    keeps its own FMA chain along K: the results are the same as on one thread."""
    call = batch.call
    macs = batch.count * call.m * call.n * call.k
    if threads is None:
        from runtime.threads import num_threads
        threads = num_threads()
    parallel = threads > 1 and macs >= config.SPLIT_MIN_MACS and pool_available()
    if batch.count == 1:
        if not parallel or call.m % threads:
            return call, Cut()
        rows = call.m // threads
        row_strides = {"a": call.a_rs, "out": call.o_rs, "c": call.c_rs, "res": call.r_rs,
                       "bias": call.bias_stride if spec.bias == "row" else 0}
        steps = tuple((name, rows * stride) for name, stride in row_strides.items()
                      if stride and getattr(call, name))
        return call.rows(0, rows, itemsize, spec.bias == "row"), Cut(
            threads, steps, threads)
    offsets = batch.offsets
    step = offsets[1]
    if (step % itemsize).any() or not (
            offsets == np.arange(batch.count)[:, None] * step).all():
        return None, None
    steps = tuple((name, int(step[column]) // itemsize)
                  for column, name in enumerate(POINTERS)
                  if step[column] and getattr(call, name))
    return call, Cut(batch.count, steps, min(threads, batch.count) if parallel else 1)


def choose_tile(dtype: str, m: int, n: int, k: int, lanes: int) -> Tile:
    """The register tile (rows x vectors) with the least modelled time: per tile, K
    steps of max(FMAs, 4-cycle FMA latency) and the loads, plus a store and loop
    overhead, every lane of a partly used vector counted; accumulators and B vectors fit
    the registers. A B panel (K x tile width) past config.L1_PANEL_BYTES costs 10%
    (measured: at 160^3 float32, 14x32 beat 6x64 by about that)."""
    vectors_n = -(-n // lanes)
    itemsize = 4 if dtype == "float32" else 8
    registers = 32 if lanes * itemsize >= 64 else 16  # AVX-512 has 32 vector registers
    best = None
    for nv in range(1, min(4, vectors_n) + 1):
        spill = 1.1 if k * nv * lanes * itemsize > config.L1_PANEL_BYTES else 1.0
        for mr in range(1, min(m, (registers - 1) // nv - 1) + 1):
            cost = spill * sum(
                rows * columns * (k * (max(r * v, 4) + (r + v) / 2) + 4 * r * v + 40)
                for r, rows in _tiles(m, mr) for v, columns in _tiles(vectors_n, nv))
            if best is None or cost < best[0]:
                best = (cost, mr, nv)
    return Tile(dtype, best[1], best[2] * lanes, lanes, unroll=K_UNROLL)


def _tiles(size: int, step: int) -> list[tuple[int, int]]:
    """(tile size, how many) of `size` cut in tiles of `step`, the last one shorter."""
    return [(tile, count) for tile, count in ((step, size // step), (size % step, 1))
            if tile and count]


def _compile(key: SmallKey) -> SmallKernel:
    from runtime.llvm.jit import host_jit, vector_width
    lanes = vector_width() // (1 if key.dtype == "float32" else 2)
    tile = choose_tile(key.dtype, key.m, key.n, key.k, lanes)
    jit = host_jit()
    name = key.name(tile)
    build = BuildSmall(name, key, tile)
    names = [name] + ([f"{name}_item"] if key.cut.pieces == 1 else []) + (
        [f"{name}_fast"] if has_fast_entry(key) else [])
    addresses = jit.load_spec(name, repr((name, key, tile)), build, names, config.SPEED_LEVEL)
    debugging.show_kernel(jit, name, build, config.SPEED_LEVEL)
    return SmallKernel(key, tile, name, addresses)


@dataclass(frozen=True)
class BuildSmall:
    """Builds a specialised small GEMM into a module (it pickles: a background compile
    worker can build it)."""
    name: str
    key: SmallKey
    tile: Tile

    def __call__(self, module) -> None:
        SmallGemm(module, self.name, self.key, self.tile).build()
