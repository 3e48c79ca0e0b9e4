"""The suites `python -m benchmarks` knows, in the order it runs them.

A suite is a module with `cases(quick: bool) -> list[Case]`, registered here by name
with the checks it needs (each returns None or why it cannot run). Adding a suite is one
module and one `register` line, e.g.

    register("gemm", "benchmarks.gemm", "float32 GEMM, square and skinny",
             requires=(contenders.compiler_missing,))

A suite whose needs are missing is listed as skipped with the reason. Only suites
that exist are registered: none is listed here as if it ran before it can.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Suite:
    name: str
    module: str  # imported only when the suite runs
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
        return importlib.import_module(self.module).cases(quick)


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
