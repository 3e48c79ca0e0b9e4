"""LLVM values for tensor elements: types per dtype, constants, casts, and one function
per op computing a node's result from its inputs' values. The same code emits scalar
and vector (W lanes) values: only `Lanes.width` differs.

Booleans are i1 in registers and one byte in memory, as numpy stores them.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
_ELEM = {"float32": ir.FloatType(), "float64": ir.DoubleType(), "int32": I32, "int64": I64,
         "bool": I1}
_MEMORY = {**_ELEM, "bool": I8}
SUPPORTED = frozenset(_ELEM)
FLOAT_OPS = {Op.EXP: "exp", Op.LOG: "log", Op.TANH: "tanh", Op.SIGMOID: "sigmoid",
             Op.ERF: "erf", Op.SQRT: "sqrt", Op.RSQRT: "rsqrt"}


class Lanes:
    """Types and constants for values of `width` lanes (None: scalars)."""

    def __init__(self, builder: ir.IRBuilder, width: int | None):
        self.b = builder
        self.width = width

    def wrap(self, t):
        return t if self.width is None else ir.VectorType(t, self.width)

    def type(self, dt: DType):
        return self.wrap(_ELEM[dt.name])

    def memory_type(self, dt: DType):
        return self.wrap(_MEMORY[dt.name])

    def const(self, value, dt: DType):
        elem = _ELEM[dt.name]
        if dt.is_floating_point:
            c = ir.Constant(elem, float(value))
        else:
            c = ir.Constant(elem, int(bool(value)) if dt is dtypes.bool_ else int(value))
        return c if self.width is None else ir.Constant(ir.VectorType(elem, self.width),
                                                        [c] * self.width)

    def splat(self, scalar):
        if self.width is None:
            return scalar
        vt = ir.VectorType(scalar.type, self.width)
        v = self.b.insert_element(ir.Constant(vt, ir.Undefined), scalar, ir.Constant(I32, 0))
        return self.b.shuffle_vector(v, ir.Constant(vt, ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, self.width), [0] * self.width))

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
    """NaN-propagating maximum/minimum (PyTorch's, not LLVM's maxnum)."""
    bld = L.b
    if not dt.is_floating_point:
        op = ">" if is_max else "<"
        return bld.select(bld.icmp_signed(op, a, b), a, b)
    r = bld.select(bld.fcmp_ordered(">" if is_max else "<", a, b), a, b)
    r = bld.select(_isnan(L, a), a, r)
    return bld.select(_isnan(L, b), b, r)


def compute(L: Lanes, op: Op, args: list, in_dts: list, out_dt: DType, attrs: dict,
            compute_dt: DType):
    """The result of `op` over `args` (values of dtypes `in_dts`), as `out_dt`.
    Arithmetic happens in `compute_dt` (the promoted type)."""
    b = L.b
    xs = [L.cast(a, d, compute_dt) for a, d in zip(args, in_dts)]
    fl = compute_dt.is_floating_point
    if op in FLOAT_OPS or op in (Op.POW, Op.GELU, Op.SILU):
        return _math(L, op, xs, attrs, compute_dt)
    if op is Op.NEG:
        return b.fneg(xs[0]) if fl else b.neg(xs[0])
    if op is Op.ABS:
        if fl:
            return b.select(b.fcmp_ordered("<", xs[0], L.const(0, compute_dt)),
                            b.fneg(xs[0]), xs[0])
        return b.select(b.icmp_signed("<", xs[0], L.const(0, compute_dt)), b.neg(xs[0]), xs[0])
    if op is Op.SIGN:
        zero = L.const(0, compute_dt)
        pos = b.fcmp_ordered(">", xs[0], zero) if fl else b.icmp_signed(">", xs[0], zero)
        neg = b.fcmp_ordered("<", xs[0], zero) if fl else b.icmp_signed("<", xs[0], zero)
        r = b.sub(L.cast(pos, dtypes.bool_, dtypes.int32),
                  L.cast(neg, dtypes.bool_, dtypes.int32))
        return L.cast(r, dtypes.int32, compute_dt)  # sign(nan) is 0, as in PyTorch
    if op is Op.RELU:
        zero = L.const(0, compute_dt)
        below = b.fcmp_ordered("<", xs[0], zero) if fl else b.icmp_signed("<", xs[0], zero)
        return b.select(below, zero, xs[0])
    if op is Op.CLAMP:
        r = xs[0]
        if attrs.get("min") is not None:
            r = _max_min(L, r, L.const(attrs["min"], compute_dt), compute_dt, True)
        if attrs.get("max") is not None:
            r = _max_min(L, r, L.const(attrs["max"], compute_dt), compute_dt, False)
        return r
    if op in (Op.ADD, Op.SUB):
        y = xs[1]
        alpha = attrs.get("alpha", 1)
        if alpha != 1:
            scale = L.const(alpha, compute_dt)
            y = b.fmul(y, scale) if fl else b.mul(y, scale)
        if fl:
            return b.fadd(xs[0], y, flags=("contract",)) if op is Op.ADD else \
                b.fsub(xs[0], y, flags=("contract",))
        return b.add(xs[0], y) if op is Op.ADD else b.sub(xs[0], y)
    if op is Op.MUL:
        if compute_dt is dtypes.bool_:
            return b.and_(xs[0], xs[1])
        return b.fmul(xs[0], xs[1], flags=("contract",)) if fl else b.mul(xs[0], xs[1])
    if op is Op.DIV:
        return b.fdiv(xs[0], xs[1])
    if op in (Op.MAXIMUM, Op.MINIMUM):
        return _max_min(L, xs[0], xs[1], compute_dt, op is Op.MAXIMUM)
    if op in _COMPARE:
        pred = _COMPARE[op]
        if fl:
            return b.fcmp_unordered(pred, xs[0], xs[1]) if pred == "!=" else \
                b.fcmp_ordered(pred, xs[0], xs[1])
        return b.icmp_signed(pred, xs[0], xs[1])
    if op is Op.LOGICAL_AND:
        return b.and_(L.cast(xs[0], compute_dt, dtypes.bool_),
                      L.cast(xs[1], compute_dt, dtypes.bool_))
    if op is Op.WHERE:
        cond = L.cast(args[0], in_dts[0], dtypes.bool_)
        return b.select(cond, L.cast(args[1], in_dts[1], out_dt),
                        L.cast(args[2], in_dts[2], out_dt))
    if op in (Op.CLONE, Op.TO_COPY):
        return L.cast(args[0], in_dts[0], out_dt)
    raise NotImplementedError(f"no native code for {op.qualified_name}")


def _math(L: Lanes, op: Op, xs: list, attrs: dict, compute_dt: DType):
    """Transcendental functions, from kiln's own vectorised math library."""
    from compiler.codegen import vmath
    b = L.b
    if op in FLOAT_OPS:
        return vmath.emit(b, FLOAT_OPS[op], xs[0])
    if op is Op.POW:
        return vmath.emit(b, "pow", xs[0], xs[1])
    if op is Op.SILU:
        return vmath.activation(b, "silu", xs[0])
    return vmath.activation(b, "gelu_tanh" if attrs.get("approximate") == "tanh" else "gelu",
                            xs[0])


_COMPARE = {Op.EQ: "==", Op.NE: "!=", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">="}
NATIVE_OPS = frozenset(FLOAT_OPS) | frozenset(_COMPARE) | {
    Op.NEG, Op.ABS, Op.SIGN, Op.RELU, Op.CLAMP, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW,
    Op.MAXIMUM, Op.MINIMUM, Op.LOGICAL_AND, Op.WHERE, Op.CLONE, Op.TO_COPY, Op.GELU,
    Op.SILU}
"""The elementwise ops this file can emit (float-only ones need a float compute type)."""
