"""Constant folding: an elementwise op whose inputs are all scalar constants becomes one
scalar constant, computed by the eager kernel itself (so the number is the one eager
would have produced), when the result is again a plain scalar of the same type."""
from __future__ import annotations

from compiler.passes.rewrite import Rewriter
from eager.dispatcher import ATEN
from ir.records import pointwise_ops
from eager.tensor import wrap_scalar
from ir.graph import Graph
from ir.ops import Op

POINTWISE = frozenset(pointwise_ops())


def constant_fold(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        inputs = [rw.map(i) for i in node.inputs]
        if node.op in POINTWISE and inputs and all(v in rw.scalars for v in inputs):
            folded = _fold(node, [rw.scalars[v] for v in inputs])
            if folded is not None:
                (new,) = rw.emit(Op.SCALAR, [], {"value": folded})
                rw.alias(node.outputs[0], new)
                continue
        rw.copy(node)
    return rw.finish()


def _fold(node, numbers):
    out = ATEN[node.op](*[wrap_scalar(n) for n in numbers], **dict(node.attrs))
    value = out.item()
    # the folded constant must promote exactly as the computed tensor would
    if wrap_scalar(value).dtype is not node.outputs[0].type.dtype:
        return None
    return value
