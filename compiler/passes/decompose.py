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
inlines it. Only float32 and float64 ops decompose. A 16-bit float op with a formula, and
a reduction over 16-bit floats, is widened first: its 16-bit operands cast to float32,
the op run (and decomposed) in float32, its 16-bit results cast back, as eager computes
it (in float32, rounded once; a chain of 16-bit ops would round at each) and as
torch._decomp's computation dtype does; the kernels then read and write 16-bit words
and compute in float32 registers. Ops over empty tensors stay whole: their own rules
say what an empty softmax or var is; so do ops over symbolic sizes (a mean's count is a
size's value, and the kernels run symbolic graphs node by node anyway).
"""
from __future__ import annotations

from functools import partial

from compiler.capture import trace_to_graph
from compiler.passes.rewrite import Rewriter
from eager.kernels.decomposed import INLINED
from ir import dtypes
from ir.graph import Graph, Node, TensorType
from ir.ops import Op
from ir.records import RECORDS

_FLOATS = ("float32", "float64")
_REDUCTIONS = frozenset({Op.SUM, Op.AMAX, Op.AMIN, Op.ARGMAX, Op.ARGMIN})
"""Reductions without a formula that widen too (the row kernels accumulate in float32)."""
_PRODUCTS = frozenset({Op.ADDMM})
"""Formulas over a product that do not widen: a 16-bit addmm stays whole, kiln's GEMM
taking its 16-bit operands (vdpbf16ps where the CPU has it) and rounding once after the
bias, as eager's; widened, its operands would be float32 copies."""


def decompose(graph: Graph) -> Graph:
    return _decompose(_widen(graph))


def _widen(graph: Graph) -> Graph:
    """`graph` with each 16-bit float op that decomposes or reduces (see the module
    docstring) run in float32 between casts."""
    if not any(_widens(n) for n in graph.nodes):
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        if not _widens(node):
            rw.copy(node)
            continue
        inputs = [_wide(rw, i) for i in (rw.map(i) for i in node.inputs)]
        attrs = tuple((k, dtypes.float32 if v in dtypes.HALF else v) for k, v in node.attrs)
        for old, new in zip(node.outputs, rw.emit(node.op, inputs, attrs)):
            rw.alias(old, new if new.type == old.type else _cast(rw, new, old.type.dtype))
    return rw.finish()


def _widens(node: Node) -> bool:
    """Whether `node` computes over 16-bit floats (and no float64) in an op that
    decomposes or reduces, over static, non-empty shapes."""
    record = RECORDS.get(node.op)
    if node.op in _PRODUCTS or node.op not in _REDUCTIONS and (
            record is None or record.formula is None):
        return False
    values = node.input_values() + list(node.outputs)
    kinds = {v.type.dtype for v in values}
    return bool(kinds & set(dtypes.HALF)) and dtypes.float64 not in kinds and \
        all(v.type.is_static and 0 not in v.type.shape for v in values)


def _wide(rw: Rewriter, i):
    if isinstance(i, tuple):
        return tuple(_wide(rw, v) for v in i)
    if i is None or i.type.dtype not in dtypes.HALF or i in rw.scalars:
        return i
    return _cast(rw, i, dtypes.float32)


def _cast(rw: Rewriter, v, dtype):
    (out,) = rw.emit(Op.TO_COPY, [v], (("dtype", dtype), ("device", None)),
                     [TensorType(v.type.shape, dtype)])
    return out


def _decompose(graph: Graph) -> Graph:
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
        sub = _decompose(trace_to_graph(partial(formula, INLINED), node.op.schema, inputs,
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
