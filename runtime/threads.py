"""A persistent thread pool for native kernels, and `parallel_for` over it.

Tasks are meant to be ctypes calls into JIT-compiled code, which release the GIL, so
Python threads run them truly in parallel. Keep each task big (a whole block of a GEMM,
not one micro-tile): each chunk costs a queue round trip and a Python call.

`parallel_for` is safe to call from several Python threads at once. A call made from
inside a task (on a worker or on the calling thread) runs inline as one chunk: a worker
waiting for work queued behind it could deadlock, and the outer call already keeps every
thread busy.
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Callable

Task = Callable[[int, int], None]


def num_threads() -> int:
    """`$KILN_NUM_THREADS`, or the number of cores this process may run on."""
    configured = os.environ.get("KILN_NUM_THREADS")
    if configured:
        try:
            count = int(configured)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(f"KILN_NUM_THREADS must be a positive integer, got {configured!r}")
        return count
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def chunks(n: int, parts: int, grain: int = 1) -> list[tuple[int, int]]:
    """range(n) split into at most `parts` contiguous (start, end) pieces, each at least
    `grain` long (one piece if n < 2 * grain), their lengths differing by at most one."""
    if n <= 0:
        return []
    count = max(1, min(parts, n // max(grain, 1)))
    bounds = [n * i // count for i in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


class _Batch:
    """One parallel_for call: counts its chunks down and keeps each chunk's exception."""

    def __init__(self, task: Task, count: int):
        self.task = task
        self.errors: list[BaseException | None] = [None] * count
        self._left = count
        self._lock = threading.Lock()
        self.done = threading.Event()

    def run(self, index: int, start: int, end: int) -> None:
        _state.in_task = True
        try:
            self.task(start, end)
        except BaseException as error:
            self.errors[index] = error
        finally:
            _state.in_task = False
            with self._lock:
                self._left -= 1
                if self._left == 0:
                    self.done.set()


class _Pool:
    """Daemon worker threads taking (batch, index, start, end) from one queue; grows to
    the size asked for, never shrinks."""

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def ensure(self, size: int) -> None:
        with self._lock:
            while len(self._workers) < size:
                worker = threading.Thread(target=self._work, daemon=True,
                                          name=f"kiln-worker-{len(self._workers)}")
                worker.start()
                self._workers.append(worker)

    def submit(self, batch: _Batch, index: int, start: int, end: int) -> None:
        self._queue.put((batch, index, start, end))

    def _work(self) -> None:
        while True:
            batch, index, start, end = self._queue.get()
            batch.run(index, start, end)


_state = threading.local()
_pool = _Pool()


def _reset_after_fork() -> None:
    global _pool
    _pool = _Pool()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def parallel_for(n: int, task: Task, grain: int = 1) -> None:
    """Run task(start, end) over contiguous chunks covering range(n) exactly once: at most
    num_threads() chunks, each at least `grain` long. The calling thread runs the first
    chunk, the pool the rest. Returns when every chunk is done; if any raised, re-raises
    the exception of the earliest chunk that did."""
    if getattr(_state, "in_task", False):
        if n > 0:
            task(0, n)
        return
    threads = num_threads()
    pieces = chunks(n, threads, grain)
    if len(pieces) <= 1:
        for start, end in pieces:
            task(start, end)
        return
    pool = _pool
    pool.ensure(threads)
    batch = _Batch(task, len(pieces))
    for index, (start, end) in enumerate(pieces[1:], start=1):
        pool.submit(batch, index, start, end)
    batch.run(0, *pieces[0])
    batch.done.wait()
    for error in batch.errors:
        if error is not None:
            raise error
