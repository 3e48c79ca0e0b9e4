"""A strided copy as one generated kernel, under eager's CPU kernels (cat_cpu asks `copy`
to copy its parts into their slices of the result from CAT_NATIVE_BYTES on; numpy runs
the rest, and every call while the kernel compiles in the background).

numpy's copy of a transposed view walks it an element at a time across cache lines: in
the compiled GPT step, cat of three (8, 64, 384) float32 gradients, one a transposed view
(element strides (98304, 1, 64)), took ~1.4 ms. The kernel copies an N-d source view
into a destination view of the same shape and item size (a copy is a copy of bits: one
kernel per item size, 1, 2, 4 or 8 bytes), any non-negative byte strides. The dims are
merged first (runtime.layout.merge_dims); the destination's innermost dim is a block's
columns, its rows the dim the source steps through by one item if there is one (a
transpose), else the next dim in, and the other dims (up to MAX_OUTER) an outer index the
kernel decodes.

    void copy(i8* record, i64 worker)

A record (RECORD_WORDS i64 words) is one piece of a copy: source and destination
addresses, the outer indices [start, stop) it copies, rows and columns with their byte
strides, the outer dims (count, sizes, destination strides, source strides). How a block
is copied: see _Build. A copy from PARALLEL_BYTES on is cut into one record per thread
(over the outer indices, or over the rows where there are fewer outer indices than
threads) and run on runtime.pool's threads; all the pairs of a cat are one native call.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from runtime.addresses import address
from runtime.layout import merge_dims
from runtime.llvm.jit import KernelPending, deferring_call, host_jit, vector_width
from runtime.pool import Items
from runtime.threads import chunks, num_threads

MAX_OUTER = 6  # outer dims a record holds; more (after merging) keep numpy
SRC, DST, START, STOP, ROWS, COLS, ROW_DST, COL_DST, ROW_SRC, COL_SRC, OUTER = range(11)
SIZES = OUTER + 1
RECORD_WORDS = 32  # SIZES + 3 * MAX_OUTER = 29, padded
PARALLEL_BYTES = 1 << 18  # bytes copied before a copy spans threads

_kernels: dict = {}  # item size -> the kernel's address
calls = 0  # copies run natively (tests check that the native path ran)


def copy(pairs: list) -> bool:
    """Copy each (destination, source) pair of numpy arrays of one shape and item size
    (destinations writable, none overlapping a source); False, copying nothing, where
    the kernel is still compiling or a pair has a layout it does not take (negative
    strides, more than MAX_OUTER dims after merging)."""
    global calls
    if not pairs:
        return True
    layouts = tuple((dst.shape, dst.strides, src.strides) for dst, src in pairs)
    key = (pairs[0][0].itemsize, num_threads(), layouts)
    if key not in _plans:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = _plan(key)
    plan = _plans[key]
    if plan is None:
        return False
    if plan.offsets:
        try:
            kernel = deferring_call(_kernel, key[0])
        except KernelPending:
            return False
        with plan.lock:
            if plan.items is None:
                plan.items = Items(None, (kernel, address(plan.records), len(plan.records),
                                          RECORD_WORDS * 8))
            records = plan.records
            for i, (pair, src_offset, dst_offset) in enumerate(plan.offsets):
                dst, src = pairs[pair]
                records[i, SRC] = address(src) + src_offset
                records[i, DST] = address(dst) + dst_offset
            plan.items.run(plan.threads)
    calls += 1
    return True


class _Plan:
    """A copy's records, written again at each call with its pairs' addresses: for each
    record (its pair, source and destination offsets from the pair's first elements),
    and the threads to run them on (one call at a time: `lock`)."""

    def __init__(self, records: list, offsets: list, threads: int):
        self.records = np.array(records, np.int64).reshape(-1, RECORD_WORDS)
        self.offsets, self.threads = offsets, threads
        self.items = None  # made at the first call, once the kernel is loaded
        self.lock = threading.Lock()


_plans: dict = {}  # (item size, threads, layouts) -> its _Plan, or None
_MAX_PLANS = 256


def _plan(key: tuple):
    """The copy's _Plan, None for a layout the kernel does not take. One record per
    pair, or, from PARALLEL_BYTES in all, one per thread over each pair's outer indices
    (over its rows, where it has fewer outer indices than threads)."""
    itemsize, threads, layouts = key
    total = sum(math.prod(shape) for shape, _, _ in layouts) * itemsize
    threads = threads if total >= PARALLEL_BYTES else 1
    records, offsets = [], []
    for pair, (shape, dst_strides, src_strides) in enumerate(layouts):
        if math.prod(shape) == 0:
            continue
        block = _block(itemsize, shape, dst_strides, src_strides)
        if block is None:
            return None
        for record in _records(*block, threads):
            records.append(record)
            offsets.append((pair, record[SRC], record[DST]))
    return _Plan(records, offsets, threads)


def _block(item: int, shape, dst_strides, src_strides):
    """(outer dims, rows, columns) of a copy of one pair, each dim (size, (dst stride,
    src stride)) in bytes (a 0-d copy is one row of one column); None for a layout the
    kernel does not take."""
    if min(dst_strides, default=0) < 0 or min(src_strides, default=0) < 0:
        return None
    dims = merge_dims([(n, (a, b)) for n, a, b in zip(shape, dst_strides, src_strides)])
    one = (1, (0, 0))
    columns = min(range(len(dims)), key=lambda d: (dims[d][1][0] != item, -d), default=None)
    rest = [d for d in range(len(dims)) if d != columns]
    # rows: the dim the source steps through by one item (a transpose), else the next in
    rows = next((d for d in reversed(rest) if dims[d][1][1] == item),
                rest[-1] if rest else None)
    outer = [dims[d] for d in rest if d != rows]
    if len(outer) > MAX_OUTER:
        return None
    return (outer, one if rows is None else dims[rows],
            one if columns is None else dims[columns])


def _records(outer, row_dims, column_dims, threads: int) -> list:
    """The records (lists of RECORD_WORDS words) of one pair's block."""
    (rows, (row_dst, row_src)), (cols, (col_dst, col_src)) = row_dims, column_dims
    base = [0] * RECORD_WORDS
    for k, (n, (a, b)) in enumerate(outer):
        base[SIZES + k], base[SIZES + MAX_OUTER + k], base[SIZES + 2 * MAX_OUTER + k] = n, a, b
    base[COLS:OUTER + 1] = cols, row_dst, col_dst, row_src, col_src, len(outer)
    count = math.prod(n for n, _ in outer)
    if count >= threads:
        pieces = [(start, stop, 0, rows) for start, stop in chunks(count, threads)]
    else:
        pieces = [(0, count, first, last) for first, last in chunks(rows, threads)]
    records = []
    for start, stop, first, last in pieces:
        record = list(base)
        record[SRC:ROWS + 1] = first * row_src, first * row_dst, start, stop, last - first
        records.append(record)
    return records


def _kernel(itemsize: int) -> int:
    kernel = _kernels.get(itemsize)
    if kernel is None:
        lanes = vector_width() * 4 // itemsize
        name = f"kiln_copy_i{8 * itemsize}"
        kernel = _kernels[itemsize] = host_jit().load_spec(
            name, f"{name} w{lanes}", _Build(itemsize, lanes), [name])[name]
    return kernel


class _Build:
    """The kernel's IR for one item size and vector width in items, `lanes` (a
    module-level class: it pickles, so the background worker can build it). Rows of
    contiguous items are llvm.memcpy (libc's memcpy). Other blocks go in tiles of
    `lanes` x `lanes` items: a whole tile of a transpose (the source steps through the
    rows by one item, the destination through the columns) is `lanes` vector loads,
    their transpose in registers (log2(lanes) rounds of interleaving shuffles) and
    `lanes` vector stores; any other tile, and the tiles at a block's edges, an item a
    step."""

    def __init__(self, itemsize: int, lanes: int):
        self.itemsize, self.lanes = itemsize, lanes

    def __call__(self, module) -> None:
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import (I1, I8P, I64, VOID, at, define, fold_range,
                                          for_range, i64, intrinsic, load_vector, smin,
                                          store_vector)
        item, tile = self.itemsize, self.lanes
        t = ir.IntType(8 * item)
        fn, b = define(module, f"kiln_copy_i{8 * item}",
                       ir.FunctionType(VOID, [I8P, I64]), ("record", "worker"))
        words = b.bitcast(fn.args[0], I64.as_pointer())

        def word(k, *plus):
            return b.load(at(b, words, k, *plus))
        src, dst = (b.inttoptr(word(k), I8P) for k in (SRC, DST))
        start, stop, rows, cols = (word(k) for k in (START, STOP, ROWS, COLS))
        row_dst, col_dst, row_src, col_src = (
            word(k) for k in (ROW_DST, COL_DST, ROW_SRC, COL_SRC))
        outer = word(OUTER)
        one = i64(item)
        contiguous = b.and_(b.icmp_signed("==", col_dst, one), b.icmp_signed("==", col_src, one))
        transposed = b.and_(b.icmp_signed("==", col_dst, one), b.icmp_signed("==", row_src, one))
        row_bytes = b.mul(cols, one)

        def items(base, *offsets):
            return b.bitcast(at(b, base, *offsets), t.as_pointer())

        def scalar_tile(s, d, r0, r_end, c0, c_end):
            with for_range(b, r0, r_end, 1, "r") as r:
                s_row, d_row = at(b, s, b.mul(r, row_src)), at(b, d, b.mul(r, row_dst))
                with for_range(b, c0, c_end, 1, "c") as c:
                    value = b.load(items(s_row, b.mul(c, col_src)), align=1)
                    b.store(value, items(d_row, b.mul(c, col_dst)), align=1)

        def vector_tile(s, d, r0, c0):
            columns = [load_vector(b, items(s, b.mul(b.add(c0, i64(c)), col_src),
                                            b.mul(r0, one)), tile, 1)
                       for c in range(tile)]
            for row, values in enumerate(_transpose(b, columns)):
                store_vector(b, values, items(d, b.mul(b.add(r0, i64(row)), row_dst),
                                              b.mul(c0, one)), 1)

        def block(s, d):
            with b.if_else(contiguous) as (whole_rows, tiles):
                with whole_rows:
                    with for_range(b, 0, rows, 1, "row") as r:
                        intrinsic(b, "memcpy", [at(b, d, b.mul(r, row_dst)),
                                                at(b, s, b.mul(r, row_src)), row_bytes,
                                                ir.Constant(I1, 0)], VOID, (I8P, I8P, I64))
                with tiles:
                    with for_range(b, 0, rows, tile, "tile_r") as r0:
                        r_end = smin(b, b.add(r0, i64(tile)), rows)
                        with for_range(b, 0, cols, tile, "tile_c") as c0:
                            c_end = smin(b, b.add(c0, i64(tile)), cols)
                            whole = b.and_(transposed, b.and_(
                                b.icmp_signed("==", b.sub(r_end, r0), i64(tile)),
                                b.icmp_signed("==", b.sub(c_end, c0), i64(tile))))
                            with b.if_else(whole) as (vectors, scalars):
                                with vectors:
                                    vector_tile(s, d, r0, c0)
                                with scalars:
                                    scalar_tile(s, d, r0, r_end, c0, c_end)

        with for_range(b, start, stop, 1, "outer") as index:
            def step(j, state):
                rest, s_off, d_off = state
                k = b.sub(b.sub(outer, i64(1)), j)  # innermost outer dim first
                size = word(SIZES, k)
                coordinate = b.urem(rest, size)
                return [b.udiv(rest, size),
                        b.add(s_off, b.mul(coordinate, word(SIZES + 2 * MAX_OUTER, k))),
                        b.add(d_off, b.mul(coordinate, word(SIZES + MAX_OUTER, k)))]
            _, s_off, d_off = fold_range(b, 0, outer, 1, [index, i64(0), i64(0)], step, "dim")
            block(at(b, src, s_off), at(b, dst, d_off))
        b.ret_void()


def _transpose(b, vectors: list) -> list:
    """The transpose of a square of vectors (n vectors of n lanes, n a power of two):
    log2(n) rounds, each interleaving vector i with vector i + n/2 into new vectors 2i
    (their low halves' lanes, alternating) and 2i + 1 (their high halves')."""
    import llvmlite.ir as ir

    from runtime.llvm.toolkit import I32
    n = len(vectors)
    low = ir.Constant(ir.VectorType(I32, n), [j // 2 + (j % 2) * n for j in range(n)])
    high = ir.Constant(ir.VectorType(I32, n), [n // 2 + j // 2 + (j % 2) * n
                                               for j in range(n)])
    for _ in range(n.bit_length() - 1):
        vectors = [half for i in range(n // 2)
                   for half in (b.shuffle_vector(vectors[i], vectors[i + n // 2], low),
                                b.shuffle_vector(vectors[i], vectors[i + n // 2], high))]
    return vectors
