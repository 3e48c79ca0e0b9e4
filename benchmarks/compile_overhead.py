"""What compiling costs when the arithmetic is nearly free: six elementwise ops on
8-element tensors.

Cached call: the guard check and replay of a compiled function whose entry already
exists, against running the same six ops eagerly; on 8 elements the kernels' own time
is negligible, so this is the price of the guards and the call.

First call: trace + compile + run of a function called for the first time. kiln gets a
fresh CompiledFunction each round. torch.compile gets `torch._dynamo.reset()` first, so
dynamo traces again, but inductor's code caches stay warm within the process: this is
PyTorch's recompile cost, not the first call of a fresh process, which starts inductor
(~20 s here) and is left out to keep the suite short.

First call in a fresh process (benchmarks/first_call.py): the same six ops, and the
2-layer char transformer's first training step (compiled forward and, since compiled
backward, compiled backward: 33 kernels), each timed inside a new process from the call
to its result, imports included: with an empty kernel cache (everything compiled) and
with the disk cache a previous process filled. torch.compile's fresh-process first call
(it starts inductor, ~20 s here) runs beside the cold six ops outside --quick. Targets
(issue 16): six ops under 60 ms cold and 10 ms warm, the step under 1.5 s cold and
0.3 s warm. Measured 2026-12-01 (2 shared cores, min of 3 fresh processes, trees
alternated, bytecode cached; PYTHONDONTWRITEBYTECODE=1 adds ~40 ms to each), before ->
after spec-keyed warm hits, no importlib.metadata/argparse/GEMM stack on a pointwise
path, GEMM kernels at O1 and packed+pack_b compiled in parallel threads: six ops cold
118 -> 99 ms, warm 72 -> 39 ms; the step cold 4.94 -> 4.39 s, warm 0.92 -> 0.43 s.
Then (same method, min of 9, KILN_NUM_THREADS=1) kernels linked without LLVM
(runtime/llvm/elf_loader.py), the target remembered on disk, no emitter or llvmlite import on
a hit, entries not fsynced: six ops warm 25.5 -> 9.6 ms (42 -> 21 ms where the
checkouts have no bytecode, as with PYTHONDONTWRITEBYTECODE=1), cold unchanged (57 ms;
81 -> 79 ms without bytecode: LLVM's optimise and machine code are ~27 ms of it); the
step warm 0.25 -> 0.23 s, cold unchanged within the noise (~3.5 s when the machine is
quiet: the GEMM's packed variants and pack_b are ~1.7 s of its ~3 s of compiling).
The fresh processes cache bytecode now (first_call.fresh_process), so these figures no
longer depend on PYTHONDONTWRITEBYTECODE: `--quick --threads 1`, 2026-12-01, six ops
cold 58.7 ms and warm 9.05 ms, the step cold 3.02 s and warm 0.21 s. Then (same
command, min of 3, trees alternated) the transformer's products on the direct and
specialised GEMM kernels (no packed variant compiled), pointwise kernels at O2, no IR
for branches known when a kernel is built, faster fusion and tile choice: six ops
unchanged (58.4 -> 58.1 ms cold, 10.1 -> 9.6 ms warm); the step cold 3.07 -> 1.89 s,
warm 226 -> 178 ms. Then kernels compiled by background worker processes while the
first call runs interpreted (runtime/llvm/compile_service.py; same command, shared machine):
six ops cold 59 -> 35 ms, warm 10.0 -> 10.1 ms; the step cold 1.84 s -> 252 ms, warm
176 -> 170 ms. "GPT step, until all native" is the cold step followed by steps and
waits until every kernel runs natively (2.1 s: one niced worker builds the IR and runs
LLVM for all of them, while steps run interpreted).

Memory (the note under the table): RSS growth per distinct kernel compiled, in fresh
processes (benchmarks/compile_memory.py), over COMPILES distinct kernels (not measured
with --quick).
"""
from __future__ import annotations

import tempfile
import time

import numpy as np

from benchmarks import first_call
from benchmarks.harness import Case, Impl
from benchmarks.impls import (KILN, KILN_COMPILED, TORCH, TORCH_COMPILED, every_contender,
                              float64, kiln_tensors, torch_tensors)

COMPILES = 1000


def six_ops(lib, x, y):
    return (x * y + 1.0).tanh() * x - y.abs()


def six_ops_numpy(x, y):
    return np.tanh(x * y + 1.0) * x - np.abs(y)


def cases(quick: bool) -> list[Case]:
    """The sizes are tiny by design, so `quick` changes nothing here; torch.compile is
    left out of --quick by the lineup."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(8, dtype=np.float32) for _ in range(2)]
    return [
        Case("cached call, 6 elementwise ops on 8 elements",
             every_contender(six_ops, None, arrays),
             expected=float64(six_ops_numpy, arrays), reference=(KILN, TORCH)),
        Case("first call (trace + compile + run), same function", [
            Impl(KILN_COMPILED, lambda: _kiln_first_call(arrays),
                 label="kiln compiled, fresh CompiledFunction"),
            Impl(TORCH_COMPILED, lambda: _torch_first_call(arrays),
                 label="torch.compile after dynamo reset (caches warm)"),
        ], unit="", self_timed=True),
        *[Case(f"first call in a fresh process, {cache}", _fresh_impls(warm), unit="",
               self_timed=True)
          for cache, warm in (("empty kernel cache", False), ("warm disk cache", True))],
    ]


_GPT_PROCESSES = "a process a round, each compiling the step's 33 kernels (3-10 s)"


def _fresh_impls(warm: bool) -> list[Impl]:
    """kiln's six ops and GPT step in fresh processes; torch.compile's six ops when cold
    (warm, inductor's own caches would need a run of their own to fill)."""
    impls = [Impl(KILN_COMPILED, lambda: _fresh("six_ops", warm), label="kiln compiled, 6 ops"),
             Impl(KILN_COMPILED, lambda: _fresh("gpt_step", warm),
                  label="kiln compiled, GPT step", full_only=_GPT_PROCESSES)]
    if not warm:  # with the workers' kernels all back (warm, the first step has them)
        impls.append(Impl(KILN_COMPILED, lambda: _fresh("gpt_step_native", warm),
                          label="kiln compiled, GPT step, until all native",
                          full_only=_GPT_PROCESSES))
        impls.append(Impl(TORCH_COMPILED, lambda: _fresh("six_ops", False, library="torch"),
                          label="torch.compile, 6 ops"))
    return impls


def _fresh(case: str, warm: bool, library: str = "kiln"):
    """A round: a new process's first call, its kernel cache empty (a new directory each
    round) or filled by a process run once here."""
    if not warm:
        def cold() -> float:
            with tempfile.TemporaryDirectory(prefix="kiln-first-call-") as directory:
                return first_call.fresh_process(library, case, directory)
        return cold
    warmed = tempfile.TemporaryDirectory(prefix="kiln-first-call-")  # lives with `run`
    first_call.fresh_process(library, case, warmed.name)

    def run() -> float:
        return first_call.fresh_process(library, case, warmed.name)
    run.directory = warmed
    return run


def _kiln_first_call(arrays: list[np.ndarray]):
    import eager
    inputs = kiln_tensors(arrays)

    def run() -> float:
        compiled = eager.compile(six_ops)
        start = time.perf_counter()
        compiled(eager, *inputs)
        return time.perf_counter() - start
    return run


def _torch_first_call(arrays: list[np.ndarray]):
    import torch
    inputs = torch_tensors(arrays)

    def run() -> float:
        torch._dynamo.reset()
        compiled = torch.compile(six_ops)
        start = time.perf_counter()
        compiled(torch, *inputs)
        return time.perf_counter() - start
    return run


def notes(quick: bool) -> str:
    if quick:
        return ("   memory: RSS growth per distinct kernel is measured without --quick "
                f"({COMPILES} compiles in fresh processes)")
    from benchmarks import compile_memory
    return compile_memory.notes(COMPILES)
