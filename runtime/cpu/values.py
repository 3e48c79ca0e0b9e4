"""LLVM values for tensor elements: types per dtype, constants, casts, and one function
per op computing a node's result from its inputs' values. The same code emits scalar
and vector (W lanes) values: only `Lanes.width` differs.

Booleans are i1 in registers and one byte in memory, as numpy stores them.
"""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu.kernel_spec import COPIES, SUPPORTED, native_ops  # noqa: F401
from ir.records import RECORDS, activations
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op
from runtime.llvm.toolkit import I1, I8, I32, I64, constant, intrinsic, vector

_ELEM = {"float32": ir.FloatType(), "float64": ir.DoubleType(), "int32": I32, "int64": I64,
         "bool": I1}
_MEMORY = {**_ELEM, "bool": I8}


class Lanes:
    """The LLVM types, constants and casts of tensor dtypes, for values of `width` lanes
    (None: scalars)."""

    def __init__(self, builder: ir.IRBuilder, width: int | None):
        self.b = builder
        self.width = width

    def type(self, dt: DType):
        return vector(_ELEM[dt.name], self.width)

    def memory_type(self, dt: DType):
        return vector(_MEMORY[dt.name], self.width)

    def const(self, value, dt: DType):
        if dt.is_floating_point:
            value = float(value)
        else:
            value = int(bool(value)) if dt is dtypes.bool_ else int(value)
        return constant(self.type(dt), value)

    # memory <-> registers -------------------------------------------------------------
    def from_memory(self, v, dt: DType):
        if dt is not dtypes.bool_:
            return v
        return self.b.icmp_unsigned("!=", v, ir.Constant(self.memory_type(dt), None))

    def to_memory(self, v, dt: DType):
        return self.b.zext(v, self.memory_type(dt)) if dt is dtypes.bool_ else v

    # casts ------------------------------------------------------------------------
    def cast(self, v, src: DType, dst: DType):
        if src is dst:
            return v
        b, to = self.b, self.type(dst)
        if dst is dtypes.bool_:
            zero = self.const(0, src)
            return b.fcmp_unordered("!=", v, zero) if src.is_floating_point else \
                b.icmp_unsigned("!=", v, zero)
        if src is dtypes.bool_:
            return b.uitofp(v, to) if dst.is_floating_point else b.zext(v, to)
        if src.is_floating_point and dst.is_floating_point:
            return b.fpext(v, to) if dst.itemsize > src.itemsize else b.fptrunc(v, to)
        if src.is_floating_point:
            return b.fptosi(v, to)
        if dst.is_floating_point:
            return b.sitofp(v, to)
        return b.sext(v, to) if dst.itemsize > src.itemsize else b.trunc(v, to)


def _isnan(L: Lanes, x):
    return L.b.fcmp_unordered("uno", x, x)


def _max_min(L: Lanes, a, b, dt: DType, is_max: bool):
    """NaN-propagating maximum/minimum (PyTorch's, not LLVM's maxnum); a tie gives `a`,
    as PyTorch's std::max and std::min do (-0.0 against +0.0 keeps a's sign)."""
    bld = L.b
    if not dt.is_floating_point:  # bools compare unsigned: True is 1, not -1
        op = ">" if is_max else "<"
        compare = bld.icmp_unsigned if dt is dtypes.bool_ else bld.icmp_signed
        return bld.select(compare(op, a, b), a, b)
    r = bld.select(bld.fcmp_ordered(">" if is_max else "<", b, a), b, a)
    r = bld.select(_isnan(L, a), a, r)
    return bld.select(_isnan(L, b), b, r)


class Elements:
    """What an op record's emitter computes with (ir/records.py: `emit(E, *values)`):
    arithmetic, comparisons and math on values of one compute dtype, scalars or lanes."""

    def __init__(self, L: Lanes, dt: DType):
        self.L, self.b, self.dt, self.fl = L, L.b, dt, dt.is_floating_point

    def const(self, value):
        return self.L.const(value, self.dt)

    def neg(self, x):
        return self.b.fneg(x) if self.fl else self.b.neg(x)

    def add(self, x, y):
        if self.dt is dtypes.bool_:  # True + True is True (an i1 add would wrap to 0)
            return self.b.or_(x, y)
        return self.b.fadd(x, y, flags=("contract",)) if self.fl else self.b.add(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y, flags=("contract",)) if self.fl else self.b.sub(x, y)

    def mul(self, x, y):
        if self.dt is dtypes.bool_:
            return self.b.and_(x, y)
        return self.b.fmul(x, y, flags=("contract",)) if self.fl else self.b.mul(x, y)

    def div(self, x, y):
        return self.b.fdiv(x, y)

    def abs(self, x):
        """|x|: a float's sign bit cleared (abs(-0.0) is 0.0 and abs(-nan) a nan without
        its sign, as numpy and PyTorch give them), an integer's 0 - x where negative."""
        if self.fl:
            return intrinsic(self.b, "fabs", [x], x.type, [x.type])
        return self.b.select(self.b.icmp_signed("<", x, self.const(0)), self.b.neg(x), x)

    def _compare(self, pred, x, y):
        if self.fl:  # NaN compares unequal to everything, itself included
            return self.b.fcmp_unordered(pred, x, y) if pred == "!=" else \
                self.b.fcmp_ordered(pred, x, y)
        if self.dt is dtypes.bool_:
            return self.b.icmp_unsigned(pred, x, y)
        return self.b.icmp_signed(pred, x, y)

    def _comparison(pred: str):
        def compare(self, x, y):
            return self._compare(pred, x, y)
        compare.__name__ = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt",
                            ">=": "ge"}[pred]
        return compare

    eq, ne, lt, le = _comparison("=="), _comparison("!="), _comparison("<"), _comparison("<=")
    gt, ge = _comparison(">"), _comparison(">=")
    del _comparison

    def select(self, condition, x, y):
        return self.b.select(condition, x, y)

    def and_(self, x, y):
        return self.b.and_(x, y)

    def or_(self, x, y):
        return self.b.or_(x, y)

    def xor(self, x, y):
        return self.b.xor(x, y)

    def not_(self, x):
        """Every bit flipped: ~x of an integer, not x of a bool (an i1)."""
        return self.b.not_(x)

    def truth(self, x):
        """x != 0, as a bool."""
        return self.L.cast(x, self.dt, dtypes.bool_)

    def from_bool(self, condition):
        """A bool as 0 or 1 of the compute dtype."""
        return self.L.cast(condition, dtypes.bool_, self.dt)

    def max(self, x, y):
        return _max_min(self.L, x, y, self.dt, True)

    def min(self, x, y):
        return _max_min(self.L, x, y, self.dt, False)

    def round(self, how: str, x):
        """x rounded to an integer by `how`: floor, ceil, trunc or roundeven (half to
        even); an integer is itself."""
        return intrinsic(self.b, how, [x], x.type, [x.type]) if self.fl else x

    def fmod(self, x, y):
        """C's fmod: x - trunc(x / y) * y, exactly (LLVM's frem)."""
        return self.b.frem(x, y)

    def copysign(self, x, sign):
        return intrinsic(self.b, "copysign", [x, sign], x.type, [x.type])

    def nextafter(self, x, y):
        """The float after x towards y (C's nextafter): x's bits one up where the step
        leads away from zero, one down where towards it; the least subnormal with y's
        sign from zero; y where x == y; NaN where either is."""
        ty = vector(ir.IntType(self.dt.itemsize * 8), self.L.width)
        one = ir.Constant(ty, 1)
        bits = self.b.bitcast(x, ty)
        zero = self.const(0.0)
        away = self.b.xor(self._compare("<", x, y), self._compare("<", x, zero))
        stepped = self.b.bitcast(self.b.select(away, self.b.add(bits, one),
                                               self.b.sub(bits, one)), x.type)
        least = self.const(5e-324 if self.dt is dtypes.float64 else 1.401298464324817e-45)
        out = self.select(self._compare("==", x, zero), self.copysign(least, y), stepped)
        out = self.select(self._compare("==", x, y), y, out)
        either_nan = self.b.or_(self.b.fcmp_unordered("uno", x, x),
                                self.b.fcmp_unordered("uno", y, y))
        return self.select(either_nan, self.add(x, y), out)

    def signbit(self, x):
        """Whether x's sign bit is set (-0.0 and -nan too): a bool."""
        if not self.fl:
            return self._compare("<", x, self.const(0)) if self.dt is not dtypes.bool_ \
                else self.b.icmp_unsigned("!=", x, x)
        bits = ir.IntType(self.dt.itemsize * 8)
        ty = vector(bits, self.L.width)
        return self.b.icmp_signed("<", self.b.bitcast(x, ty), ir.Constant(ty, None))

    def math(self, name: str, *xs):
        """A function of kiln's vectorised math library (vmath.NAMES)."""
        from runtime.cpu import vmath
        return vmath.emit(self.b, name, *xs)


def compute(L: Lanes, op: Op, args: list, in_dts: list, out_dt: DType, attrs: dict,
            compute_dt: DType):
    """The result of `op` over `args` (values of dtypes `in_dts`), as `out_dt`: the op's
    record's emitter over the values cast to `compute_dt` (the promoted type)."""
    if op in COPIES:
        return L.cast(args[0], in_dts[0], out_dt)
    pointwise = RECORDS[op].pointwise if op in native_ops() else None
    if pointwise is None or pointwise.emit is None:
        raise NotImplementedError(f"no native code for {op.qualified_name}")
    E = Elements(L, compute_dt)
    xs = [L.cast(a, d, compute_dt) for a, d in zip(args, in_dts)]
    if pointwise.scaled:
        attrs = dict(attrs)
        scale = attrs.pop(pointwise.scaled, 1)
        if scale != 1:
            xs[-1] = E.mul(xs[-1], E.const(scale))
    return pointwise.emit(E, *xs, **attrs)


"""What a GEMM's store can apply to its tile, by name (relu, gelu, gelu_tanh, ...): the
pointwise records that say so (ir/records.py)."""


def emit_activation(b, name: str, x):
    """Activation `name` on `x` (a float or double scalar or vector): its op record's own
    emitter, so a GEMM's store and an elementwise kernel compute it alike."""
    op, attrs = activations()[name]
    vector = isinstance(x.type, ir.VectorType)
    element = x.type.element if vector else x.type
    dt = dtypes.float64 if isinstance(element, ir.DoubleType) else dtypes.float32
    E = Elements(Lanes(b, x.type.count if vector else None), dt)
    return RECORDS[op].pointwise.emit(E, x, **attrs)
