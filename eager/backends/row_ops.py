"""The graphs of eager's row ops over rows of x, as the row-kernel generators take them:
a reduction over the last merged dim, softmax, log_softmax, mean, var (the CPU's
eager/backends/native/rows.py and CUDA's eager/backends/cuda/reductions.py),
and the CPU's layer norm forward and backward and softmax/log_softmax backward. Over
16-bit floats a graph reads and writes them and computes in float32.

A composite op's graph is its record's formula (ir/formula.py) run over rows by
_RowFormula, not written again here: its reductions become per-row nodes, its arithmetic
nodes per row where every operand has one value per row, else full ones, and its counts
zero-dim inputs read once per row (the kernel's numbers), so the kernels keep their
operands and the formula's order of nodes."""
from __future__ import annotations

from ir.dtypes import DType
from ir.formula import Interpreter, Symbolic
from ir.graph import Graph, GraphBuilder, TensorType
from ir.ops import Op
from ir.records import RECORDS
from runtime.cpu.kernel_spec import register_dtype

_FULL, _ROW = ("rows", "n"), ("rows", 1)


class _Rows:
    """A GraphBuilder over rows: full values (rows x n) and per-row ones (rows x 1), held
    in `storage`'s type and computed in `dt` (float32 for the 16-bit floats: their
    results are rounded once, as eager's numpy kernels compute them)."""

    def __init__(self, storage: DType):
        self.g, self.storage, self.per_row = GraphBuilder(), storage, []
        self.dt = register_dtype(storage)

    def input(self, name: str, source: DType | None = None, per_row: bool = False):
        v = self.g.input(TensorType(_ROW if per_row else _FULL, source or self.storage),
                         name)
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

    def cast(self, v, dt: DType):
        """v converted to `dt` (a row op's result, computed wider, rounded once)."""
        (out,) = self.g.add(Op.TO_COPY, (v,), {"dtype": dt, "device": None},
                            TensorType(v.type.shape, dt))
        if v in self.per_row:
            self.per_row.append(out)
        return out

    def build(self, outputs) -> tuple[Graph, frozenset]:
        outputs = [v if v.type.dtype is self.storage else self.cast(v, self.storage)
                   for v in outputs]
        return self.g.build(outputs), frozenset(self.per_row)


class _RowFormula(Interpreter):
    """Formulas over the rows of a _Rows builder. A row value is rows x n, its dim 1 the
    one reduced; `count(x, dims)` is the number named names[0], `count(x, dims,
    correction)` (var's divisor, max(n - correction, 0)) names[1], each made at its first
    use unless given in `made` (name -> value)."""

    def __init__(self, rows: _Rows, names: tuple[str, str] = ("count", "divisor"), **made):
        self.rows, self.names = rows, names
        self.numbers = {name: self.value(v) for name, v in made.items()}

    def value(self, v) -> Symbolic | None:
        return None if v is None else Symbolic(self, v)

    def _node(self, op: Op, *xs: Symbolic, row: bool | None = None) -> Symbolic:
        values = [x.value for x in xs]
        if row is None:
            row = all(v in self.rows.per_row for v in values)
        return self.value(self.rows.node(op, *values, row=row))

    def binary(self, op: Op, a, b) -> Symbolic:
        if not (isinstance(a, Symbolic) and isinstance(b, Symbolic)):
            raise TypeError("a row graph takes numbers as inputs (_Rows.number), "
                            f"not as constants: {op.name} of {a!r} and {b!r}")
        return self._node(op, a, b)

    def sum(self, x, dims, keepdim=False):
        return self._node(Op.SUM, x, row=True)

    def amax(self, x, dims, keepdim=False):
        return self._node(Op.AMAX, x, row=True)

    def count(self, x, dims, correction=0) -> Symbolic:
        name = self.names[0 if correction == 0 else 1]
        if name not in self.numbers:
            self.numbers[name] = self.value(self.rows.number(name))
        return self.numbers[name]

    def exp(self, x):
        return self._node(Op.EXP, x)

    def log(self, x):
        return self._node(Op.LOG, x)

    def rsqrt(self, x):
        return self._node(Op.RSQRT, x)

    def ndim(self, x) -> int:
        return 2

    def cast(self, x, dtype):
        return x  # every node computes in the builder's dtype; loads convert

    def stored(self, x, dtype):
        if dtype is None:
            return x
        narrow = self.rows.cast(x.value, dtype)
        return self.value(self.rows.cast(narrow, self.rows.dt))


_ROW_ARGUMENTS = {Op.SOFTMAX: (1,), Op.LOG_SOFTMAX: (1,), Op.MEAN: ([1], True),
                  Op.VAR: ([1],)}
"""The composite row ops, and the arguments after x their formulas are run with."""


def row_op_graph(op: Op, source: DType, out: DType,
                 divisors: tuple[str, str] = ("count", "divisor"),
                 stored: DType | None = None) -> tuple[Graph, frozenset]:
    """(graph, the values with one element per row) of `op` over rows of x (of type
    `source`) giving `out` (computed in float32 where that is a 16-bit float): a
    reduction one node, softmax, log_softmax, mean and var their records' formulas (mean
    a sum over the count; var the sum of squares about the mean over its divisor). The
    count and the divisor are zero-dim inputs named by `divisors`; `stored`: log_softmax's
    (_common.stored_in)."""
    r = _Rows(out)
    x = r.input("x", source)
    if op not in _ROW_ARGUMENTS:
        return r.build([r.node(op, x, row=True)])
    F = _RowFormula(r, divisors)
    kept = {} if stored is None else {"stored": stored}
    return r.build([RECORDS[op].formula(F, F.value(x), *_ROW_ARGUMENTS[op], **kept).value])


def layer_norm_graph(dt: DType, weight: bool, bias: bool) -> tuple[Graph, frozenset]:
    """native_layer_norm over rows of x: (out, mean, rstd), its record's formula; weight
    and bias are full operands whose rows all start at the same element. The numbers are
    (count, eps)."""
    r = _Rows(dt)
    x = r.input("x")
    w = r.input("weight") if weight else None
    b = r.input("bias") if bias else None
    F = _RowFormula(r, count=r.number("count"))
    eps = F.value(r.number("eps"))
    value = F.value
    outputs = RECORDS[Op.NATIVE_LAYER_NORM].formula(
        F, value(x), (1,), value(w), value(b), eps)
    return r.build([o.value for o in outputs])


def layer_norm_backward_graph(dt: DType, weight: bool) -> tuple[Graph, frozenset]:
    """native_layer_norm_backward's grad_input over rows, its record's formula (mean and
    rstd one value per row; the number is the count)."""
    r = _Rows(dt)
    g, x = r.input("grad"), r.input("x")
    mean, rstd = r.input("mean", per_row=True), r.input("rstd", per_row=True)
    w = r.input("weight") if weight else None
    F = _RowFormula(r)
    value = F.value
    grad_input, _, _ = RECORDS[Op.NATIVE_LAYER_NORM_BACKWARD].formula(
        F, value(g), value(x), (1,), value(mean), value(rstd), value(w), None,
        (True, False, False))
    return r.build([grad_input.value])


def layer_norm_parameters_graph(dt: DType, weight: bool, bias: bool
                                ) -> tuple[Graph, frozenset]:
    """native_layer_norm_backward's grad_weight (sum of grad * xhat) and grad_bias (sum
    of grad) over the batch, its record's formula: rows here are the normalised elements,
    each summed over the batch (mean and rstd full operands, one value per batch
    element)."""
    r = _Rows(dt)
    F = _RowFormula(r)
    g = F.value(r.input("grad"))
    x = mean = rstd = None
    if weight:
        x, mean, rstd = (F.value(r.input(name)) for name in ("x", "mean", "rstd"))
    # (weight: only whether there is one is read, grad_input not being asked for)
    outputs = RECORDS[Op.NATIVE_LAYER_NORM_BACKWARD].formula(
        F, g, x, (1,), mean, rstd, g if weight else None, None, (False, weight, bias))
    return r.build([o.value for o in outputs if o is not None])


def softmax_backward_graph(dt: DType, log: bool) -> tuple[Graph, frozenset]:
    """_softmax_backward_data (out * (g - sum(g * out))) or _log_softmax_backward_data
    (g - exp(out) * sum(g)) over rows: its record's formula."""
    r = _Rows(dt)
    F = _RowFormula(r)
    g, out = F.value(r.input("grad")), F.value(r.input("output"))
    op = Op.LOG_SOFTMAX_BACKWARD_DATA if log else Op.SOFTMAX_BACKWARD_DATA
    return r.build([RECORDS[op].formula(F, g, out, 1, None).value])
