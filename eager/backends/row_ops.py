"""The graphs of eager's row ops over rows of x, as the row-kernel generators take them:
a reduction over the last merged dim, softmax, log_softmax, mean, var (the CPU's
eager/backends/native/rows.py and CUDA's eager/backends/cuda/reductions.py),
and the CPU's layer norm forward and backward and softmax/log_softmax backward."""
from __future__ import annotations

from ir.dtypes import DType
from ir.graph import Graph, GraphBuilder, TensorType
from ir.ops import Op

_FULL, _ROW = ("rows", "n"), ("rows", 1)


class _Rows:
    """A GraphBuilder over rows: full values (rows x n) and per-row ones (rows x 1)."""

    def __init__(self, dt: DType):
        self.g, self.dt, self.per_row = GraphBuilder(), dt, []

    def input(self, name: str, source: DType | None = None, per_row: bool = False):
        v = self.g.input(TensorType(_ROW if per_row else _FULL, source or self.dt), name)
        if per_row:
            self.per_row.append(v)
        return v

    def number(self, name: str):
        """A zero-dim input read once per row (a count, a divisor, an epsilon)."""
        v = self.g.input(TensorType((), self.dt), name)
        self.per_row.append(v)
        return v

    def node(self, op: Op, *inputs, row: bool = False):
        (v,) = self.g.add(op, inputs, {}, TensorType(_ROW if row else _FULL, self.dt))
        if row:
            self.per_row.append(v)
        return v

    def build(self, outputs) -> tuple[Graph, frozenset]:
        return self.g.build(list(outputs)), frozenset(self.per_row)


def row_op_graph(op: Op, source: DType, out: DType,
                 divisors: tuple[str, str] = ("count", "divisor")) -> tuple[Graph, frozenset]:
    """(graph, the values with one element per row) of `op` over rows of x (of type
    `source`; the ops compute in `out`): softmax and log_softmax as decompose.py writes
    them, mean as a sum over the count, var as the sum of squares about the mean over its
    divisor. The count and the divisor are zero-dim inputs named by `divisors`."""
    r = _Rows(out)
    x = r.input("x", source)
    if op in (Op.SUM, Op.AMAX, Op.AMIN, Op.ARGMAX, Op.ARGMIN):
        result = r.node(op, x, row=True)
    elif op is Op.MEAN:
        result = r.node(Op.DIV, r.node(Op.SUM, x, row=True), r.number(divisors[0]), row=True)
    elif op is Op.VAR:
        count, divisor = r.number(divisors[0]), r.number(divisors[1])
        mean = r.node(Op.DIV, r.node(Op.SUM, x, row=True), count, row=True)
        centred = r.node(Op.SUB, x, mean)
        squares = r.node(Op.SUM, r.node(Op.MUL, centred, centred), row=True)
        result = r.node(Op.DIV, squares, divisor, row=True)
    else:
        shifted = r.node(Op.SUB, x, r.node(Op.AMAX, x, row=True))
        exp = r.node(Op.EXP, shifted)
        total = r.node(Op.SUM, exp, row=True)
        result = r.node(Op.DIV, exp, total) if op is Op.SOFTMAX else \
            r.node(Op.SUB, shifted, r.node(Op.LOG, total, row=True))
    return r.build([result])


def layer_norm_graph(dt: DType, weight: bool, bias: bool) -> tuple[Graph, frozenset]:
    """native_layer_norm over rows of x: (out, mean, rstd). The mean, then the mean of
    squares about it (two passes, as var: no cancellation), then the output pass; weight
    and bias are full operands whose rows all start at the same element."""
    r = _Rows(dt)
    x = r.input("x")
    w = r.input("weight") if weight else None
    b = r.input("bias") if bias else None
    count, eps = r.number("count"), r.number("eps")
    mean = r.node(Op.DIV, r.node(Op.SUM, x, row=True), count, row=True)
    centred = r.node(Op.SUB, x, mean)
    var = r.node(Op.DIV, r.node(Op.SUM, r.node(Op.MUL, centred, centred), row=True), count,
                 row=True)
    rstd = r.node(Op.RSQRT, r.node(Op.ADD, var, eps, row=True), row=True)
    out = r.node(Op.MUL, centred, rstd)
    if w is not None:
        out = r.node(Op.MUL, out, w)
    if b is not None:
        out = r.node(Op.ADD, out, b)
    return r.build([out, mean, rstd])


def layer_norm_backward_graph(dt: DType, weight: bool) -> tuple[Graph, frozenset]:
    """native_layer_norm_backward's grad_input over rows: with xhat = (x - mean) * rstd
    and gw = grad * weight, rstd * (gw - mean(gw) - xhat * mean(gw * xhat))."""
    r = _Rows(dt)
    g, x = r.input("grad"), r.input("x")
    mean, rstd = r.input("mean", per_row=True), r.input("rstd", per_row=True)
    w = r.input("weight") if weight else None
    count = r.number("count")
    xhat = r.node(Op.MUL, r.node(Op.SUB, x, mean), rstd)
    gw = g if w is None else r.node(Op.MUL, g, w)
    a = r.node(Op.DIV, r.node(Op.SUM, gw, row=True), count, row=True)
    b = r.node(Op.DIV, r.node(Op.SUM, r.node(Op.MUL, gw, xhat), row=True), count, row=True)
    inner = r.node(Op.SUB, r.node(Op.SUB, gw, a), r.node(Op.MUL, xhat, b))
    return r.build([r.node(Op.MUL, inner, rstd)])


def layer_norm_parameters_graph(dt: DType, weight: bool, bias: bool
                                ) -> tuple[Graph, frozenset]:
    """native_layer_norm_backward's grad_weight (sum of grad * xhat) and grad_bias (sum
    of grad) over the batch: rows here are the normalised elements, each summed over
    the batch (mean and rstd full operands, one value per batch element)."""
    r = _Rows(dt)
    g = r.input("grad")
    outputs = []
    if weight:
        x, mean, rstd = r.input("x"), r.input("mean"), r.input("rstd")
        xhat = r.node(Op.MUL, r.node(Op.SUB, x, mean), rstd)
        outputs.append(r.node(Op.SUM, r.node(Op.MUL, g, xhat), row=True))
    if bias:
        outputs.append(r.node(Op.SUM, g, row=True))
    return r.build(outputs)


def softmax_backward_graph(dt: DType, log: bool) -> tuple[Graph, frozenset]:
    """_softmax_backward_data: out * (g - sum(g * out)); _log_softmax_backward_data:
    g - exp(out) * sum(g)."""
    r = _Rows(dt)
    g, out = r.input("grad"), r.input("output")
    if log:
        total = r.node(Op.SUM, g, row=True)
        return r.build([r.node(Op.SUB, g, r.node(Op.MUL, r.node(Op.EXP, out), total))])
    total = r.node(Op.SUM, r.node(Op.MUL, g, out), row=True)
    return r.build([r.node(Op.MUL, out, r.node(Op.SUB, g, total))])
