"""How many threads, and how range(n) is split among them."""
import os

import numpy as np
import pytest

from runtime import threads


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kiln-cache"))
    monkeypatch.setenv("KILN_NUM_THREADS", "4")


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


def test_set_num_threads_comes_before_the_environment_and_is_checked(monkeypatch):
    import eager
    monkeypatch.setattr(threads, "_chosen", [None])
    eager.set_num_threads(3)
    assert threads.num_threads() == eager.get_num_threads() == 3
    for bad in (0, -1, 2.0, True, "2"):
        with pytest.raises(ValueError, match="positive integer"):
            eager.set_num_threads(bad)
    assert eager.get_num_threads() == 3


def test_kernels_planned_after_set_num_threads_use_that_many(monkeypatch):
    """A large elementwise op planned after the call runs on one thread, and its
    values are the same."""
    import eager
    from eager.backends.native import pointwise
    from runtime.cpu.launch import PARALLEL_ELEMENTS, _pool_available
    monkeypatch.setattr(threads, "_chosen", [None])
    eager.set_num_threads(1)
    assert not pointwise.threaded()
    x = eager.arange(float(PARALLEL_ELEMENTS * 2 + 3))
    assert np.array_equal((x * 3 + 1).numpy(), np.arange(PARALLEL_ELEMENTS * 2 + 3.0) * 3 + 1)
    eager.set_num_threads(2)
    assert pointwise.threaded() == _pool_available()  # (the pool runs on Linux x86-64)


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
