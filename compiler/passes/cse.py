"""Common-subexpression elimination: a node that repeats an earlier one (same op, same
inputs, same attributes) reuses its results."""
from __future__ import annotations

from compiler.passes.rewrite import Rewriter
from ir.graph import Graph


def cse(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    seen: dict = {}
    for node in graph.nodes:
        key = (node.op, tuple(rw.map(i) for i in node.inputs), node.attrs)
        if key in seen:
            for old, new in zip(node.outputs, seen[key]):
                rw.alias(old, new)
        else:
            seen[key] = rw.copy(node)
    return rw.finish()
