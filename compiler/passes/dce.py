"""Dead-code elimination: drop nodes whose results no output needs (captured graphs are
functional, so a node with no reader has no effect)."""
from __future__ import annotations

from compiler.passes.rewrite import Rewriter
from ir.graph import Graph


def dce(graph: Graph) -> Graph:
    needed = set(graph.outputs)
    keep = set()
    for i in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[i]
        if any(v in needed for v in node.outputs):
            keep.add(i)
            needed.update(node.input_values())
    rw = Rewriter(graph)
    for i, node in enumerate(graph.nodes):
        if i in keep:
            rw.copy(node)
    return rw.finish()
