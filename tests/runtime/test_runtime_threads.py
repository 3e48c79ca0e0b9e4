"""The thread pool: how many threads, how range(n) is split, errors, nesting, concurrent
callers, and a JIT-compiled kernel run on two threads at once."""
import os
import threading

import numpy as np
import pytest

from runtime import threads
from runtime.jit import host_jit
from runtime_kernels import ADD_ONE, add_one_module, unique_name


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))
    monkeypatch.setenv("KILN_NUM_THREADS", "4")


def recorder():
    """A task that records the chunks it ran and the threads that ran them."""
    seen, lock = [], threading.Lock()

    def task(start, end):
        with lock:
            seen.append((start, end, threading.get_ident()))
    return task, seen


def covered(chunks, n):
    counts = np.zeros(n, int)
    for start, end, *_ in chunks:
        counts[start:end] += 1
    return counts


def test_num_threads_comes_from_the_environment_or_the_cores(monkeypatch):
    assert threads.num_threads() == 4
    monkeypatch.delenv("KILN_NUM_THREADS")
    assert threads.num_threads() == len(os.sched_getaffinity(0))
    for bad in ("0", "-2", "many"):
        monkeypatch.setenv("KILN_NUM_THREADS", bad)
        with pytest.raises(ValueError, match="KILN_NUM_THREADS must be a positive integer"):
            threads.num_threads()


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 100, 1001])
@pytest.mark.parametrize("parts", [1, 2, 3, 4])
@pytest.mark.parametrize("grain", [1, 3, 64])
def test_chunks_cover_the_range_once_and_respect_the_grain(n, parts, grain):
    pieces = threads.chunks(n, parts, grain)
    assert np.all(covered(pieces, n) == 1)
    assert all(a < b for a, b in pieces) and pieces == sorted(pieces)
    assert len(pieces) <= parts
    if len(pieces) > 1:
        assert min(b - a for a, b in pieces) >= grain
        assert max(b - a for a, b in pieces) - min(b - a for a, b in pieces) <= 1


def test_parallel_for_runs_each_chunk_once_on_the_caller_and_the_pool():
    task, seen = recorder()
    threads.parallel_for(1000, task, grain=10)
    assert len(seen) == 4 and np.all(covered(seen, 1000) == 1)
    assert threading.get_ident() in {ident for *_, ident in seen}
    task, seen = recorder()
    threads.parallel_for(25, task, grain=10)
    assert sorted(chunk[:2] for chunk in seen) == [(0, 12), (12, 25)]
    task, seen = recorder()
    threads.parallel_for(0, task)
    assert seen == []


def test_chunks_run_at_the_same_time(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    meet = threading.Barrier(2, timeout=10)  # one thread alone would time out
    threads.parallel_for(2, lambda start, end: meet.wait())


def test_the_first_failing_chunk_is_reraised_after_every_chunk_finished():
    finished = []

    def task(start, end):
        if start > 0:
            finished.append(start)
            raise RuntimeError(f"chunk at {start}")
    with pytest.raises(RuntimeError, match="chunk at 25"):
        threads.parallel_for(100, task)
    assert sorted(finished) == [25, 50, 75]
    task, seen = recorder()
    threads.parallel_for(100, task)  # the pool survives a failing task
    assert np.all(covered(seen, 100) == 1)


def test_a_nested_call_runs_inline_without_deadlock():
    inner = []
    lock = threading.Lock()

    def outer(start, end):
        def record(a, b):
            with lock:
                inner.append((start + a, start + b, threading.get_ident()))
        threads.parallel_for(end - start, record)
    runner = threading.Thread(target=threads.parallel_for, args=(400, outer))
    runner.start()
    runner.join(timeout=20)
    assert not runner.is_alive(), "nested parallel_for deadlocked"
    assert len(inner) == 4 and np.all(covered(inner, 400) == 1)


def test_several_python_threads_may_call_at_once():
    results = {}

    def caller(index):
        task, seen = recorder()
        for _ in range(20):
            threads.parallel_for(97 + index, task)
        results[index] = covered(seen, 97 + index)
    callers = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for c in callers:
        c.start()
    for c in callers:
        c.join(timeout=30)
    assert sorted(results) == [0, 1, 2, 3]
    assert all(np.all(counts == 20) for counts in results.values())


def test_a_jit_kernel_split_over_two_threads_covers_the_array_once(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    jit = host_jit()
    name = unique_name()
    kernel = ADD_ONE(jit.load(add_one_module(jit, name), [name])[name])
    x = np.zeros(1 << 22, np.float32)
    for _ in range(3):
        used = set()

        def task(start, end):
            used.add(threading.get_ident())
            kernel(x.ctypes.data, start, end)
        threads.parallel_for(x.size, task, grain=4096)
        assert len(used) == 2 and threading.get_ident() in used
    assert np.all(x == 3)
