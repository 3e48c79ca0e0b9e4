"""Launching the native backend's elementwise and row kernels: a kernel call prepared
for one layout of its operands (offset tables, strides and ranges made ctypes values
once; each call brings fresh outputs and the data pointers), on the calling thread or,
from PARALLEL_ELEMENTS on, one range per thread of runtime.pool. A kernel with one output,
up to FASTCALL_ELEMENTS, is called through a runtime.fastcall builtin on the data pointers
(~30 ns of call where ctypes takes ~1 us; on threads, the builtin hands runtime.pool the
job itself: ~2 us of Python and ctypes less).

Every kernel takes (data pointers, per-operand row offsets, inner strides, row range,
inner range); see runtime/cpu/kernel_ir.py. The tensors are the caller's: a launch is
given how to make an output (`allocate`, from the output's spec) and how to read a
tensor's data pointer (`data_ptr`); an output's array is its `_storage.data`.
"""
from __future__ import annotations

import ctypes
import functools
import struct
import threading

import numpy as np

from runtime.addresses import array_address, read_addresses_with
from runtime.launchers import address_reader, launcher, parallel_launcher
from runtime.threads import chunks, num_threads

# the kernels called with every argument already a ctypes value (made once per layout):
# with no argument types to convert through, a call costs about half as much
_KERNEL_PREPARED = ctypes.CFUNCTYPE(None)
# from this size on a kernel runs on runtime.pool's threads, one range each: a float32
# add on two threads measured even with one thread at 64K elements, 2x faster at 128K,
# 2.5x at 256K (where each core's half stays in its own L2)
PARALLEL_ELEMENTS = 1 << 16
# up to this size a kernel on the calling thread is called through a runtime.fastcall
# builtin, which keeps the GIL (1 MiB of float32: ~10 us at most); larger ones through
# ctypes, which lets it go while they run
FASTCALL_ELEMENTS = 1 << 18


class OutOfRange(Exception):
    """A kernel with gathered loads found an index out of range (its status word is set);
    what it wrote is garbage, and the runner raises the op's own error instead."""


class Launch:
    """A kernel call prepared for one layout: the offset tables, strides and ranges are
    made ctypes values once; each call brings fresh outputs and packs the data pointers.
    A kernel on several threads runs as runtime.pool items, one range of the rows (or of
    its one row's inner range) each, prepared once with their records pointing at
    `pointers`, where a call writes its data pointers: one call at a time (a caller that
    finds them taken runs the kernel alone)."""

    def __init__(self, address: int, offsets, strides, rows: int, inner: int,
                 split_inner: bool, outputs: tuple, allocate, data_ptr,
                 checked: bool = False, segments: int = 1):
        self.allocate, self.data_ptr = allocate, data_ptr
        self.checked = checked  # the kernel takes a status word after its operands
        if checked:  # (its slot's offset table is never read)
            offsets = offsets + [np.zeros(1, np.int64)]
        self._offsets = offsets  # the tables the pointers below point into
        self.offs = (ctypes.c_void_p * len(offsets))(*[o.ctypes.data for o in offsets])
        self.strides = (ctypes.c_int64 * len(strides))(*strides)
        # the data pointers packed as bytes, which ctypes passes as a pointer to them
        self.pack_pointers = struct.Struct(f"{len(offsets)}P").pack
        self.outputs = outputs
        elements = rows * segments * inner  # (a row of a kernel with segments: each
        self.threads = thread_count(elements)  # segment an inner run)
        self.split_inner = split_inner and rows == 1 and self.threads > 1
        self.parallel = self.threads > 1 and (rows >= self.threads or self.split_inner)
        if self.parallel:
            self._prepare_items(address, len(offsets), rows, inner)
        self.empty = rows == 0 or (split_inner and inner == 0)  # nothing to read or write
        self.plain = len(outputs) == 1 and not (checked or self.empty)
        # `fast` runs a plain call on the inputs' data pointers and the output's array
        # (whose address a builtin reads itself: a fresh array's through Python costs
        # ~0.3 us, a tenth of a small compiled call). A small one goes through a
        # runtime.fastcall builtin (~0.9 us of a compiled call less than ctypes on one
        # thread, ~2 us on the pool; it keeps the GIL while the kernel runs, so not for
        # kernels that run long), made at the second call: its launcher, even from the
        # disk cache, costs ~1 ms, which one call should not pay. Before that a small
        # call on threads runs alone through ctypes, touching nothing shared (the
        # builtin, holding the GIL, writes `pointers` without taking `busy`).
        small = elements <= FASTCALL_ELEMENTS
        self.fast = self._plain_on_threads if self.parallel and not small else \
            self._plain_through_ctypes
        self._fast_later = (address, len(offsets), rows, inner) \
            if self.plain and small else None
        self._called = False
        self.prepared = _KERNEL_PREPARED(address)
        self.whole = (self.offs, self.strides, ctypes.c_int64(0), ctypes.c_int64(rows),
                      ctypes.c_int64(0), ctypes.c_int64(inner))  # every row, every element

    def _make_fast(self) -> None:
        address, count, rows, inner = self._fast_later
        self._fast_later = None
        _read_addresses_natively()
        # (None where this interpreter does not allow it: ctypes from now on)
        if self.parallel:
            from runtime import pool
            pool.pool(self.threads)
            made = parallel_launcher(count, ctypes.addressof(self.pointers),
                                     self.items.address, pool.items_address(),
                                     pool.run_address(), pool.current_cell(), self.threads)
        else:
            made = launcher(address, count, ctypes.addressof(self.offs),
                            ctypes.addressof(self.strides), rows, inner)
        self.fast = made or (self._plain_on_threads if self.parallel else
                             self._plain_through_ctypes)

    def _plain_through_ctypes(self, *arguments) -> None:
        *pointers, out = arguments
        self._through_ctypes(*pointers, array_address(out))

    def _plain_on_threads(self, *arguments) -> None:
        *pointers, out = arguments
        self._on_threads(*pointers, array_address(out))

    def _through_ctypes(self, *pointers) -> None:
        self.prepared(self.pack_pointers(*pointers), *self.whole)

    def _on_threads(self, *pointers) -> None:
        """The kernel on the pool's threads (alone on this one where another call has
        the pointer table)."""
        if self.busy.acquire(blocking=False):
            try:
                self.pointers[:] = pointers
                self.items.run(self.threads)
            finally:
                self.busy.release()
        else:
            self._through_ctypes(*pointers)

    def _prepare_items(self, address: int, count: int, rows: int, inner: int) -> None:
        from runtime.pool import Items
        ranges = [(0, 1, start, end) for start, end in chunks(inner, self.threads, 4096)
                  ] if self.split_inner else [(start, end, 0, inner)
                                              for start, end in chunks(rows, self.threads)]
        self.pointers = (ctypes.c_void_p * count)()
        self._records = np.array([(address, ctypes.addressof(self.pointers),
                                   ctypes.addressof(self.offs), ctypes.addressof(self.strides),
                                   *r) for r in ranges], np.int64)
        self.items = Items(None, (_range_item(), self._records.ctypes.data, len(ranges),
                                  self._records.strides[0]))
        self.busy = threading.Lock()

    def __call__(self, operands) -> list:
        if self.plain:  # the common case spelled out: one output, unchecked
            out = self.allocate(*self.outputs[0])
            if self._fast_later is not None:  # the builtin is made at the second call
                if self._called:
                    self._make_fast()
                self._called = True
            self.fast(*map(self.data_ptr, operands), out._storage.data)
            return [out]
        outs = [self.allocate(*spec) for spec in self.outputs]
        if self.empty:
            return outs
        pointers = [*map(self.data_ptr, operands), *map(self.data_ptr, outs)]
        if self.checked:
            status = np.zeros(1, np.int64)
            pointers.append(status.ctypes.data)
        (self._on_threads if self.parallel else self._through_ctypes)(*pointers)
        if self.checked and status[0]:
            raise OutOfRange()
        return outs


@functools.cache
def _read_addresses_natively() -> None:
    """Arrays' addresses read through runtime.fastcall's builtin from now on (made with
    the first launcher: each fresh output's address is asked once it is passed)."""
    read_addresses_with(address_reader())


@functools.cache
def _range_item() -> int:
    """The address of a runtime.pool item whose record is a kernel's address and its
    seven arguments, i64 each (data pointers, offset tables, strides, row range, inner
    range): one kernel call on one range."""
    import llvmlite.ir as ir

    from runtime.llvm.jit import host_jit
    from runtime.llvm.toolkit import I8P, I64, VOID, at, define
    from runtime.pool import ITEM
    kernel_type = ir.FunctionType(VOID, [I8P] * 3 + [I64] * 4)

    def build(module) -> None:
        fn, b = define(module, "kiln_kernel_range_item", ITEM, attributes=())
        record = b.bitcast(fn.args[0], I64.as_pointer())
        words = [b.load(at(b, record, i)) for i in range(8)]
        b.call(b.inttoptr(words[0], kernel_type.as_pointer()),
               [b.inttoptr(word, I8P) for word in words[1:4]] + words[4:])
        b.ret_void()
    return host_jit().load_spec("kiln_kernel_range_item", "kiln_kernel_range_item", build,
                                ["kiln_kernel_range_item"])["kiln_kernel_range_item"]


def thread_count(elements: int) -> int:
    """Threads for a kernel over this many elements: all of them from
    PARALLEL_ELEMENTS on where runtime.pool runs (Linux on x86-64), else one."""
    if elements < PARALLEL_ELEMENTS:
        return 1  # without importing runtime.pool (and llvmlite with it)
    return num_threads() if _pool_available() else 1


@functools.cache
def _pool_available() -> bool:
    """runtime.pool.available(), its import (~0.4 us a call) made once: eager asks
    thread_count at every large one-ufunc op."""
    from runtime import pool
    return pool.available()
