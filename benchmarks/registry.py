"""The suites `python -m benchmarks` knows, in the order it runs them.

A suite is a module with `cases(quick: bool) -> list[Case]`, registered here by name
with the checks it needs (each returns None or why it cannot run). A module holding
several suites names each one's function after a colon: "benchmarks.train:mlp_cases".
Adding a suite is one module and one `register` line, e.g.

    register("gemm", "benchmarks.gemm", "float32 GEMM, square and skinny",
             requires=(contenders.compiler_missing,))

A suite whose needs are missing is listed as skipped with the reason. Only suites
that exist are registered: none is listed here as if it ran before it can.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from benchmarks.contenders import mpi_missing


@dataclass(frozen=True)
class Suite:
    name: str
    module: str  # "package.module" or "package.module:function"; imported only when run
    description: str
    requires: tuple[Callable[[], "str | None"], ...] = ()

    def why_skipped(self) -> str | None:
        """None if every requirement is met, else the first missing one's reason."""
        for check in self.requires:
            reason = check()
            if reason:
                return reason
        return None

    def cases(self, quick: bool) -> list:
        module, _, function = self.module.partition(":")
        return getattr(importlib.import_module(module), function or "cases")(quick)

    def notes(self, quick: bool) -> str:
        """Text a suite prints under its table (its module's `notes(quick)`, if any)."""
        module = importlib.import_module(self.module.partition(":")[0])
        return module.notes(quick) if hasattr(module, "notes") else ""


SUITES: dict[str, Suite] = {}


def register(name: str, module: str, description: str,
             requires: tuple[Callable[[], "str | None"], ...] = ()) -> Suite:
    if name in SUITES:
        raise ValueError(f"a benchmark suite named {name!r} is already registered")
    SUITES[name] = Suite(name, module, description, tuple(requires))
    return SUITES[name]


def lookup(names: list[str]) -> list[Suite]:
    """The suites called `names` (all of them when empty), or ValueError naming the
    unknown ones and the known ones."""
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite(s) {', '.join(unknown)}; "
                         f"known: {', '.join(SUITES)}")
    return [SUITES[n] for n in names] if names else list(SUITES.values())


register("eager_overhead", "benchmarks.eager_overhead",
         "per-op cost of tiny eager ops, import time, profiler cost")
register("elementwise", "benchmarks.elementwise", "a GELU chain, add, mul, exp on 4M floats")
register("reductions", "benchmarks.reductions", "sum/mean/amax, softmax, layer_norm")
register("gemm", "benchmarks.gemm",
         "matmul: float32 and float64 squares, awkward shapes, batched, fused linear")
register("conv", "benchmarks.conv", "conv2d 3x3 + relu, a 7x7 stride-2 stem, max_pool2d")
register("mlp_train", "benchmarks.train:mlp_cases", "MLP 784-256-256-10 training, Adam")
register("bf16", "benchmarks.bf16",
         "bfloat16 beside float32: GEMM squares, the MLP step under autocast")
register("transformer_train", "benchmarks.train:transformer_cases",
         "char transformer training, AdamW")
register("models", "benchmarks.models",
         "GPT and ResNet-18 training steps, GPT-2 small forward, each contender in its "
         "own process (full run only)")
register("fusion", "benchmarks.fusion",
         "the passes on the suite's graphs: kernels, bytes moved, intermediate memory")
register("compile_overhead", "benchmarks.compile_overhead",
         "cached compiled calls on tiny inputs; first-call (trace + compile) time")
register("distributed", "benchmarks.distributed",
         "DDP training step over MPI at 1 and 2 ranks (mpiexec)", requires=(mpi_missing,))
