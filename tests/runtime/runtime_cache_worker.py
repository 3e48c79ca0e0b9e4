"""Run by the cache tests in fresh processes (KILN_CACHE_DIR comes from the environment);
the tests run it with `start` and `finish`.

    runtime_cache_worker.py load NAME [--no-llvm]   compile or fetch NAME's add-one
        kernel, check it on an array, print the cache counters and the warnings given as
        JSON; --no-llvm makes any LLVM optimisation raise, to show a disk hit needs none
    runtime_cache_worker.py write KEY TIMES         write one fixed entry TIMES times
    runtime_cache_worker.py mutations SEED          write each of elf_mutations' damaged
        objects of the relocations kernel (its targeted mutations, then SEED's random
        flips) as the kernel's entry, hashed again, load the kernel with a fresh engine
        and run it where it should be right; print {case: outcome} as JSON (each case
        is named on stderr before it is loaded: a crash's last line says which)

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

from runtime.llvm import cache
from runtime.llvm.jit import HostJit
from elf_mutations import KERNEL, MUTATIONS, random_flips
from runtime_kernels import (ADD_ONE, add_one_module, object_code, relocations_kernel_results,
                             relocations_module)

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


RANDOM_FLIPS = {"headers": 24, "relocations": 8}  # (ELF, section headers, symbols)


def mutations(seed: int) -> None:
    text = relocations_module(KERNEL)
    jit = HostJit()
    jit.load(text)
    key = jit.cache_key(text)
    path = jit.cache.path(key)
    good = cache.decode(key, path.read_bytes())
    cases = [(label, mutation.mutate(good.object_code), True)
             for label, mutation in MUTATIONS.items()]
    cases += [(label, spoilt, True) for label, spoilt in
              random_flips(good.object_code, seed, RANDOM_FLIPS["headers"], "headers")]
    cases += [(label, spoilt, False) for label, spoilt in
              random_flips(good.object_code, seed, RANDOM_FLIPS["relocations"], "relocations")]
    limit_memory()
    outcomes = {}
    for label, spoilt, run_if_loaded in cases:
        print(label, file=sys.stderr, flush=True)
        path.write_bytes(cache.encode(key, cache.Entry(good.functions, spoilt)))
        outcomes[label] = load_mutated(text, key, good, run_if_loaded)
    print(json.dumps(outcomes))


def load_mutated(text: str, key: str, good: cache.Entry, run_if_loaded: bool) -> dict:
    """How a fresh engine loads the kernel of `text` from its damaged entry: 'rebuilt'
    (compiled again, the entry replaced by `good`'s object code) or 'loaded'; whether
    MCJIT was made; what the kernel computes (unless it was loaded and not
    `run_if_loaded`)."""
    fresh = HostJit()
    addresses = fresh.load(text)
    stats = fresh.cache.stats
    rebuilt = (stats.rebuilt_corrupt, stats.misses, stats.disk_hits) == (1, 1, 0)
    replaced = cache.decode(key, fresh.cache.path(key).read_bytes()).object_code == \
        good.object_code
    return {"outcome": "rebuilt" if rebuilt and replaced else
            "loaded" if stats.disk_hits == 1 else f"neither: {stats.as_dict()}",
            "engine": "engine" in fresh.__dict__,
            "results": relocations_kernel_results(addresses, KERNEL)
            if rebuilt or run_if_loaded else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["load", "write", "mutations"])
    parser.add_argument("name")
    parser.add_argument("times", nargs="?", type=int, default=1)
    parser.add_argument("--no-llvm", action="store_true")
    args = parser.parse_args()
    if args.mode == "load":
        load(args.name, args.no_llvm)
    elif args.mode == "write":
        write(args.name, args.times)
    else:
        mutations(int(args.name))


if __name__ == "__main__":
    main()
