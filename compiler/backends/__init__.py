"""Backends turn a captured Graph into a callable `run(list[Tensor]) -> list[Tensor]`.

"eager" runs the graph through the reference interpreter. "native" hands each graph to
its device's backend (DEVICE_BACKENDS): the CPU's (native/) and CUDA's (cuda/run.py)
are siblings that run the optimisation passes with their own `emits`, then the fused
nodes as their kernels (read by backends/fused.py and backends/gemm_plan.py, which both
share) and the rest through the interpreter; `explain()` says which ran how. A node no
kernel generator takes is CannotLower (runtime/layout.py). The inputs of one graph are
on one device.
"""
from __future__ import annotations

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
        device = graph_device(graph).split(":")[0]
        if device not in DEVICE_BACKENDS:
            raise RuntimeError(f"kiln.compile: no backend compiles graphs on {device} "
                               f"(there are {sorted(DEVICE_BACKENDS)})")
        return DEVICE_BACKENDS[device]().compile(graph)


def _cpu():
    from compiler.backends.native import CpuBackend
    return CpuBackend()


def _cuda():
    from compiler.backends.cuda.run import CudaBackend
    return CudaBackend()


DEVICE_BACKENDS = {"cpu": _cpu, "cuda": _cuda}
"""The backend of each device's graphs (imported with the first graph on the device)."""

_BACKENDS = {"eager": EagerBackend, "native": NativeBackend}


def get_backend(name: str):
    if name not in _BACKENDS:
        raise ValueError(f"unknown compile backend {name!r}; choose one of {sorted(_BACKENDS)}")
    return _BACKENDS[name]()
