"""Common-subexpression elimination: a node that repeats an earlier one (same op, same
inputs, same attributes, same result types) reuses its results. The result types are
part of the key, and attributes are keyed strictly (ir.graph.strict_key): as Python
values scalar(value=0) of type i64 and scalar(value=0.0) of type f32 are equal tuples
(merging them handed the float constant to an integer `where`), and so are -0.0 and
0.0."""
from __future__ import annotations

from compiler.passes.rewrite import Rewriter
from ir.graph import Graph, strict_key


def cse(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    seen: dict = {}
    for node in graph.nodes:
        key = (node.op, tuple(rw.map(i) for i in node.inputs), strict_key(node.attrs),
               tuple(v.type for v in node.outputs))
        if key in seen:
            for old, new in zip(node.outputs, seen[key]):
                rw.alias(old, new)
        else:
            seen[key] = rw.copy(node)
    return rw.finish()
