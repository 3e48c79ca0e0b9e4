"""Decompositions: a composite op's formula written once, on its record, over an
interpreter `F` that every consumer supplies.

A decomposition (`OpRecord.formula`, declared with `@RECORD.decomposition`) is a function
`formula(F, *args, **kwargs)` of the op's arguments as its schema names them. It computes
with Python's arithmetic operators (+ - * /) on its values and Python numbers, and with
these calls of `F`:

    F.sum(x, dims, keepdim)   F.amax(x, dims, keepdim)   F.mean(x, dims, keepdim)
    F.count(x, dims, correction=0)    the elements a reduction over dims combines, less
                                      the correction, not below 0
    F.exp(x)  F.log(x)  F.rsqrt(x)  F.sqrt(x)  F.tanh(x)  F.erf(x)  F.mm(a, b)
    F.sigmoid(x)  F.slice(x, dim, start, end)  F.abs(x)  F.pow(x, number)
    F.amin(x, dims, keepdim)  F.nonzero(x) (1 where x is not 0, in x's type)
                                      (these in the eager and numpy interpreters only)
    F.ndim(x)  F.cast(x, dtype)       (dtype None: x as it is)
    F.reshape(x, shape)  F.shape(x)   x's elements in another shape (group norm's
                                      groups), and x's shape
    F.stored(x, dtype)                x rounded to dtype and read back in its own type:
                                      a value a kernel keeps in a narrower type (dtype
                                      None: x as it is)

The interpreters, and who runs each:
- eager ops (eager/kernels/decomposed.py EAGER): the compiler's decompose pass captures
  it into a graph; CUDA's composed kernels and autograd's derivatives run it;
- numpy (NUMPY there): eager's CPU fallback kernels, on arrays in the compute dtype;
- a row kernel's graph (eager/backends/row_ops.py): reductions become per-row nodes, the
  rest full-row nodes, counts and epsilons zero-dim inputs read once per row;
- a pointwise code emitter (`emitter` below): a Pointwise record's `emit`.
An interpreter takes only the calls its consumers need: a row graph has no mm, an
emitter no reductions. A formula is written in the order its graph should have: the row
kernels are the graphs it builds, node for node.
"""
from __future__ import annotations

from ir.ops import Op
from ir.records import RECORDS


class Interpreter:
    """What every interpreter shares: a composite call (F.mean) runs its own record's
    formula on this interpreter, unless the interpreter has the op itself (eager)."""

    def mean(self, x, dims=None, keepdim=False):
        return RECORDS[Op.MEAN].formula(self, x, dims, keepdim)


class Symbolic:
    """A value of an interpreter whose own values have no arithmetic operators (a row
    graph's, an emitter's): each operator calls `interpreter.binary(op, a, b)`, a and b
    being Symbolic or Python numbers."""
    __slots__ = ("interpreter", "value")

    def __init__(self, interpreter, value):
        self.interpreter, self.value = interpreter, value

    def __add__(self, other):
        return self.interpreter.binary(Op.ADD, self, other)

    def __radd__(self, other):
        return self.interpreter.binary(Op.ADD, other, self)

    def __sub__(self, other):
        return self.interpreter.binary(Op.SUB, self, other)

    def __rsub__(self, other):
        return self.interpreter.binary(Op.SUB, other, self)

    def __mul__(self, other):
        return self.interpreter.binary(Op.MUL, self, other)

    def __rmul__(self, other):
        return self.interpreter.binary(Op.MUL, other, self)

    def __truediv__(self, other):
        return self.interpreter.binary(Op.DIV, self, other)

    def __rtruediv__(self, other):
        return self.interpreter.binary(Op.DIV, other, self)


class _Emitting(Interpreter):
    """Formulas over a code emitter E (runtime/cpu/values.py Elements: E.add, E.const,
    E.math("exp", x), ...), for pointwise formulas."""

    def __init__(self, E):
        self.E = E
        self._binary = {Op.ADD: E.add, Op.SUB: E.sub, Op.MUL: E.mul, Op.DIV: E.div}

    def binary(self, op: Op, a, b) -> Symbolic:
        return Symbolic(self, self._binary[op](self._lanes(a), self._lanes(b)))

    def _lanes(self, a):
        return a.value if isinstance(a, Symbolic) else self.E.const(a)

    def _math(self, name: str, x) -> Symbolic:
        return Symbolic(self, self.E.math(name, x.value))

    def exp(self, x):
        return self._math("exp", x)

    def tanh(self, x):
        return self._math("tanh", x)

    def erf(self, x):
        return self._math("erf", x)


def emitter(formula):
    """A Pointwise record's `emit(E, *values, **attrs)` that runs `formula` on E."""
    def emit(E, *values, **attrs):
        F = _Emitting(E)
        return formula(F, *(Symbolic(F, v) for v in values), **attrs).value
    emit.__name__ = emit.__qualname__ = f"emit_{formula.__name__.lstrip('_')}"
    return emit
