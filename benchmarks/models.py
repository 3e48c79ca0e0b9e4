"""Model-scale workloads, each contender in its own process (benchmarks/model_step.py, a
PyTorch program run by PyTorch or by kiln under the alias): runtimes' thread pools in one
process slow each other, so no two contenders ever share one.

    GPT step          examples/gpt.py, 6 layers, d 384, 6 heads, context 64, batch 8,
                      AdamW: forward, loss, backward, optimizer step
    ResNet-18 step    examples/resnet.py on 3x32x32 images, batch 8, SGD momentum
    GPT-2 small fwd   12 layers, d 768, 12 heads, context 256, under no_grad, batch 1, 8

each at one thread and at every core. kiln compiled compiles the whole step
(eager.compile); torch.compile compiles the model (dynamo would break a step's graph at
backward() anyway). A round is one process: it builds the model from numpy weights (the
same in every process), runs the first step (tracing and compiling included; its loss is
the gate: every contender's must agree), WARMUP more, then STEPS timed steps whose median
is the round's time. Rounds alternate between contenders as everywhere in the suite.
Everything here is left out of --quick: a round takes 5 s to minutes (inductor's first
compile of the ResNet step ~80 s).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

from benchmarks.first_call import ROOT, fresh_env
from benchmarks.harness import Case, Impl
from benchmarks.impls import KILN, KILN_COMPILED, TORCH, TORCH_COMPILED
from runtime.threads import usable_cores

STEPS = 5  # timed steps per process
ROUNDS = 3  # processes per contender, alternating
LOSS_RTOL = 1e-3  # first losses agree (float32 over a whole model, summed differently)
HEAVY = "a process a round, each building the model and compiling it (5 s to minutes)"
WORKLOADS = (
    ("gpt_step", "GPT step, 6 layers, d 384, 6 heads, context 64, batch 8, AdamW"),
    ("resnet_step", "ResNet-18 step, 3x32x32, batch 8, SGD momentum"),
    ("gpt2_forward_b1", "GPT-2 small forward (12 layers, d 768, context 256), batch 1"),
    ("gpt2_forward_b8", "GPT-2 small forward (12 layers, d 768, context 256), batch 8"),
)
CONTENDERS = ((KILN, "kiln", "eager"), (KILN_COMPILED, "kiln", "compiled"),
              (TORCH, "torch", "eager"), (TORCH_COMPILED, "torch", "compiled"))


def thread_counts() -> tuple[int, ...]:
    cores = usable_cores()
    return (1,) if cores == 1 else (1, cores)


def run_process(library: str, case: str, mode: str, threads: int, steps: int = STEPS,
                warmup: int | None = None) -> dict:
    """One process of benchmarks/model_step.py; its JSON result (`warmup` steps before
    the timed ones: model_step's WARMUP where not given)."""
    script = str(ROOT / "benchmarks" / "model_step.py")
    command = [sys.executable, *(("-m", "eager.alias") if library == "kiln" else ()), script,
               case, mode, str(threads), str(steps), *([str(warmup)] if warmup is not None else [])]
    env = fresh_env(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:])} exited with {out.returncode}: "
                           f"{out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _process_impl(contender: str, library: str, case: str, mode: str, threads: int,
                  first_losses: dict) -> Impl:
    def build():
        def round_() -> float:
            result = run_process(library, case, mode, threads)
            loss = result["first_loss"]
            for label, other in first_losses.items():
                if abs(loss - other) > LOSS_RTOL * abs(other):
                    raise AssertionError(f"first loss {loss:.6g}, {label}'s {other:.6g}: "
                                         "not the same model and data")
            first_losses.setdefault(contender, loss)
            return statistics.median(result["times"])
        return round_
    return Impl(contender, build, full_only=HEAVY)


def cases(quick: bool) -> list[Case]:
    made = []
    for case, title in WORKLOADS:
        for threads in thread_counts():
            first_losses: dict = {}  # contender -> its first step's loss, shared by a case
            made.append(Case(
                f"{title}, {threads} thread{'s' if threads > 1 else ''}",
                [_process_impl(c, library, case, mode, threads, first_losses)
                 for c, library, mode in CONTENDERS],
                unit="", self_timed=True, rounds=ROUNDS, reference=(TORCH_COMPILED, TORCH)))
    return made


def notes(quick: bool) -> str:
    return (f"each line: the median step of a process's {STEPS} timed steps, the median over "
            f"{ROUNDS} processes; ratios against torch.compile (or torch eager); "
            "kiln compiled compiles the whole step, torch.compile the model")
