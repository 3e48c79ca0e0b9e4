"""Decompositions to a small core, so fusion sees primitives: every op whose record has a
decomposition (ir/records.py OpRecord.formula: softmax -> amax, sub, exp, sum, div;
log_softmax; their backward -> sum, mul, sub; native_layer_norm -> mean, rsqrt and
elementwise ops, and its backward; mean -> sum / n; var; addmm -> mm + bias;
gelu_backward -> elementwise primitives). gelu and silu have none and stay whole:
elementwise kernels emit them as they are, and a GEMM's store takes them as its
activation. (A compiled backward captures NativeLayerNormBackward0, which runs the
backward's formula in eager ops.)

Each formula is written once, on its op's record, over an interpreter (ir/formula.py);
this pass runs it in eager ops (INLINED: a composite call such as F.mean written out as
its own formula), captures that into a graph (the same capture compile() uses) and
inlines it. Only float32 and float64 ops decompose: eager computes
float16 ops in float32 and rounds once, which a chain of float16 ops would not match.
Ops over empty tensors stay whole: their own rules say what an empty softmax or var is;
so do ops over symbolic sizes (a mean's count is a size's value, and the kernels run
symbolic graphs node by node anyway).
"""
from __future__ import annotations

from functools import partial

from compiler.capture import trace_to_graph
from compiler.passes.rewrite import Rewriter
from eager.kernels.decomposed import INLINED
from ir.graph import Graph
from ir.records import RECORDS

_FLOATS = ("float32", "float64")


def decompose(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        record = RECORDS.get(node.op)
        formula = None if record is None else record.formula
        values = node.input_values() + list(node.outputs)
        if formula is None or any(v.type.dtype.name not in _FLOATS for v in values) or \
                any(0 in v.type.shape or not v.type.is_static for v in values):
            rw.copy(node)
            continue
        inputs = [rw.map(i) for i in node.inputs]
        # (decomposed in turn: a formula may call ops that decompose)
        sub = decompose(trace_to_graph(partial(formula, INLINED), node.op.schema, inputs,
                                       node.attrs, rw.scalars))
        given = [v for i in inputs for v in (i if isinstance(i, tuple) else (i,))]
        env = dict(zip(sub.inputs, [v for v in given if v is not None]))  # (no None weight)
        for n in sub.nodes:
            outs = rw.emit(n.op, [_sub_map(env, i) for i in n.inputs], n.attrs,
                           [v.type for v in n.outputs])
            env.update(zip(n.outputs, outs))
        for old, new in zip(node.outputs, sub.outputs):
            rw.alias(old, env[new])
    return rw.finish()


def _sub_map(env, i):
    if isinstance(i, tuple):
        return tuple(env[v] for v in i)
    return None if i is None else env[i]
