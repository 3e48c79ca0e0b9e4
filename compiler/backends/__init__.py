"""Backends turn a captured Graph into a callable `run(list[Tensor]) -> list[Tensor]`.

"eager" runs the graph through the reference interpreter. "native" runs the
optimisation passes first, then the fused nodes as generated machine code (native/) and
the rest through the interpreter; `explain()` says which ran how.
"""
from __future__ import annotations

import time

from compiler import interpreter
from ir.graph import Graph


class EagerBackend:
    name = "eager"
    note = "runs captured graphs through the reference interpreter (eager ops)"

    def compile(self, graph: Graph):
        return interpreter.prepare(graph)


class NativeBackend(EagerBackend):
    name = "native"
    note = ("optimises graphs (decompositions, simplification, fusion) and runs fused "
            "elementwise, row and GEMM kernels as LLVM-generated machine code; other nodes "
            "run through the reference interpreter")

    def compile(self, graph: Graph):
        from compiler.backends import native
        from compiler.passes import optimize
        start = time.perf_counter()
        optimized = optimize(graph, emits=native.emits)
        passes = time.perf_counter() - start
        run = native.prepare(optimized)
        run.source = graph
        run.phase_seconds = {"passes": passes}
        return run


_BACKENDS = {"eager": EagerBackend, "native": NativeBackend}


def get_backend(name: str):
    if name not in _BACKENDS:
        raise ValueError(f"unknown compile backend {name!r}; choose one of {sorted(_BACKENDS)}")
    return _BACKENDS[name]()
