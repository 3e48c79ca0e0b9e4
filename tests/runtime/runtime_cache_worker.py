"""Run by the cache tests in fresh processes (KILN_CACHE_DIR comes from the environment);
the tests run it with `start` and `finish`.

    runtime_cache_worker.py load NAME [--no-llvm]   compile or fetch NAME's add-one
        kernel, check it on an array, print the cache counters and the warnings given as
        JSON; --no-llvm makes any LLVM optimisation raise, to show a disk hit needs none
    runtime_cache_worker.py write KEY TIMES         write one fixed entry TIMES times

A load may take at most 1 GiB more memory than the process holds when it starts: a cache
that reads an endless file (an entry that is /dev/zero) then fails with MemoryError
instead of filling the machine's memory.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import llvmlite.binding as llvm

from runtime import cache
from runtime.jit import HostJit
from runtime_kernels import ADD_ONE, add_one_module, object_code

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[2]
READ_ALLOWANCE = 1 << 30
HANG_GUARD_SECONDS = 60  # a load takes about a second; this only stops a hang (a FIFO entry)


def start(*args: str, cache_dir: Path) -> subprocess.Popen:
    """This script in a fresh process with `cache_dir` as its cache directory."""
    env = dict(os.environ, KILN_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> dict:
    """What a worker printed; AssertionError if it failed, or if it was still running after
    HANG_GUARD_SECONDS (it is killed then)."""
    try:
        out, err = process.communicate(timeout=HANG_GUARD_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"the worker hung and was killed after {HANG_GUARD_SECONDS} s\n"
                             f"{err}")
    assert process.returncode == 0, f"the worker exited with {process.returncode}\n{err}"
    return json.loads(out)


def refuse_to_optimise(*args, **kwargs):
    raise AssertionError("LLVM optimisation ran on what should have been a cache hit")


def limit_memory() -> None:
    with open("/proc/self/statm") as f:
        held = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (held + READ_ALLOWANCE, held + READ_ALLOWANCE))


def load(name: str, no_llvm: bool) -> None:
    if no_llvm:
        llvm.create_pass_builder = refuse_to_optimise
    jit = HostJit()
    limit_memory()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        address = jit.load(add_one_module(jit, name), [name])[name]
    x = np.zeros(64, np.float32)
    ADD_ONE(address)(x.ctypes.data, 8, 40)
    assert x.sum() == 32 and x[8:40].min() == 1, "the kernel did not add one to x[8:40]"
    warned = [str(warning.message) for warning in caught]
    print(json.dumps(jit.cache.stats.as_dict() | {"warnings": warned}))


def write(key: str, times: int) -> None:
    jit = HostJit()
    fixed = cache.Entry(("fixed",), object_code(jit, add_one_module(jit, "fixed")))
    for _ in range(times):
        jit.cache.write(key, fixed)
    print(json.dumps(jit.cache.stats.as_dict()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["load", "write"])
    parser.add_argument("name")
    parser.add_argument("times", nargs="?", type=int, default=1)
    parser.add_argument("--no-llvm", action="store_true")
    args = parser.parse_args()
    if args.mode == "load":
        load(args.name, args.no_llvm)
    else:
        write(args.name, args.times)


if __name__ == "__main__":
    main()
