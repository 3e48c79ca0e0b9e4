"""Run by the cache tests in fresh processes (KILN_CACHE_DIR comes from the environment).

    runtime_cache_worker.py load NAME [--no-llvm]   compile or fetch NAME's add-one
        kernel, check it on an array, print the cache counters as JSON; --no-llvm makes
        any LLVM optimisation raise, to show a disk hit needs none
    runtime_cache_worker.py write KEY TIMES         write one fixed entry TIMES times
"""
import argparse
import json

import numpy as np
import llvmlite.binding as llvm

from runtime import cache
from runtime.jit import HostJit
from runtime_kernels import ADD_ONE, add_one_module

FIXED_ENTRY = cache.Entry(("f",), bytes(range(256)) * 64)


def refuse_to_optimise(*args, **kwargs):
    raise AssertionError("LLVM optimisation ran on what should have been a cache hit")


def load(name: str, no_llvm: bool) -> None:
    if no_llvm:
        llvm.create_pass_builder = refuse_to_optimise
    jit = HostJit()
    address = jit.load(add_one_module(jit, name), [name])[name]
    x = np.zeros(64, np.float32)
    ADD_ONE(address)(x.ctypes.data, 8, 40)
    assert x.sum() == 32 and x[8:40].min() == 1
    print(json.dumps(jit.cache.stats.as_dict()))


def write(key: str, times: int) -> None:
    store = cache.KernelCache()
    for _ in range(times):
        store.write(key, FIXED_ENTRY)
    print(json.dumps(store.stats.as_dict()))


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
