"""A thread pool whose workers wait in native code, for native tasks.

A pool that hands Python callables to Python threads (kiln had one) pays a queue round
trip and a thread wake-up per job, 40-100 us on this machine, more than a whole 256^3
GEMM is worth splitting. Here the workers are Python threads that enter one native
function and never return (they hold no GIL), and a job is a function pointer and a
context pointer published by bumping a generation counter: a worker that is spinning
sees it within a microsecond. Idle workers spin briefly, then yield the core
(sched_yield, as OpenBLAS's threads do), then sleep on a futex, so an idle process
costs nothing.

The contract for a task `void fn(i8* ctx, i64 worker, i64 threads)`: the calling thread
runs it as worker 0; workers 1 .. threads-1 may each run it any number of times (a late
worker may join after the work is gone, or not at all), never two at once with the same
index. So tasks claim their work with atomic counters (`run_items` below does), and a
worker index may own scratch memory. `run` returns once every worker that joined has
left. A job submitted while another runs (another Python thread) runs on its caller
alone, as worker 0 with threads = 1.

`Items` (and `run_items`) are such a task: lists of native items `fn(record, worker)`
handed out one record at a time, the second list after the first is all done.

Linux on x86-64 only (the futex and sched_yield system call numbers); elsewhere
`available()` is False and Items run on the calling thread alone.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
import threading

import llvmlite.ir as ir
import numpy as np

from runtime.addresses import address, calloc_forever
from runtime.llvm.toolkit import (I8P, I32, I64, VOID, Target, at, claim_loop, define, i32,
                                  i64, intrinsic, while_loop)

TASK = ir.FunctionType(VOID, [I8P, I64, I64])  # fn(ctx, worker, threads)
ITEM = ir.FunctionType(VOID, [I8P, I64])  # fn(record, worker)

SYS_SCHED_YIELD, SYS_FUTEX = 24, 202
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
SPIN_CYCLES = 1 << 16  # ~20 us of pause loops: back-to-back jobs never leave them
YIELD_CYCLES = 1 << 21  # ~0.7 ms more of sched_yield before sleeping on the futex

# The pool's shared words, each on its own cache line (index in i64 slots); the job's
# function, context and thread count share one line, written together.
GENERATION, SLEEPERS, ACTIVE, CLOSED, BUSY, JOB = 0, 8, 16, 24, 32, 40
POOL_SLOTS = 48
# run_items' job record (i64 slots): two lists of (function, records, count, stride)
# and the counters that hand their records out.
FIRST, THEN, CLAIM_FIRST, DONE_FIRST, CLAIM_THEN = 0, 4, 8, 16, 24
ITEMS_SLOTS = 32


def available() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


class _Emitter:
    """IR for the pool's three functions; see the module docstring for what they do."""

    def __init__(self, module: ir.Module):
        self.module = module
        self.target = Target.of(module)
        # the syscall instruction itself, not libc's wrapper: the module calls nothing
        # outside itself
        self._syscall = ir.InlineAsm(ir.FunctionType(I64, [I64] * 5), "syscall",
                                     "={rax},{rax},{rdi},{rsi},{rdx},{r10},~{rcx},~{r11},"
                                     "~{memory}", side_effect=True)

    def syscall(self, b, number: int, *args):
        """System call `number` with up to four arguments (pointers or i64)."""
        values = [i64(number)] + [
            b.ptrtoint(arg, I64) if isinstance(arg.type, ir.PointerType) else arg
            for arg in args]
        values += [i64(0)] * (5 - len(values))
        return b.call(self._syscall, values)

    def spin_while(self, b, address, waiting, name: str) -> None:
        """Pause until `waiting(value)` is false for the i64 at `address` (acquire
        loads); the builder goes on after the loop."""
        with while_loop(b, lambda: waiting(b.load_atomic(address, "acquire", 8)), name):
            self.target.pause(b)

    def cycles(self, b):
        """The CPU's cycle counter (rdtsc on x86)."""
        return intrinsic(b, "readcyclecounter", [], I64)

    def worker(self) -> None:
        """kiln_pool_worker(pool, index): wait for a new generation, join the job if
        it is still open, leave, forever."""
        fn, b = define(self.module, "kiln_pool_worker",
                       ir.FunctionType(VOID, [I64.as_pointer(), I64]), ("pool", "index"))
        pool, index = fn.args
        generation = b.bitcast(pool, I32.as_pointer())
        first_seen = b.load_atomic(generation, "acquire", 8)
        entry = b.block
        loop, wait, idle, spin, later, yield_, sleep, got, enter, call, leave = (
            fn.append_basic_block(name) for name in (
                "loop", "wait", "idle", "spin", "later", "yield", "sleep", "got", "enter",
                "call", "leave"))
        b.branch(loop)

        b.position_at_end(loop)
        seen = b.phi(I32, "seen")
        seen.add_incoming(first_seen, entry)
        started = self.cycles(b)
        b.branch(wait)

        b.position_at_end(wait)
        current = b.load_atomic(generation, "acquire", 8)
        b.cbranch(b.icmp_unsigned("!=", current, seen), got, idle)

        b.position_at_end(idle)
        elapsed = b.sub(self.cycles(b), started)
        b.cbranch(b.icmp_unsigned("<", elapsed, i64(SPIN_CYCLES)), spin, later)
        b.position_at_end(spin)
        self.target.pause(b)
        b.branch(wait)
        b.position_at_end(later)
        b.cbranch(b.icmp_unsigned("<", elapsed, i64(YIELD_CYCLES)), yield_, sleep)
        b.position_at_end(yield_)
        self.syscall(b, SYS_SCHED_YIELD)
        b.branch(wait)
        b.position_at_end(sleep)  # the kernel sleeps only if the generation is still seen
        sleepers = at(b, pool, SLEEPERS)
        b.atomic_rmw("add", sleepers, i64(1), "seq_cst")
        self.syscall(b, SYS_FUTEX, generation, i64(FUTEX_WAIT_PRIVATE),
                     b.zext(seen, I64), i64(0))
        b.atomic_rmw("sub", sleepers, i64(1), "seq_cst")
        b.branch(wait)

        b.position_at_end(got)  # joining: counted in ACTIVE before CLOSED is read
        active = at(b, pool, ACTIVE)
        b.atomic_rmw("add", active, i64(1), "seq_cst")
        closed = b.load_atomic(at(b, pool, CLOSED), "seq_cst", 8)
        b.cbranch(b.icmp_unsigned("==", closed, i64(0)), enter, leave)
        b.position_at_end(enter)
        task, context, threads = (b.load_atomic(at(b, pool, JOB + i), "acquire", 8)
                                  for i in range(3))
        b.cbranch(b.icmp_signed("<", index, threads), call, leave)
        b.position_at_end(call)
        b.call(b.inttoptr(task, TASK.as_pointer()), [b.inttoptr(context, I8P), index, threads])
        b.branch(leave)
        b.position_at_end(leave)
        b.atomic_rmw("sub", active, i64(1), "release")
        seen.add_incoming(current, leave)
        b.branch(loop)

    def run(self) -> None:
        """kiln_pool_run(pool, task, context, threads): publish the job, wake sleepers,
        run it as worker 0, close it, wait for the workers inside to leave."""
        fn, b = define(self.module, "kiln_pool_run", ir.FunctionType(
            VOID, [I64.as_pointer(), TASK.as_pointer(), I8P, I64]),
            ("pool", "task", "context", "threads"))
        pool, task, context, threads = fn.args
        alone, claim, publish, wake, work = (
            fn.append_basic_block(name) for name in (
                "alone", "claim", "publish", "wake", "work"))
        zero, one = i64(0), i64(1)
        b.cbranch(b.icmp_signed(">", threads, one), claim, alone)
        b.position_at_end(alone)
        b.call(task, [context, zero, one])
        b.ret_void()

        b.position_at_end(claim)
        busy = at(b, pool, BUSY)
        claimed = b.extract_value(b.cmpxchg(busy, zero, one, "acquire", "monotonic"), 1)
        b.cbranch(claimed, publish, alone)

        b.position_at_end(publish)
        for i, value in enumerate((b.ptrtoint(task, I64), b.ptrtoint(context, I64), threads)):
            b.store_atomic(value, at(b, pool, JOB + i), "release", 8)
        b.store_atomic(zero, at(b, pool, CLOSED), "seq_cst", 8)
        generation = b.bitcast(pool, I32.as_pointer())
        b.atomic_rmw("add", generation, i32(1), "seq_cst")
        sleeping = b.load_atomic(at(b, pool, SLEEPERS), "seq_cst", 8)
        b.cbranch(b.icmp_unsigned("!=", sleeping, zero), wake, work)
        b.position_at_end(wake)
        self.syscall(b, SYS_FUTEX, generation, i64(FUTEX_WAKE_PRIVATE),
                     i64(2 ** 31 - 1))
        b.branch(work)

        b.position_at_end(work)
        b.call(task, [context, zero, threads])
        b.atomic_rmw("xchg", at(b, pool, CLOSED), one, "seq_cst")
        self.spin_while(b, at(b, pool, ACTIVE),
                        lambda inside: b.icmp_unsigned("!=", inside, zero), "drain")
        b.store_atomic(zero, busy, "release", 8)
        b.ret_void()

    def items(self) -> None:
        """kiln_pool_items(job, worker, threads), a task: claim records of the first
        list one by one and run its function on each, wait until all of them are done,
        then the same for the second list."""
        fn, b = define(self.module, "kiln_pool_items", TASK, ("job", "worker", "threads"))
        job, worker = b.bitcast(fn.args[0], I64.as_pointer()), fn.args[1]
        for part, (claim, finished) in ((FIRST, (CLAIM_FIRST, DONE_FIRST)),
                                        (THEN, (CLAIM_THEN, None))):
            function, records, count, stride = (
                b.load(at(b, job, part + i)) for i in range(4))
            with claim_loop(b, at(b, job, claim), count, f"{part}.claim") as index:
                record = at(b, b.inttoptr(records, I8P), b.mul(index, stride))
                b.call(b.inttoptr(function, ITEM.as_pointer()), [record, worker])
                if finished is not None:
                    b.atomic_rmw("add", at(b, job, finished), i64(1), "release")
            if finished is not None:  # the second list reads what the first wrote
                self.spin_while(b, at(b, job, finished),
                                lambda done, count=count: b.icmp_signed("<", done, count),
                                f"{part}.wait")
        b.ret_void()


@functools.cache
def _functions() -> dict[str, int]:
    """Addresses of the pool's native functions: kiln_pool_items everywhere, the worker
    and kiln_pool_run where the pool is available."""
    from runtime.llvm.jit import host_jit
    with_pool = available()

    def build(module) -> None:
        emitter = _Emitter(module)
        emitter.items()
        if with_pool:
            emitter.worker()
            emitter.run()
    return host_jit().load_spec("kiln_pool", repr(("kiln_pool", with_pool)), build)


def run_address() -> int:
    """The address of kiln_pool_run(pool, task, context, threads), for native code that
    runs tasks on a pool itself (with the pool that `current_cell` holds)."""
    return _functions()["kiln_pool_run"]


def items_address() -> int:
    """The address of kiln_pool_items(job, worker, threads), the task that runs an
    Items job (its `address`), for native code that runs one itself."""
    return _functions()["kiln_pool_items"]


def current_cell() -> int:
    """The address of a word holding the address of the process's pool (the `address`
    of the latest `pool()`), 0 while there is none: in a child after fork until a pool
    is made there. Native code that keeps this address reads the pool at each run and
    runs alone on 0."""
    return ctypes.addressof(_current)


class NativePool:
    """`size` - 1 worker threads (the caller is the size-th) waiting in native code."""

    def __init__(self, size: int):
        addresses = _functions()
        self.size = size
        # never freed: the workers wait on these words in native code, without the GIL,
        # and daemon threads go on while the interpreter exits
        raw = calloc_forever(POOL_SLOTS * 8 + 64)
        self.address = raw + (-raw % 64)
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64)(addresses["kiln_pool_run"])
        worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            addresses["kiln_pool_worker"])
        self._workers = [threading.Thread(target=worker, args=(self.address, index),
                                          daemon=True, name=f"kiln-native-{index}")
                         for index in range(1, size)]
        for thread in self._workers:
            thread.start()

    def run(self, task: int, context: int, threads: int) -> None:
        """task(context, worker, threads) on up to min(threads, size) threads."""
        self._run(self.address, task, context, min(threads, self.size))


class Items:
    """A prepared run_items job: each list is (function address, records address,
    count, stride in bytes), fixed; the records' contents may change between runs. One
    run at a time."""

    def __init__(self, first: tuple | None, then: tuple):
        self.words = np.array([*(first or (0, 0, 0, 0)), *then] + [0] * (ITEMS_SLOTS - 8),
                              np.int64)
        self.address = address(self.words)

    def run(self, threads: int) -> None:
        """function(record, worker) for every record of the first list, then, once they
        are all done, for every record of the second, on up to `threads` threads of the
        pool (on this thread alone, in one native call, when threads is 1 or the pool is
        not available); each record is run once, by whichever thread claims it."""
        self.words[CLAIM_FIRST:] = 0  # (the counters; zero in a new Items)
        if threads <= 1 or not available():
            _alone()(self.address, 0, 1)
        else:
            pool(threads).run(_functions()["kiln_pool_items"], self.address, threads)


@functools.cache
def _alone():
    """kiln_pool_items as a ctypes function, for runs on the calling thread."""
    return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        _functions()["kiln_pool_items"])


def run_items(first: tuple | None, then: tuple, threads: int) -> None:
    """Items(first, then).run(threads)."""
    Items(first, then).run(threads)


_pool: NativePool | None = None
_retired: list[NativePool] = []  # smaller pools: their sleeping workers still read them
_pool_lock = threading.Lock()
_current = ctypes.c_int64(0)  # _pool's address, for native code (see current_cell)


def pool(threads: int) -> NativePool:
    """The process's pool, with at least `threads` threads (made again, larger, if an
    earlier one was smaller: the old workers stay asleep)."""
    global _pool
    found = _pool
    if found is not None and found.size >= threads:
        return found
    with _pool_lock:
        if _pool is None or _pool.size < threads:
            if _pool is not None:
                _retired.append(_pool)
            _pool = NativePool(threads)
            _current.value = _pool.address
        return _pool


def _forget_after_fork() -> None:
    global _pool
    _pool = None  # the child has none of the parent's worker threads
    _current.value = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
