"""runtime/host_memory.py: freed blocks stay with malloc, so fresh kernel outputs reuse
pages instead of faulting new ones in; checked in fresh processes by counting page
faults (not time)."""
import os
import subprocess
import sys

import pytest

CHURN = """
import resource, sys
import numpy as np
from runtime.host_memory import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
def churn():  # a step's outputs: sixteen 1 MiB buffers written, then freed
    arrays = [np.ones(128 * 1024) for _ in range(16)]
    del arrays
churn()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    churn()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _churn(mode: str, **env) -> tuple[str, int]:
    """(whether the thresholds were set, page faults over 20 churns) in a fresh process
    whose environment names no malloc setting besides `env`."""
    clean = {k: v for k, v in os.environ.items() if "MALLOC" not in k and k != "GLIBC_TUNABLES"}
    run = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True,
                         check=True, env={**clean, "PYTHONPATH": os.getcwd(), **env})
    applied, faults = run.stdout.split()
    return applied, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux") or
                    os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc's malloc")
def test_freed_buffers_are_reused_without_faulting_pages_in_again():
    assert _churn("default")[1] > 20 * 16  # glibc's default gives the pages back each time
    assert _churn("keep") == ("True", 0)


def test_a_malloc_setting_of_the_user_s_is_left_alone():
    assert _churn("keep", GLIBC_TUNABLES="glibc.malloc.trim_threshold=0")[0] == "False"
    assert _churn("keep", MALLOC_TRIM_THRESHOLD_="0")[0] == "False"
