"""LLVM's default optimisation pipeline, run so that it frees what it builds.

llvmlite 0.50's ModulePassManager never frees itself: `ObjectRef._dispose` (which does
nothing) comes before `NewPassManager._dispose` in its method order, so the pass manager
and the state its passes built (GVN's and Reassociate's tables) stayed in memory, about
300 KB per kernel compiled at O3. `run_pipeline` frees it after each run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import llvmlite.binding as llvm


def run_pipeline(module: llvm.ModuleRef, machine: llvm.TargetMachine, speed_level: int
                 ) -> None:
    """LLVM's default optimisation pipeline at `speed_level` on `module`, for `machine`;
    its pass manager is freed before this returns."""
    import llvmlite.binding as llvm  # here: importing this module loads no LLVM
    from llvmlite.binding.newpassmanagers import NewPassManager
    tuning = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    builder = llvm.create_pass_builder(machine, tuning)
    passes = builder.getModulePassManager()
    try:
        passes.run(module, builder)
    finally:
        NewPassManager._dispose(passes)
        passes.detach()
