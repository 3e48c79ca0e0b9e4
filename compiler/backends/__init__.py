"""Backends turn a captured Graph into a callable `run(list[Tensor]) -> list[Tensor]`.

"eager" runs the graph through the reference interpreter. "native" runs the
optimisation passes first, then the fused nodes as generated machine code (native/) and
the rest through the interpreter; `explain()` says which ran how. A graph over CUDA
tensors goes from "native" to the CUDA backend (cuda/run.py): its fused nodes run as
CUDA kernels. The inputs of one graph are on one device.
"""
from __future__ import annotations

import time

from compiler import interpreter
from ir.graph import Graph


def graph_device(graph: Graph) -> str:
    """The device of a graph's inputs ("cpu" when it has none); a RuntimeError naming
    the devices when they are on several."""
    devices = sorted({v.type.device for v in graph.inputs})
    if len(devices) > 1:
        raise RuntimeError(f"kiln.compile: the inputs of one graph are on several devices "
                           f"({', '.join(devices)}); move them to one device")
    return devices[0] if devices else "cpu"


class EagerBackend:
    name = "eager"
    note = "runs captured graphs through the reference interpreter (eager ops)"

    def compile(self, graph: Graph):
        graph_device(graph)
        return interpreter.prepare(graph)


class NativeBackend(EagerBackend):
    name = "native"
    note = ("optimises graphs (decompositions, simplification, fusion) and runs fused "
            "elementwise, row and GEMM kernels as LLVM-generated machine code; other nodes "
            "run through the reference interpreter")

    def compile(self, graph: Graph):
        from compiler.backends import native
        from compiler.passes import optimize
        if graph_device(graph).startswith("cuda"):  # CUDA tensors: CUDA kernels
            from compiler.backends.cuda.run import CudaBackend
            return CudaBackend().compile(graph)
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
