"""How many threads kiln's kernels use, and how a range is cut among them. The threads
themselves are runtime.pool's."""
from __future__ import annotations

import functools
import os


_chosen: list[int | None] = [None]  # set_num_threads's count, above the environment's


def set_num_threads(count: int) -> None:
    """The threads kernels planned from now on use (PyTorch's torch.set_num_threads).
    A kernel already planned for a layout keeps the count it was planned with: call it
    before the work, as programs do at their start (or set $KILN_NUM_THREADS)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"set_num_threads: the number of threads must be a positive "
                         f"integer, got {count!r}")
    _chosen[0] = count


def num_threads() -> int:
    """set_num_threads's count, else `$KILN_NUM_THREADS`, else the number of cores this
    process may run on (asked once)."""
    if _chosen[0] is not None:
        return _chosen[0]
    configured = os.environ.get("KILN_NUM_THREADS")
    if configured:
        try:
            count = int(configured)
        except ValueError:
            count = 0
        if count < 1:
            raise ValueError(f"KILN_NUM_THREADS must be a positive integer, got {configured!r}")
        return count
    return usable_cores()


@functools.cache
def usable_cores() -> int:
    """The cores this process may run on, asked once: a system call (~0.5 us) that eager's
    large one-ufunc ops would otherwise make at every call."""
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
