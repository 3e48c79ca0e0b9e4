"""Backends turn a captured Graph into a callable `run(list[Tensor]) -> list[Tensor]`.

"eager" runs the graph through the reference interpreter. "native" will lower through
llvmlite (the native code generation issues); until then it runs as "eager", and
`explain()` says so.
"""
from __future__ import annotations

from compiler import interpreter
from ir.graph import Graph


class EagerBackend:
    name = "eager"
    note = "runs captured graphs through the reference interpreter (eager ops)"

    def compile(self, graph: Graph):
        return interpreter.prepare(graph)


class NativeBackend(EagerBackend):
    name = "native"
    note = ("native code generation is not built yet: graphs run through the reference "
            "interpreter, as the 'eager' backend does")


_BACKENDS = {"eager": EagerBackend, "native": NativeBackend}


def get_backend(name: str):
    if name not in _BACKENDS:
        raise ValueError(f"unknown compile backend {name!r}; choose one of {sorted(_BACKENDS)}")
    return _BACKENDS[name]()
