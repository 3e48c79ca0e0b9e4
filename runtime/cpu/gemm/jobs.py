"""Running a GEMM: a native.Batch cut into pieces, as records of the kernel's arguments,
run in one native call per job on runtime.pool's threads (or this thread alone).

Pieces go along M (around one packing of B that the threads make first) or N (each
packing its own B), never along K: results are bitwise identical across thread counts
for one blocking. Packing buffers are per worker, 64-byte aligned and reused: a
`Scratch` holds them (the shared one, or a plans.Plan's own).
"""
from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from runtime.cpu.gemm import config
from runtime.cpu.gemm.emit.tools import PACK_ALIGN
from runtime.cpu.gemm.emit.kernel import KERNEL_ARGS, ROWS_FIRST_DEPTH, Tile, packed_entry
from runtime.cpu.gemm.kernels import Batch, Blocking, Call, CompiledGemm


class Scratch:
    """Packing buffers by (role, dtype, worker), at least the size asked for, 64-byte
    aligned; grown when needed, otherwise reused (first touches cost page faults).
    Whoever holds one must not let two products use it at once."""

    def __init__(self):
        self._held: dict = {}

    def address(self, role: str, count: int, dtype: np.dtype, worker: int = 0) -> int:
        key = (role, dtype.str, worker)
        buffer = self._held.get(key)
        if buffer is None or buffer.size < count:
            buffer = self._held[key] = _aligned(count, dtype)
        return buffer.ctypes.data

    def table(self, role: str, count: int, dtype: np.dtype, threads: int) -> np.ndarray:
        """Addresses of the `role` buffers of workers 0 .. threads-1."""
        return np.array([self.address(role, count, dtype, worker)
                         for worker in range(threads)], np.int64)


class _SharedScratch(Scratch):
    """The default: worker 0 (the calling thread) has a Scratch of its own per thread;
    the pool's workers share one, guarded by _parallel."""

    def __init__(self):
        super().__init__()
        self._local = threading.local()

    def address(self, role: str, count: int, dtype: np.dtype, worker: int = 0) -> int:
        if worker:
            return super().address(role, count, dtype, worker)
        own = getattr(self._local, "scratch", None)
        if own is None:
            own = self._local.scratch = Scratch()
        return own.address(role, count, dtype)


_shared = _SharedScratch()


def _aligned(count: int, dtype: np.dtype) -> np.ndarray:
    """An uninitialised array of `count` elements at a PACK_ALIGN-byte boundary."""
    raw = np.empty(count * dtype.itemsize + PACK_ALIGN, dtype=np.uint8)
    offset = -raw.ctypes.data % PACK_ALIGN
    return raw[offset:offset + count * dtype.itemsize].view(dtype)


class Job(NamedTuple):
    """One native call of runtime.pool's items: the records of `first` (packings of B,
    PACK_B_ARGS) by `pack_b`, then those of `then` (KERNEL_ARGS) by `function`, on up
    to `threads` threads. Records are rows of 8-byte words; `tables` holds the packing
    buffers' addresses by worker that the records point to."""
    first: np.ndarray | None
    pack_b: int
    then: np.ndarray
    function: int
    threads: int
    tables: np.ndarray

    def run(self) -> None:
        from runtime.pool import run_items
        first = None if self.first is None else (
            self.pack_b, self.first.ctypes.data, len(self.first), self.first.strides[0])
        run_items(first, (self.function, self.then.ctypes.data, len(self.then),
                          self.then.strides[0]), self.threads)


def run(kernel: CompiledGemm, batch: Batch, blocking: Blocking | None,
        threads: int | None = None, specialised: int | None = None) -> None:
    """Run the batch's products (disjoint outputs; `blocking` None: the direct path) on
    up to `threads` threads (default runtime.threads.num_threads()) of runtime.pool: see
    `prepare`. The pool's workers' packing buffers are shared: one Python thread at a
    time uses them, others run their products alone meanwhile."""
    threads = threads_for(batch, specialised is not None, threads)
    if threads > 1 and _parallel.acquire(blocking=False):
        try:
            for job in prepare(kernel, batch, blocking, threads, specialised, _shared):
                job.run()
        finally:
            _parallel.release()
        return
    for job in prepare(kernel, batch, blocking, 1, specialised, _shared):
        job.run()


def prepare(kernel: CompiledGemm, batch: Batch, blocking: Blocking | None, threads: int,
            specialised: int | None, scratch: Scratch) -> list[Job]:
    """The jobs that compute the batch on `threads` threads with `scratch`'s buffers.
    Work is split along M or N, never K, so every element of C sees the same operations
    in the same order whatever the thread count.

    Fewer packed products than threads: each product's M is cut into pieces that share
    one packing of B (which the threads make together first) and each pack their own
    rows of A. Otherwise whole products (or, on the direct path, row pieces) are the
    units. Either way threads claim the next piece until none is left.

    `specialised`: the item address of a small.py kernel for these products, run
    instead of the direct path; its sizes are fixed, so whole products are its pieces."""
    if threads <= 1 or batch.count >= threads or specialised is not None:
        return [_job(kernel, None, batch, blocking, threads, scratch, specialised)]
    if blocking is not None:
        return [job for one in batch.calls()
                for job in _sharing_b(kernel, one, blocking, threads, scratch)]
    pieces = [piece for one in batch.calls() for piece in _row_pieces(one, kernel, threads)]
    return [_job(kernel, None, pieces, blocking, threads, scratch)]


def threads_for(batch: Batch, specialised: bool, threads: int | None = None) -> int:
    """How many threads `run` uses for the batch: 1 below 2 * config.PARALLEL_MIN_MACS
    (or for one product on a specialised kernel), else `threads` (default:
    num_threads())."""
    call = batch.call
    macs = batch.count * call.m * call.n * call.k
    if macs < 2 * config.PARALLEL_MIN_MACS or (specialised and batch.count == 1):
        return 1
    if threads is None:
        from runtime.threads import num_threads
        threads = num_threads()
    return threads


# Held by the one Python thread whose product runs on runtime.pool, which also guards
# the workers' packing buffers in _shared; others run theirs alone meanwhile.
_parallel = threading.Lock()


def _sharing_b(kernel: CompiledGemm, call: Call, blocking: Blocking, threads: int,
               scratch: Scratch) -> list[Job]:
    """One packed call on `threads` threads, column chunk by column chunk (bounding the
    shared packed B): the threads first pack B's columns together, then take row pieces
    of about MC rows (one A block each) that all read that packing."""
    t, itemsize = kernel.tile, kernel.dtype.itemsize
    if _by_columns(call, t, threads):
        pieces = _column_pieces(call, kernel, 2 * threads)
        if call.a_cs == 1 and max(p.n for p in pieces) <= config.NARROW_PIECE_COLUMNS \
                and not kernel.packs_a:
            pieces = [piece._replace(a_in_place=1) for piece in pieces]
        return [_job(kernel, None, pieces, blocking, threads, scratch)]
    width = min(call.n, max(t.nr, config.SHARED_B_ELEMENTS // call.k // t.nr * t.nr))
    packed_b = scratch.address("shared b", call.k * _round_up(width, t.nr), kernel.dtype)
    blocks = -(-call.m // blocking.mc)
    jobs = []
    for start in range(0, call.n, width):
        chunk = call.cols(start, min(call.n, start + width), itemsize,
                          kernel.spec.bias == "col", kernel.operand_itemsize)
        columns = np.array([kernel.pack_b_record(chunk, *cols, packed_b)
                            for cols in _cuts(chunk.n, t.nr, 2 * threads)], np.int64)
        # about one A block per piece, as many pieces for each thread
        pieces = _row_pieces(chunk, kernel, -(-blocks // threads) * threads)
        jobs.append(_job(kernel, columns, pieces, blocking, threads, scratch, None, packed_b))
    return jobs


def _by_columns(call: Call, tile: Tile, threads: int) -> bool:
    """Whether `threads` share one product better by columns, each piece packing its own
    B and all of A (packed again by each, or read in place), than by rows around one
    shared packing of B (which all threads make first and then wait for): when the
    column panels share out at least as evenly and N is wide enough that packing A again
    costs little (measured at 512-2048 squares: columns 0.91-0.96x of OpenBLAS, rows
    0.87-0.93x), or when the row tiles share out clearly worse (128 rows on 2 threads)."""
    rows, columns = _uneven(call.m, tile.mr, threads), _uneven(call.n, tile.nr, threads)
    return (columns <= rows and call.n >= config.COLUMNS_MIN_WIDTH * threads) or (
        rows > max(1.05, columns))


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


def _row_pieces(call: Call, kernel: CompiledGemm, parts: int) -> list[Call]:
    """`call` as up to `parts` pieces of whole MR-row tiles, none much under
    config.PIECE_MIN_MACS multiply-adds."""
    parts = min(parts, max(1, call.m * call.n * call.k // config.PIECE_MIN_MACS))
    return [call.rows(lo, hi, kernel.dtype.itemsize, kernel.spec.bias == "row",
                      kernel.operand_itemsize)
            for lo, hi in _cuts(call.m, kernel.tile.mr, parts)]


def _column_pieces(call: Call, kernel: CompiledGemm, parts: int) -> list[Call]:
    """`call` as up to `parts` pieces of whole NR-column tiles, none much under
    config.PIECE_MIN_MACS multiply-adds."""
    parts = min(parts, max(1, call.m * call.n * call.k // config.PIECE_MIN_MACS))
    return [call.cols(lo, hi, kernel.dtype.itemsize, kernel.spec.bias == "col",
                      kernel.operand_itemsize)
            for lo, hi in _cuts(call.n, kernel.tile.nr, parts)]


FIELDS = tuple(name for name, _ in KERNEL_ARGS)
_KERNEL_RECORD = np.dtype([(name, "<f8" if kind == "f" else "<i8")
                           for name, kind in KERNEL_ARGS])
POINTERS = ("a", "b", "c", "out", "bias", "res")  # the order of Batch.offsets' columns


def _job(kernel: CompiledGemm, first: np.ndarray | None, pieces: Batch | list[Call],
         blocking: Blocking | None, threads: int, scratch: Scratch,
         specialised: int | None = None, packed_b: int = 0) -> Job:
    """A Job of the pieces (a batch, or a list of calls): their packing buffers are
    tables indexed by worker from `scratch` (each the size the largest piece needs),
    or the shared `packed_b`."""
    calls = pieces if isinstance(pieces, list) else [pieces.call]
    tables = np.zeros((2, threads), np.int64)
    if blocking is None:
        tail = (0, 0, 0, 0, 0, 0)
    else:
        t, depth = kernel.tile, min(blocking.kc, calls[0].k)
        rows, cols = max(c.m for c in calls), max(c.n for c in calls)
        tables[0] = scratch.table("a", _round_up(min(blocking.mc, rows), t.mr) * depth,
                                  kernel.dtype, threads)
        tables[1] = packed_b or scratch.table(
            "b", _round_up(min(blocking.nc, cols), t.nr) * depth, kernel.dtype, threads)
        tail = (tables.ctypes.data, tables.ctypes.data + threads * 8, int(bool(packed_b)),
                blocking.mc, blocking.kc, blocking.nc)
    if isinstance(pieces, list):
        records = np.array([(*piece, *tail) for piece in pieces], _KERNEL_RECORD)
    else:
        records = np.array([(*pieces.call, *tail)] * pieces.count, _KERNEL_RECORD)
        if pieces.offsets is not None:
            for column, name in enumerate(POINTERS):
                records[name] += pieces.offsets[:, column]
            if pieces.call.rounded:  # laid out as the float32 out, in 2-byte elements
                records["rounded"] += pieces.offsets[:, POINTERS.index("out")] // 2
    words = records.view(np.int64).reshape(len(records), len(FIELDS))
    if specialised is not None:
        function = specialised
    else:
        entry = "direct" if blocking is None else _packed_entry(calls, blocking.kc)
        kernel.items.compile([entry] + ([] if first is None else ["pack_b"]))
        function = kernel.items[entry]
    pack_b = 0 if first is None else kernel.items["pack_b"]
    return Job(first, pack_b, words, function, threads, tables)


def _packed_entry(calls: list[Call], kc: int) -> str:
    """The packed kernel's variant for these calls: the ways they read A (in place
    where asked and rows are contiguous, as the kernel decides) and the depths of their
    K blocks (kc, and the last block's k % kc)."""
    in_place = {bool(c.a_in_place) and c.a_cs == 1 for c in calls}
    depths = {kc if c.k >= kc else 0 for c in calls} | {c.k % kc for c in calls}
    shallow = {depth < ROWS_FIRST_DEPTH for depth in depths - {0}}
    return packed_entry(in_place, shallow)


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to
