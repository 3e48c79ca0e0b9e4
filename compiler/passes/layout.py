"""Layout: copies nobody needs are dropped. A `clone` (what `contiguous()` and
`reshape` of a strided tensor record) is kept where its result leaves the graph — there
the caller must get memory of its own — and where a view reads it, since a view needs
strides the clone made. Inside the graph every consumer reads
strided inputs: elementwise kernels index through strides, and the fusion pass folds
transposes, permutes and expands into the kernels that read them (a GEMM reads its
operand transposed), so views never become copies."""
from __future__ import annotations

from compiler.passes.rewrite import Rewriter
from ir.graph import Graph
from ir.ops import VIEW, Op


def drop_copies(graph: Graph) -> Graph:
    outputs = set(graph.outputs)
    viewed = {v for n in graph.nodes if n.op in VIEW for v in n.input_values()}
    rw = Rewriter(graph)
    for node in graph.nodes:
        # a clone read by a view stays: `view` needs the clone's contiguous strides
        # (reshape of a transposed tensor records clone, then view)
        if node.op is Op.CLONE and node.outputs[0] not in outputs and \
                node.outputs[0] not in viewed:
            rw.alias(node.outputs[0], rw.map(node.inputs[0]))
            continue
        rw.copy(node)
    return rw.finish()
