"""The first call of a compiled function in a fresh process, as a new user meets it: the
time from calling it (after `import eager`, or `import torch`, and making the inputs) to
its result, everything it imports, traces, compiles and runs on the way included.

    python -m benchmarks.first_call kiln six_ops   # prints JSON: {"seconds": ...}
    python -m benchmarks.first_call kiln gpt_step

six_ops          compile_overhead's six elementwise ops on 8 floats
gpt_step         examples.char_transformer (2 layers, 4 heads, d_model 64, context 32,
                 batch 16) compiled, forward and loss, then backward (the model's part
                 through its compiled backward graph): the first training step's
                 forward+backward; kernels that background workers compile meanwhile
                 run interpreted (runtime/llvm/compile_service.py)
gpt_step_native  the same, until every kernel runs natively: the first step, then the
                 waits for the workers with a step after each until a step hands them
                 nothing new (benchmarks.harness.settle)

`fresh_process(...)` runs it with $KILN_CACHE_DIR set: an empty directory times the
first call with nothing compiled, one a previous run filled the first call served by
the disk cache.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
D_MODEL, HEADS, LAYERS, CONTEXT, BATCH = 64, 4, 2, 32, 16


def six_ops(lib, x, y):
    return (x * y + 1.0).tanh() * x - y.abs()


def _six_ops(lib, compiled) -> float:
    rng = np.random.default_rng(0)
    x, y = (lib.tensor(rng.standard_normal(8, dtype=np.float32)) for _ in range(2))
    fn = compiled(six_ops)
    start = time.perf_counter()
    fn(lib, x, y)
    return time.perf_counter() - start


def _gpt_step(until_native: bool = False) -> float:
    import eager
    from examples.char_transformer import define, load_text
    _, chars, text = load_text()
    eager.manual_seed(0)
    model = define(eager)(len(chars), D_MODEL, HEADS, LAYERS, CONTEXT)
    starts = np.random.default_rng(0).integers(0, len(text) - CONTEXT - 1, BATCH)
    x = eager.tensor(np.stack([text[s:s + CONTEXT] for s in starts]))
    y = eager.tensor(np.stack([text[s + 1:s + CONTEXT + 1] for s in starts]))
    compiled = eager.compile(model)

    def step() -> None:
        logits = compiled(x)
        loss = eager.nn.functional.cross_entropy(logits.reshape(-1, len(chars)),
                                                 y.reshape(-1))
        loss.backward()
    start = time.perf_counter()
    step()
    if until_native:  # steps go on (interpreted) while the workers compile
        from benchmarks.harness import settle
        settle(step)
    return time.perf_counter() - start


def measure(library: str, case: str) -> float:
    """Seconds of `case`'s first call; after it, this process waits for the kernels
    still compiling in kiln's background workers (they land in the disk cache for the
    next process, and do not compete with it for the CPU)."""
    if case in ("gpt_step", "gpt_step_native"):
        seconds = _gpt_step(until_native=case == "gpt_step_native")
    elif library == "torch":
        import torch
        return _six_ops(torch, torch.compile)
    else:
        import eager
        seconds = _six_ops(eager, eager.compile)
    from runtime.llvm.compile_service import wait_for_kernels
    wait_for_kernels()
    return seconds


def fresh_process(library: str, case: str, cache_dir: str) -> float:
    """Seconds of the first call in a new process whose kernel cache is `cache_dir`
    (bytecode cached: see fresh_env; the first process compiles kiln's sources, later
    ones time the first call a user meets)."""
    env = fresh_env(KILN_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-m", "benchmarks.first_call", library, case],
                         env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def fresh_env(**extra) -> dict:
    """The environment of a fresh benchmark process: the repository on PYTHONPATH, and
    bytecode cached in a folder of this process's (whatever PYTHONDONTWRITEBYTECODE
    says), as an installed package has it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        PYTHONPYCACHEPREFIX=_bytecode_folder(), **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


@functools.cache
def _bytecode_folder() -> str:
    folder = tempfile.mkdtemp(prefix="kiln-first-call-bytecode-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


if __name__ == "__main__":
    print(json.dumps({"seconds": measure(sys.argv[1], sys.argv[2])}))
