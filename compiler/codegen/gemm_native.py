"""Compiled GEMM kernels and the calls into them.

`kernel(dtype, spec)` compiles (once per process, through runtime's disk cache across
processes) the module of gemm_kernel.py for this CPU's tile and returns a `GemmKernel`;
`run(kernel, batch, blocking, threads)` runs a `Batch` of products (one `Call`, pointers
and element strides, plus where the other products' operands are) as records of the
kernel's arguments, in one native call on runtime.pool's threads (or this thread alone),
cut into pieces along M (sharing one packing of B) or N, never along K: results are
bitwise identical across thread counts for one blocking. Packing buffers are per thread
(per pool worker), 64-byte aligned and reused.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from compiler import debugging
from compiler.codegen.gemm_ir import PACK_ALIGN
from compiler.codegen.gemm_kernel import (KERNEL_ARGS, PACK_B_ARGS, EpilogueSpec, Tile,
                                          build_module, emit_activation)

# Each thread gets at least this many multiply-adds (about 4 us of work on one core: a
# job costs the pool ~1-3 us when its workers are awake); pieces are no smaller.
PARALLEL_MIN_MACS = 1 << 19
PIECE_MIN_MACS = 1 << 18
SHARED_B_ELEMENTS = 1 << 22  # the shared packing of B goes column chunk by chunk
CONFLICT_STRIDE = 2048  # bytes


def _array_data_offset() -> int:
    """Where an ndarray object keeps its data pointer: right after the object header
    (numpy's PyArrayObject_fields, whose layout compiled extensions rely on), checked
    here on a live array; 0 if not found there."""
    offset = object.__basicsize__
    probe = np.arange(3.0)[1:]
    found = ctypes.c_void_p.from_address(id(probe) + offset).value
    return offset if found == probe.__array_interface__["data"][0] else 0


ARRAY_DATA_OFFSET = _array_data_offset()


def address(x: np.ndarray) -> int:
    """x's data pointer: read from the object where ARRAY_DATA_OFFSET says (a third of
    the ~1 us that `x.ctypes.data` or `__array_interface__` cost), else through numpy."""
    if ARRAY_DATA_OFFSET:
        return ctypes.c_void_p.from_address(id(x) + ARRAY_DATA_OFFSET).value or 0
    return x.__array_interface__["data"][0]


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


class Batch(NamedTuple):
    """Products that differ only in where their operands are: `call`, the first, and
    `offsets` (count x 6, bytes) of each product's a, b, c, out, bias and res from it;
    None for the one product."""
    call: Call
    offsets: np.ndarray | None = None

    @property
    def count(self) -> int:
        return 1 if self.offsets is None else len(self.offsets)

    def calls(self) -> list[Call]:
        if self.offsets is None:
            return [self.call]
        c = self.call
        return [c._replace(a=c.a + a, b=c.b + b, c=c.c + cc, out=c.out + o, bias=c.bias + bias,
                           res=c.res + r) for a, b, cc, o, bias, r in self.offsets.tolist()]


class GemmKernel:
    """One compiled (dtype, tile, epilogue): the addresses of its entry points as
    runtime.pool items (record, worker): packed, direct, and the packing of B that
    threads share."""

    def __init__(self, tile: Tile, spec: EpilogueSpec, addresses: dict[str, int]):
        self.tile, self.spec = tile, spec
        self.dtype = np.dtype(tile.dtype)
        self.items = addresses

    def pack_b_record(self, call: Call, start: int, stop: int, packed_b: int) -> tuple:
        """The PACK_B_ARGS that put columns start:stop (start a multiple of NR) of the
        call's B into `packed_b`, which holds all of B as NR-column panels of all K
        rows."""
        itemsize = self.dtype.itemsize
        return (call.b + start * call.b_cs * itemsize, call.b_rs, call.b_cs, call.k,
                stop - start, packed_b + start * call.k * itemsize)


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
        debugging.banner(f"LLVM IR {name}", str(module), at_level=3)
    entries = ("packed", "direct", "pack_b")
    addresses = jit.load(module, [f"{name}_{entry}" for entry in entries])
    if debugging.level() >= 4:
        debugging.banner(f"assembly {name}", jit.assembly(module), at_level=4)
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
        buffer = held[key] = _aligned(count, dtype)
    return buffer.ctypes.data


def _aligned(count: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of `count` elements at a PACK_ALIGN-byte boundary."""
    raw = np.empty(count * dtype.itemsize + PACK_ALIGN, dtype=np.uint8)
    offset = -raw.ctypes.data % PACK_ALIGN
    return raw[offset:offset + count * dtype.itemsize].view(dtype)


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


def reads_a_in_place(a_rs: int, a_cs: int, itemsize: int) -> bool:
    """Whether the packed path should broadcast from A in place rather than pack it:
    its rows must be contiguous, and not a multiple of 2 KiB apart (then MR rows would
    crowd one or two L1 sets and evict each other)."""
    return a_cs == 1 and (a_rs * itemsize) % CONFLICT_STRIDE != 0


def run(kernel: GemmKernel, batch: Batch, blocking: Blocking | None,
        threads: int | None = None, specialised: int | None = None) -> None:
    """Run the batch's products (disjoint outputs; `blocking` None: the direct path) on
    up to `threads` threads (default runtime.threads.num_threads()) of runtime.pool.
    Work is split along M or N, never K, so every element of C sees the same operations
    in the same order whatever the thread count.

    Fewer packed products than threads: each product's M is cut into pieces that share
    one packing of B (which the threads make together first) and each pack their own
    rows of A. Otherwise whole products (or, on the direct path, row pieces) are the
    units. Either way threads claim the next piece until none is left.

    `specialised`: the item address of a gemm_small kernel for these products, run
    instead of the direct path; its sizes are fixed, so whole products are its pieces."""
    threads = threads_for(batch, specialised is not None, threads)
    if threads <= 1 or not _parallel.acquire(blocking=False):
        # small, or another thread is using the pool: this thread alone
        _in_pool(kernel, None, _records(kernel, batch, blocking, 1), 1, specialised)
        return
    try:
        if batch.count >= threads or specialised is not None:
            _in_pool(kernel, None, _records(kernel, batch, blocking, threads), threads,
                     specialised)
        elif blocking is not None:
            for one in batch.calls():
                _run_sharing_b(kernel, one, blocking, threads)
        else:
            pieces = [piece for one in batch.calls()
                      for piece in _row_pieces(one, kernel, threads)]
            _in_pool(kernel, None, _records(kernel, pieces, blocking, threads), threads)
    finally:
        _parallel.release()


def threads_for(batch: Batch, specialised: bool, threads: int | None = None) -> int:
    """How many threads `run` uses for the batch: 1 below 2 * PARALLEL_MIN_MACS (or for
    one product on a specialised kernel), else `threads` (default: num_threads())."""
    call = batch.call
    macs = batch.count * call.m * call.n * call.k
    if macs < 2 * PARALLEL_MIN_MACS or (specialised and batch.count == 1):
        return 1
    if threads is None:
        from runtime.threads import num_threads
        threads = num_threads()
    return threads


def records(batch: Batch) -> np.ndarray:
    """The batch's products as records for a direct (unpacked) kernel's items."""
    return _records(None, batch, None, 1)


def run_records(item: int, records: np.ndarray, threads: int) -> None:
    """item(record, worker) for every row of `records` (C-contiguous), on up to `threads`
    threads."""
    from runtime.pool import run_items
    run_items(None, (item, records.ctypes.data, len(records), records.strides[0]), threads)


# Held by the one Python thread whose product runs on runtime.pool, which also guards
# the workers' packing buffers; others run theirs alone meanwhile.
_parallel = threading.Lock()


def _run_sharing_b(kernel: GemmKernel, call: Call, blocking: Blocking, threads: int):
    """One packed call on `threads` threads, column chunk by column chunk (bounding the
    shared packed B): the threads first pack B's columns together, then take row pieces
    of about MC rows (one A block each) that all read that packing."""
    t, itemsize = kernel.tile, kernel.dtype.itemsize
    if _uneven(call.m, t.mr, threads) > max(1.05, _uneven(call.n, t.nr, threads)):
        # the row tiles do not share out evenly, the column panels do better: columns,
        # each piece packing its own B (A is packed again or read in place by each)
        pieces = _column_pieces(call, kernel, 2 * threads)
        _in_pool(kernel, None, _records(kernel, pieces, blocking, threads), threads)
        return
    width = min(call.n, max(t.nr, SHARED_B_ELEMENTS // call.k // t.nr * t.nr))
    packed_b = _scratch("shared b", call.k * _round_up(width, t.nr), kernel.dtype)
    blocks = -(-call.m // blocking.mc)
    for start in range(0, call.n, width):
        chunk = call.cols(start, min(call.n, start + width), itemsize,
                          kernel.spec.bias == "col")
        columns = np.array([kernel.pack_b_record(chunk, *cols, packed_b)
                            for cols in _cuts(chunk.n, t.nr, 2 * threads)], _PACK_B_RECORD)
        # about one A block per piece, as many pieces for each thread
        pieces = _row_pieces(chunk, kernel, -(-blocks // threads) * threads)
        _in_pool(kernel, columns, _records(kernel, pieces, blocking, threads, packed_b),
                 threads)


def _uneven(size: int, step: int, threads: int) -> float:
    """How much longer than an even share the busiest of `threads` threads works when
    `size` is dealt out in whole tiles of `step` (1.0: perfectly even)."""
    tiles = -(-size // step)
    return -(-tiles // threads) * threads / tiles


def _cuts(size: int, step: int, parts: int) -> list[tuple[int, int]]:
    """range(size) as up to `parts` near-equal (start, stop) pieces, cut at multiples of
    `step`."""
    steps = -(-size // step)
    parts = max(1, min(parts, steps))
    bounds = [min(size, steps * i // parts * step) for i in range(parts + 1)]
    return list(zip(bounds, bounds[1:]))


def _row_pieces(call: Call, kernel: GemmKernel, parts: int) -> list[Call]:
    """`call` as up to `parts` pieces of whole MR-row tiles, none much under
    PIECE_MIN_MACS multiply-adds."""
    parts = min(parts, max(1, call.m * call.n * call.k // PIECE_MIN_MACS))
    return [call.rows(lo, hi, kernel.dtype.itemsize, kernel.spec.bias == "row")
            for lo, hi in _cuts(call.m, kernel.tile.mr, parts)]


def _column_pieces(call: Call, kernel: GemmKernel, parts: int) -> list[Call]:
    """`call` as up to `parts` pieces of whole NR-column tiles, none much under
    PIECE_MIN_MACS multiply-adds."""
    parts = min(parts, max(1, call.m * call.n * call.k // PIECE_MIN_MACS))
    return [call.cols(lo, hi, kernel.dtype.itemsize, kernel.spec.bias == "col")
            for lo, hi in _cuts(call.n, kernel.tile.nr, parts)]


_KERNEL_RECORD = np.dtype([(name, "<f8" if kind == "f" else "<i8")
                           for name, kind in KERNEL_ARGS])
_PACK_B_RECORD = np.dtype([(name, "<i8") for name, _ in PACK_B_ARGS])
POINTERS = ("a", "b", "c", "out", "bias", "res")  # the order of Batch.offsets' columns


def _records(kernel: GemmKernel, pieces: Batch | list[Call], blocking: Blocking | None,
             threads: int, packed_b: int = 0) -> np.ndarray:
    """The pieces (a batch, or a list of calls) as kernel records for runtime.pool: their
    packing buffers are tables indexed by worker (this thread's for worker 0), or the
    shared `packed_b`. The tables live until this thread's next product."""
    if blocking is None:
        tail = (0, 0, 0, 0, 0, 0)
    else:
        t = kernel.tile
        a_size = _round_up(blocking.mc, t.mr) * blocking.kc
        tables = [_worker_buffers(kernel.dtype, "a", a_size, threads)]
        if packed_b:
            tables.append(np.full(threads, packed_b, np.int64))
        else:
            b_size = _round_up(blocking.nc, t.nr) * blocking.kc
            tables.append(_worker_buffers(kernel.dtype, "b", b_size, threads))
        _keep.tables = tables
        tail = (tables[0].ctypes.data, tables[1].ctypes.data, int(bool(packed_b)),
                blocking.mc, blocking.kc, blocking.nc)
    if isinstance(pieces, list):
        return np.array([(*piece, *tail) for piece in pieces], _KERNEL_RECORD)
    records = np.array([(*pieces.call, *tail)] * pieces.count, _KERNEL_RECORD)
    if pieces.offsets is not None:
        for column, name in enumerate(POINTERS):
            records[name] += pieces.offsets[:, column]
    return records


_keep = threading.local()  # the tables of the product this thread is running
_worker_buffers_held: dict = {}


def _worker_buffers(dtype: np.dtype, role: str, count: int, threads: int) -> np.ndarray:
    """Addresses of `role` packing buffers of at least `count` elements for workers 0
    .. threads-1: this thread's own for worker 0, the pool workers' (guarded by
    _parallel) for the others."""
    addresses = [_scratch(role, count, dtype)]
    for worker in range(1, threads):
        key = (worker, role, dtype.str)
        buffer = _worker_buffers_held.get(key)
        if buffer is None or buffer.size < count:
            buffer = _worker_buffers_held[key] = _aligned(count, dtype)
        addresses.append(buffer.ctypes.data)
    return np.array(addresses, np.int64)


def _in_pool(kernel: GemmKernel, first: np.ndarray | None, then: np.ndarray,
             threads: int, specialised: int | None = None) -> None:
    """Every record of `first` (packings of B), then every record of `then` (kernel
    pieces, by the `specialised` item if given), on up to `threads` threads of
    runtime.pool."""
    from runtime.pool import run_items
    function = specialised or kernel.items["packed" if then["pack_a"][0] != 0 else "direct"]
    listed = None if first is None else (kernel.items["pack_b"], first.ctypes.data,
                                         len(first), first.itemsize)
    run_items(listed, (function, then.ctypes.data, len(then), then.itemsize), threads)
