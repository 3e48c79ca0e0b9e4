"""The graph of one eager row op (a reduction over the last merged dim, softmax,
log_softmax, mean, var) over rows of x, as the row-kernel generators take it: the CPU's
(compiler/backends/native/eager_rows.py) and CUDA's (compiler/eager_cuda/reductions.py)."""
from __future__ import annotations

from ir.dtypes import DType
from ir.graph import Graph, GraphBuilder, TensorType
from ir.ops import Op


def row_op_graph(op: Op, source: DType, out: DType,
                 divisors: tuple[str, str] = ("count", "divisor")) -> tuple[Graph, frozenset]:
    """(graph, the values with one element per row) of `op` over rows of x (of type
    `source`; the ops compute in `out`): softmax and log_softmax as decompose.py writes
    them, mean as a sum over the count, var as the sum of squares about the mean over its
    divisor. The count and the divisor are zero-dim inputs named by `divisors`."""
    g = GraphBuilder()
    full, row = ("rows", "n"), ("rows", 1)
    x = g.input(TensorType(full, source), "x")
    per_row = []

    def node(node_op, *inputs, shape=full):
        (v,) = g.add(node_op, inputs, {}, TensorType(shape, out))
        if shape == row:
            per_row.append(v)
        return v

    def number(name):
        v = g.input(TensorType((), out), name)
        per_row.append(v)
        return v

    if op in (Op.SUM, Op.AMAX, Op.AMIN, Op.ARGMAX, Op.ARGMIN):
        result = node(op, x, shape=row)
    elif op is Op.MEAN:
        result = node(Op.DIV, node(Op.SUM, x, shape=row), number(divisors[0]), shape=row)
    elif op is Op.VAR:
        count, divisor = number(divisors[0]), number(divisors[1])
        centred = node(Op.SUB, x, node(Op.DIV, node(Op.SUM, x, shape=row), count, shape=row))
        squares = node(Op.SUM, node(Op.MUL, centred, centred), shape=row)
        result = node(Op.DIV, squares, divisor, shape=row)
    else:
        shifted = node(Op.SUB, x, node(Op.AMAX, x, shape=row))
        exp = node(Op.EXP, shifted)
        total = node(Op.SUM, exp, shape=row)
        result = node(Op.DIV, exp, total) if op is Op.SOFTMAX else \
            node(Op.SUB, shifted, node(Op.LOG, total, shape=row))
    return g.build([result]), frozenset(per_row)
