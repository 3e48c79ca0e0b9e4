"""Cache blocking for the GEMM: a default from this CPU's cache sizes, and a small
autotuner that times a few candidates once and keeps the winner on disk.

`KILN_AUTOTUNE`: "0" always uses the default; unset uses a stored result when there is
one, else the default; "1" also tunes (about a second) when nothing is stored. Results
live in `$KILN_CACHE_DIR/gemm_blocking.json` (runtime.llvm.cache's directory), keyed by the
CPU target (runtime/llvm/target.py: this CPU's, or KILN_CPU's), dtype and tile.
"""
from __future__ import annotations

import functools
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from runtime.cpu.gemm.kernels import Blocking, CompiledGemm

FILE_NAME = "gemm_blocking.json"
_lock = threading.Lock()
_chosen: dict = {}


def cache_sizes() -> tuple[int, int]:
    """(L1 data, L2) bytes per core from sysfs; (32 KiB, 1 MiB) where it cannot be read."""
    sizes = {1: 32 << 10, 2: 1 << 20}
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in root.glob("index*"):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level in sizes and text.endswith("K"):
            sizes[level] = int(text[:-1]) << 10
    return sizes[1], sizes[2]


def default_blocking(kernel: CompiledGemm) -> Blocking:
    """KC so that one packed B micro-panel (KC x NR) is the size of L1 (B streams through
    it while the A rows stay), MC so that the A block (MC x KC) takes about an eighth of
    L2, NC a few thousand columns. Measured best among the candidates on a 48 KiB L1,
    2 MiB L2 AVX-512 core."""
    l1, l2 = cache_sizes()
    t = kernel.tile
    itemsize = kernel.operand_itemsize if t.dot else kernel.dtype.itemsize  # in the panels
    kc = max(64, min(512, l1 // (t.nr * itemsize) // 16 * 16))
    mc = max(t.mr, min(960, l2 // 8 // (kc * itemsize) // t.mr * t.mr))
    nc = t.nr * max(1, 4096 // t.nr)
    return Blocking(mc, kc, nc)


def for_depth(blocking: Blocking, k: int) -> Blocking:
    """`blocking` with K cut into equal blocks (513 = 257 + 256 rather than 384 + 129):
    no thin last block paying a full tile update for little work. Depends only on K, so
    results stay identical however the rest of the problem is split."""
    blocks = -(-k // blocking.kc)
    kc = -(-k // blocks)
    return blocking if kc == blocking.kc else Blocking(blocking.mc, kc, blocking.nc)


def candidates(kernel: CompiledGemm) -> list[Blocking]:
    """The default and its neighbours along KC and MC."""
    base = default_blocking(kernel)
    t = kernel.tile
    options = {base}
    for kc in (base.kc // 2, base.kc * 2):
        for mc in (base.mc, base.mc // 2):
            mc = max(t.mr, mc // t.mr * t.mr)
            options.add(Blocking(mc, max(32, kc), base.nc))
    return sorted(options, key=lambda b: (b.kc, b.mc))


def blocking(kernel: CompiledGemm,
             make_measure: Callable[[CompiledGemm], Callable[[Blocking], float]] | None = None
             ) -> Blocking:
    """The blocking to use for `kernel` (see KILN_AUTOTUNE). `make_measure(kernel)` gives
    a function returning seconds for one run of the tuning problem with a blocking; it is
    called only if tuning runs."""
    mode = os.environ.get("KILN_AUTOTUNE", "")
    if mode == "0":
        return _default(kernel)
    key = _key(kernel)
    with _lock:
        if key in _chosen:
            return _chosen[key]
        stored = _load().get(key)
        if stored is not None:
            chosen = Blocking(**stored)
        elif mode == "1" and make_measure is not None:
            chosen = tune(kernel, make_measure(kernel))
            _store(key, chosen)
        else:
            chosen = default_blocking(kernel)
        _chosen[key] = chosen
        return chosen


def _default(kernel: CompiledGemm) -> Blocking:
    key = ("default", kernel.tile)
    if key not in _chosen:
        _chosen[key] = default_blocking(kernel)
    return _chosen[key]


def tune(kernel: CompiledGemm, measure: Callable[[Blocking], float], rounds: int = 3) -> Blocking:
    """The candidate with the smallest median time over `rounds` alternating rounds."""
    options = candidates(kernel)
    times = {option: [] for option in options}
    for option in options:
        measure(option)  # warm up: pages, caches, the pool's threads
    for _ in range(rounds):
        for option in options:
            times[option].append(measure(option))
    return min(options, key=lambda option: statistics.median(times[option]))


def timer(run: Callable[[Blocking], None]) -> Callable[[Blocking], float]:
    def measure(option: Blocking) -> float:
        start = time.perf_counter()
        run(option)
        return time.perf_counter() - start
    return measure


@functools.cache
def _key(kernel: CompiledGemm) -> str:
    from runtime.llvm.target import selected
    t = kernel.tile
    operands = "/bfloat16-dot" if t.dot else ""
    return f"{selected().name}/{t.dtype}{operands}/{t.mr}x{t.nr}u{t.unroll}"


def _path() -> Path | None:
    """The file of stored choices; None where the kernel cache has no directory."""
    from runtime.llvm.cache import cache_dir
    directory = cache_dir()
    return directory / FILE_NAME if directory is not None else None


def _load() -> dict:
    """The stored choices, read as the kernel cache reads its entries (runtime.llvm.cache_trust:
    a regular file of this user's in a directory only this user can write; a FIFO or
    a link to a device there is not read), or nothing."""
    from runtime.llvm.cache_trust import UntrustedEntry, directory_problem, read_entry_file
    path = _path()
    try:
        if path is None or directory_problem(path.parent) is not None:
            return {}
        data = json.loads(read_entry_file(path))
    except (OSError, ValueError, UntrustedEntry):
        return {}
    return data if isinstance(data, dict) else {}


def _store(key: str, chosen: Blocking) -> None:
    """Merge one result into the JSON file (written atomically; failures are ignored:
    tuning again next time is the only cost)."""
    data = _load()
    data[key] = {"mc": chosen.mc, "kc": chosen.kc, "nc": chosen.nc}
    from runtime.llvm.cache_trust import directory_problem
    path = _path()
    try:
        if path is None or directory_problem(path.parent) is not None:  # (makes it 0700)
            return
        descriptor, temporary = tempfile.mkstemp(prefix=".tmp-blocking-", dir=path.parent)
        with os.fdopen(descriptor, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(temporary, path)
    except OSError:
        pass
