"""The CPU's backend: a graph after the passes runs as generated machine code where it
can, the reference interpreter running the rest.

    pointwise.py   fused elementwise and row nodes as kernels of runtime/cpu's generators,
                   launched per layout of their operands (runtime/cpu/launch.py)
    gemm_node.py   fused gemm nodes as kiln's GEMM (runtime/cpu/gemm) with their
                   epilogue, as backends/gemm_plan.py reads their bodies
"""
from __future__ import annotations

import time

from compiler import interpreter
from compiler.backends.fused import emits  # noqa: F401 (the native backend's answer)
from compiler.backends.native.pointwise import PointwiseNode
from runtime.layout import CannotLower
from ir.graph import Graph, Node
from ir.ops import Op
from runtime.host_memory import keep_freed_memory


class CpuBackend:
    """The passes with the CPU kernels' `emits`, then the graph with its fused nodes as
    native kernels."""

    def compile(self, graph: Graph):
        from compiler.passes import optimize
        start = time.perf_counter()
        optimized = optimize(graph, emits=emits)
        passes = time.perf_counter() - start
        run = prepare(optimized)
        run.source = graph
        run.phase_seconds = {"passes": passes}
        return run


def codegen_seconds() -> float:
    """Seconds this thread has spent compiling and loading kernels (all of them: the
    elementwise and row kernels here, GEMM kernels in runtime/cpu/gemm)."""
    from runtime.llvm.jit import load_seconds
    return load_seconds()


def _gemm_node(node: Node):
    """A fused gemm node as a GemmNode (imported with the first one: a graph without
    products does not load the GEMM node planner, ~1.5 ms of a warm first call)."""
    from compiler.backends.native.gemm_node import GemmNode
    return GemmNode(node)


class _Direct:
    """A graph that is one native kernel: called without the interpreter's bookkeeping.
    The kernel's input j is the graph's input order[j]."""

    def __init__(self, kernel, order: list[int]):
        self.kernel, self.order = kernel, order

    def __call__(self, inputs: list) -> list:
        return self.kernel([inputs[i] for i in self.order])

    def on_arguments(self, graph_inputs: list[int]):
        """The kernel as a call on a function's arguments, graph input i being argument
        graph_inputs[i]."""
        order = [graph_inputs[i] for i in self.order]
        if order == list(range(len(order))):
            return self.kernel
        kernel = self.kernel
        return lambda args: kernel([args[i] for i in order])


def prepare(graph: Graph):
    """`graph` (after the passes) as a callable; fused nodes run natively where they can."""
    keep_freed_memory()  # the kernels' fresh outputs reuse freed pages (runtime/host_memory.py)
    natives, reasons = {}, {}
    for i, node in enumerate(graph.nodes):
        if node.op is Op.FUSED:
            try:
                natives[i] = _gemm_node(node) if node.attr["kind"] == "gemm" else \
                    PointwiseNode(node)
            except CannotLower as e:
                reasons[i] = str(e)
    run = interpreter.prepare(graph, replace=natives)
    if len(graph.nodes) == 1 and natives and graph.nodes[0].outputs == graph.outputs and \
            sorted(graph.nodes[0].inputs[0], key=graph.inputs.index) == list(graph.inputs):
        # one kernel over the graph's own inputs (each once): call it as is
        run = _Direct(natives[0], [graph.inputs.index(v) for v in graph.nodes[0].inputs[0]])
    run.graph = graph
    run.kernels = natives
    run.native_reasons = {str(graph.nodes[i]).split(" = ")[0]: r for i, r in reasons.items()}
    return run
