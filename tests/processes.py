"""Process states for the tests of code that must leave no process behind."""
import os

import pytest

reads_proc = pytest.mark.skipif(not os.path.isdir("/proc"),
                                reason="reads process states from /proc (Linux)")


def running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (an orphan that exited may stay a
    zombie where the init process of a container does not reap it). Reads /proc."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
