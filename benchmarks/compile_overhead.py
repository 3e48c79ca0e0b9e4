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

Memory (the note under the table): RSS growth per distinct kernel compiled, in fresh
processes (benchmarks/compile_memory.py), over COMPILES distinct kernels (QUICK_COMPILES
with --quick).
"""
from __future__ import annotations

import time

import numpy as np

from benchmarks.harness import Case, Impl
from benchmarks.impls import (KILN, KILN_COMPILED, TORCH, TORCH_COMPILED, every_contender,
                              float64, kiln_tensors, torch_tensors)

COMPILES, QUICK_COMPILES = 1000, 100


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
    ]


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
    from benchmarks import compile_memory
    return compile_memory.notes(QUICK_COMPILES if quick else COMPILES)
