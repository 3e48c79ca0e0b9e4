"""How the C library's allocator keeps memory that compiled graphs free.

A training step allocates and frees megabytes of kernel outputs (128 KiB to 512 KiB each
in the char transformer's step). glibc's malloc maps blocks from 128 KiB on with mmap
and raises that threshold only as it sees them freed, and it gives the top of its heap
back to the system once more than twice the threshold is free there: so each step
faulted its fresh pages in again, a page at a time (the char transformer's whole step:
~1.2 ms of ~6.5, its kernels' outputs written on first touch). keep_freed_memory() sets
both thresholds where glibc's own rule would end up for large blocks (mmap from 32 MiB,
its ceiling on 64-bit; trim beyond twice that), once, for the process. It leaves them
alone where the user chose them (GLIBC_TUNABLES or MALLOC_*_ variables) and where the C
library has no mallopt.
"""
from __future__ import annotations

import ctypes
import functools
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD


def _user_chose() -> bool:
    return "malloc" in os.environ.get("GLIBC_TUNABLES", "") or any(
        name in os.environ for name in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                                        "MALLOC_TOP_PAD_"))


@functools.cache
def keep_freed_memory() -> bool:
    """Set malloc's mmap and trim thresholds (see the module docstring); whether they
    were set."""
    if _user_chose():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and \
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
