"""What a compile leaves behind: resident memory (RSS) per distinct kernel compiled.

A fresh process with an empty kernel cache compiles `count` elementwise chains that
differ only in a constant (so each is a new kernel: trace, passes, IR, LLVM, link), and
reads RSS from /proc/self/statm before and after; a second fresh process loads the same
kernels from the disk cache. Twenty compiles first warm up imports, the engine and
allocator pools. The growth divided by `count` is the lasting cost of one compile; it
should stay close to the size of the machine code (a few KB), under 150 KB.

    python -m benchmarks.compile_memory 1000     # one process; prints JSON
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 20


def chain(constant: float):
    """A six-op elementwise function whose kernel differs from any other constant's."""
    def fn(lib, x):
        return (x * constant + 1.0).tanh() * x - constant
    return fn


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def growth_per_compile(count: int) -> float:
    """RSS bytes this process gains per compile of `count` distinct kernels."""
    import eager
    x = eager.tensor(np.ones(8, np.float32))
    for i in range(WARMUP):
        eager.compile(chain(-1.0 - i))(eager, x)
    before = rss_bytes()
    for i in range(count):
        eager.compile(chain(i + 0.5))(eager, x)
    return (rss_bytes() - before) / count


def in_fresh_processes(count: int) -> dict[str, float]:
    """RSS bytes per compile in a fresh process with an empty kernel cache ('compiled')
    and in another that finds every kernel in the disk cache ('from disk cache')."""
    with tempfile.TemporaryDirectory(prefix="kiln-compile-memory-") as directory:
        # compiled in the process itself: what LLVM leaves behind per compile (with
        # background workers, the process that calls only links their object code)
        env = dict(os.environ, KILN_CACHE_DIR=directory, PYTHONPATH=str(ROOT),
                   KILN_COMPILE_WORKERS="0")
        return {label: _run(count, env) for label in ("compiled", "from disk cache")}


def _run(count: int, env: dict) -> float:
    out = subprocess.run([sys.executable, "-m", "benchmarks.compile_memory", str(count)],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["bytes_per_compile"]


def notes(count: int) -> str:
    measured = in_fresh_processes(count)
    parts = [f"{label} {bytes_ / 1024:.0f} KB ({bytes_ * 1000 / 2**20:.0f} MB per 1000)"
             for label, bytes_ in measured.items()]
    return (f"   memory: RSS growth per distinct kernel over {count} compiles in a fresh "
            f"process: {'; '.join(parts)}")


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 1000
    print(json.dumps({"compiles": count, "bytes_per_compile": growth_per_compile(count)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
