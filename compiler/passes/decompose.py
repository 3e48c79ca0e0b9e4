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

import numpy as np

from compiler.capture import trace_to_graph
from compiler.passes.rewrite import Rewriter
from eager.kernels._common import stored_in
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
    return _decompose(_widen(_rounded_operands(graph)))


def _rounded_operands(graph: Graph) -> Graph:
    """`graph` with each operand of a CPU pointwise op over 16-bit floats that PyTorch
    rounds to the op's common type first (dtypes.rounded_first, as eager's kernels do:
    elementwise.in_common_type) rounded: a number's scalar node takes the rounded value
    (bfloat16 x + 1.7 adds 1.703125), a tensor of another type is cast."""
    if not any(_common_type(n) for n in graph.nodes):
        return graph
    rw = Rewriter(graph)
    for node in graph.nodes:
        common = _common_type(node, rw.scalars, rw.env)
        if common is None:
            rw.copy(node)
            continue
        wide = RECORDS[node.op].pointwise.wide_scalar
        inputs = []
        for k, i in enumerate(rw.map(i) for i in node.inputs):
            if i is not None and dtypes.rounded_first(i.type.dtype, common) and \
                    not (wide and k == 1 and not i.type.shape):
                if i in rw.scalars:
                    value = dtypes.cast(np.asarray(rw.scalars[i]), common)
                    (i,) = rw.emit(Op.SCALAR, [], {"value": float(value)})
                else:
                    i = _cast(rw, i, common)
            inputs.append(i)
        rw.env.update(zip(node.outputs, rw.emit(node.op, inputs, node.attrs,
                                                 [v.type for v in node.outputs])))
    return rw.finish()


def _common_type(node: Node, scalars=None, env=None):
    """The 16-bit float type a CPU pointwise node computes in float32 from its rounded
    operands (the result's; the promoted operands' for a comparison), or None."""
    record = RECORDS.get(node.op)
    p = None if record is None else record.pointwise
    out = node.outputs[0].type if node.outputs else None
    if p is None or p.own_half or out is None or out.device != "cpu" or \
            any(isinstance(i, tuple) for i in node.inputs):
        return None
    if p.rule != "compare":
        return out.dtype if out.dtype in dtypes.HALF else None
    values = [i for i in node.inputs if i is not None]
    if not any(v.type.dtype in dtypes.HALF for v in values):
        return None
    if scalars is None:  # (the first look, over the old graph: it may be one)
        return True
    numbers = {v for v in (env.get(i) for i in values) if v in scalars}
    kinds = ([], [], [])  # with dims, zero-dim, numbers
    for i in values:
        kinds[2 if env[i] in numbers else 0 if i.type.shape else 1].append(i.type.dtype)
    common = dtypes.result_type(*kinds)
    return common if common in dtypes.HALF else None


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
        stored = _stored(node)
        if stored is None:
            results = rw.emit(node.op, inputs, attrs)
        else:  # its formula now, rounding where PyTorch's kernel keeps 16-bit row values
            results = _inline(rw, node.op, inputs, attrs,
                              partial(RECORDS[node.op].formula, INLINED, stored=stored))
        for old, new in zip(node.outputs, results):
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


def _stored(node: Node):
    """The 16-bit type a widened node's formula keeps row values in (eager's
    _common.stored_in: log_softmax over the last dim on the CPU), or None."""
    if node.op is not Op.LOG_SOFTMAX:
        return None
    out = node.outputs[0].type
    return stored_in(node.op, node.attr["dim"], len(node.inputs[0].type.shape), out.dtype,
                     out.device)


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
        results = _inline(rw, node.op, inputs, node.attrs, partial(formula, INLINED))
        for old, new in zip(node.outputs, results):
            rw.alias(old, new)
    return rw.finish()


def _inline(rw: Rewriter, op: Op, inputs: list, attrs, formula) -> list:
    """`formula` (op's, over eager ops) captured over new values `inputs` and emitted
    into rw, decomposed in turn (a formula may call ops that decompose); its results."""
    sub = _decompose(trace_to_graph(formula, op.schema, inputs, attrs, rw.scalars))
    given = [v for i in inputs for v in (i if isinstance(i, tuple) else (i,))]
    env = dict(zip(sub.inputs, [v for v in given if v is not None]))  # (no None weight)
    for n in sub.nodes:
        outs = rw.emit(n.op, [_sub_map(env, i) for i in n.inputs], n.attrs,
                       [v.type for v in n.outputs])
        env.update(zip(n.outputs, outs))
    return [env[v] for v in sub.outputs]


def _sub_map(env, i):
    if isinstance(i, tuple):
        return tuple(env[v] for v in i)
    return None if i is None else env[i]
