"""LLVM values for tensor elements: types per dtype, constants, casts, and one function
per op computing a node's result from its inputs' values. The same code emits scalar
and vector (W lanes) values: only `Lanes.width` differs.

Booleans are i1 in registers and one byte in memory, as numpy stores them. The 16-bit
floats are 16-bit words in memory and float32 in registers, as eager computes them
(eager/kernels/_common.py compute_np): an op computes in float32 and its result is
rounded to its type at once, so a register of a float16 or bfloat16 value always holds
a number of that type, and values inside a fused kernel round where eager's ops do.
bfloat16 is its float32's upper half: loaded by a shift, rounded to nearest even in
integer operations (a NaN becomes the quiet NaN of its sign, as ml_dtypes makes it);
float16 goes through LLVM's half (fpext, fptrunc: F16C's vcvtph2ps and vcvtps2ph, with
AVX2 and AVX-512 alike), which quiets a signalling float16 NaN read into float32 (numpy's
conversion keeps it signalling: x.float() differs there, in that bit only).
uint8, int8 and int16 compute in their own width, so arithmetic wraps as PyTorch's.
"""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from runtime.cpu.kernel_spec import COPIES, SUPPORTED, native_ops, register_dtype  # noqa: F401
from ir.records import RECORDS, activations
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op
from runtime.llvm.toolkit import I1, I8, I32, I64, constant, intrinsic, vector

I16 = ir.IntType(16)
_ELEM = {"float32": ir.FloatType(), "float64": ir.DoubleType(), "int32": I32, "int64": I64,
         "bool": I1, "uint8": I8, "int8": I8, "int16": I16, "float16": ir.FloatType(),
         "bfloat16": ir.FloatType()}
_MEMORY = {**_ELEM, "bool": I8, "float16": I16, "bfloat16": I16}
_HALF = frozenset(dtypes.HALF)
_UNSIGNED = frozenset({dtypes.bool_, dtypes.uint8})  # integers compared unsigned


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
        """`value` in type dt, converted as dtypes.cast converts (a 16-bit float through
        float32, an integer wrapping to its width)."""
        if dt in _HALF:
            value = float(np.float32(value).astype(dt.np))
        elif dt.is_floating_point:
            value = float(value)
        elif dt is dtypes.bool_:
            value = int(bool(value))
        else:
            bits = dt.itemsize * 8
            value = int(value) & ((1 << bits) - 1)
            value -= (value >> (bits - 1)) << bits  # two's complement, as LLVM prints it
        return constant(self.type(dt), value)

    def _words(self, bits: int):
        return vector(ir.IntType(bits), self.width)

    # memory <-> registers -------------------------------------------------------------
    def from_memory(self, v, dt: DType):
        b = self.b
        if dt is dtypes.bool_:
            return b.icmp_unsigned("!=", v, ir.Constant(self.memory_type(dt), None))
        if dt is dtypes.bfloat16:  # the float32 whose upper half it is
            wide = b.shl(b.zext(v, self._words(32)), constant(self._words(32), 16))
            return b.bitcast(wide, self.type(dt))
        if dt is dtypes.float16:
            return b.fpext(b.bitcast(v, vector(ir.HalfType(), self.width)), self.type(dt))
        return v

    def to_memory(self, v, dt: DType):
        """A register's value as memory holds it (a 16-bit float's value is one of its
        type already: no rounding here)."""
        b = self.b
        if dt is dtypes.bool_:
            return b.zext(v, self.memory_type(dt))
        if dt is dtypes.bfloat16:
            bits = b.lshr(b.bitcast(v, self._words(32)), constant(self._words(32), 16))
            return b.trunc(bits, self.memory_type(dt))
        if dt is dtypes.float16:
            return b.bitcast(b.fptrunc(v, vector(ir.HalfType(), self.width)),
                             self.memory_type(dt))
        return v

    def round_half(self, v, dt: DType):
        """float32 `v` rounded to the 16-bit float dt (to nearest, ties to even), still
        in a float32 register."""
        b = self.b
        if dt is dtypes.float16:
            return b.fpext(b.fptrunc(v, vector(ir.HalfType(), self.width)), v.type)
        words = self._words(32)
        bits = b.bitcast(v, words)
        lowest_kept = b.and_(b.lshr(bits, constant(words, 16)), constant(words, 1))
        rounded = b.and_(b.add(b.add(bits, constant(words, 0x7FFF)), lowest_kept),
                         constant(words, 0xFFFF0000 - (1 << 32)))
        quiet_nan = b.or_(b.and_(bits, constant(words, -(1 << 31))),
                          constant(words, 0x7FC00000))
        return b.bitcast(b.select(_isnan(self, v), quiet_nan, rounded), v.type)

    # casts ------------------------------------------------------------------------
    def cast(self, v, src: DType, dst: DType):
        """`v` of type src converted to dst as dtypes.cast converts: into a 16-bit float
        through float32, a float into a narrow integer through int32 (truncating; NaN,
        inf and numbers beyond int32 give its minimum, so 0 in the narrow type)."""
        if src is dst:
            return v
        b, to = self.b, self.type(dst)
        if dst is dtypes.bool_:
            zero = self.const(0, src)
            return b.fcmp_unordered("!=", v, zero) if src.is_floating_point else \
                b.icmp_unsigned("!=", v, zero)
        if dst in _HALF:  # through float32, then rounded (exact from bool, uint8, int8)
            f32 = dtypes.float32
            single = v if src in _HALF else self.cast(v, src, f32)
            return single if src in (dtypes.bool_, dtypes.uint8, dtypes.int8) else \
                self.round_half(single, dst)
        src = register_dtype(src)
        if src is dst:
            return v
        if src is dtypes.bool_:
            return b.uitofp(v, to) if dst.is_floating_point else b.zext(v, to)
        if src.is_floating_point and dst.is_floating_point:
            return b.fpext(v, to) if dst.itemsize > src.itemsize else b.fptrunc(v, to)
        if src.is_floating_point:
            if dst.itemsize >= 4:
                return b.fptosi(v, to)
            return b.trunc(self._to_int32(v, src), to)
        if dst.is_floating_point:
            return b.uitofp(v, to) if src is dtypes.uint8 else b.sitofp(v, to)
        if dst.itemsize > src.itemsize:
            return b.zext(v, to) if src is dtypes.uint8 else b.sext(v, to)
        return b.trunc(v, to) if dst.itemsize < src.itemsize else v

    def _to_int32(self, v, src: DType):
        """Float v truncated to int32, its minimum where v is NaN or beyond int32 (as x86's
        cvtt instructions give it, numpy's conversion; LLVM's fptosi would be poison, so
        it converts 0 there: the CUDA emulator refuses any poison conversion)."""
        b = self.b
        inside = b.fcmp_ordered("<", intrinsic(b, "fabs", [v], v.type, [v.type]),
                                self.const(2.0 ** 31, src))
        converted = b.fptosi(b.select(inside, v, self.const(0, src)),
                             self.type(dtypes.int32))
        return b.select(inside, converted, self.const(-(1 << 31), dtypes.int32))


def _isnan(L: Lanes, x):
    return L.b.fcmp_unordered("uno", x, x)


def _max_min(L: Lanes, a, b, dt: DType, is_max: bool):
    """NaN-propagating maximum/minimum (PyTorch's, not LLVM's maxnum); a tie gives `a`,
    as PyTorch's std::max and std::min do (-0.0 against +0.0 keeps a's sign)."""
    bld = L.b
    if not dt.is_floating_point:  # bools compare unsigned: True is 1, not -1
        op = ">" if is_max else "<"
        compare = bld.icmp_unsigned if dt in _UNSIGNED else bld.icmp_signed
        return bld.select(compare(op, a, b), a, b)
    r = bld.select(bld.fcmp_ordered(">" if is_max else "<", b, a), b, a)
    r = bld.select(_isnan(L, a), a, r)
    return bld.select(_isnan(L, b), b, r)


class Elements:
    """What an op record's emitter computes with (ir/records.py: `emit(E, *values)`):
    arithmetic, comparisons and math on values of one compute dtype, scalars or lanes.
    `contract`: a product and a sum may become one FMA (off where the result must be
    numpy's, operation by operation: the 16-bit floats' float32 arithmetic)."""

    def __init__(self, L: Lanes, dt: DType, contract: bool = True):
        self.L, self.b, self.dt, self.fl = L, L.b, dt, dt.is_floating_point
        self.flags = ("contract",) if contract else ()

    def const(self, value):
        return self.L.const(value, self.dt)

    def neg(self, x):
        return self.b.fneg(x) if self.fl else self.b.neg(x)

    def add(self, x, y):
        if self.dt is dtypes.bool_:  # True + True is True (an i1 add would wrap to 0)
            return self.b.or_(x, y)
        return self.b.fadd(x, y, flags=self.flags) if self.fl else self.b.add(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y, flags=self.flags) if self.fl else self.b.sub(x, y)

    def mul(self, x, y):
        if self.dt is dtypes.bool_:
            return self.b.and_(x, y)
        return self.b.fmul(x, y, flags=self.flags) if self.fl else self.b.mul(x, y)

    def fma(self, x, y, z):
        """x * y + z, of floats rounded once (llvm.fma, whatever `contract` says); of
        integers the product and the sum, wrapping."""
        if self.fl:
            return intrinsic(self.b, "fma", [x, y, z], x.type, [x.type])
        return self.add(self.mul(x, y), z)

    def div(self, x, y):
        """x / y; of integers C's quotient, toward zero (see _divisor)."""
        if self.fl:
            return self.b.fdiv(x, y)
        if self.dt in _UNSIGNED:
            return self.b.udiv(x, self._divisor(y))
        return self.select(self.eq(y, self.const(-1)), self.neg(x),
                           self.b.sdiv(x, self._divisor(y)))

    def abs(self, x):
        """|x|: a float's sign bit cleared (abs(-0.0) is 0.0 and abs(-nan) a nan without
        its sign, as numpy and PyTorch give them), an integer's 0 - x where negative."""
        if self.fl:
            return intrinsic(self.b, "fabs", [x], x.type, [x.type])
        if self.dt in _UNSIGNED:
            return x
        return self.b.select(self.b.icmp_signed("<", x, self.const(0)), self.b.neg(x), x)

    def _compare(self, pred, x, y):
        if self.fl:  # NaN compares unequal to everything, itself included
            return self.b.fcmp_unordered(pred, x, y) if pred == "!=" else \
                self.b.fcmp_ordered(pred, x, y)
        if self.dt in _UNSIGNED:
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
        """C's fmod: x - trunc(x / y) * y, exactly (LLVM's frem); of integers C's % (see
        _divisor)."""
        if self.fl:
            return self.b.frem(x, y)
        if self.dt in _UNSIGNED:
            return self.b.urem(x, self._divisor(y))
        return self.select(self.eq(y, self.const(-1)), self.const(0),
                           self.b.srem(x, self._divisor(y)))

    def _divisor(self, y):
        """An integer divisor that LLVM defines a division by: 1 in place of 0 (kiln's CPU
        raises ZeroDivisionError; a generated kernel gives x, PyTorch's CUDA an unspecified
        value) and, signed, in place of -1 (the minimum / -1 overflows: div and fmod give
        -x, wrapping, and 0 there themselves)."""
        one = self.const(1)
        bad = self.eq(y, self.const(0))
        if self.dt not in _UNSIGNED:
            bad = self.or_(bad, self.eq(y, self.const(-1)))
        return self.select(bad, one, y)

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
        if not self.fl:  # (unsigned: never; x != x is false in every lane)
            return self._compare("<", x, self.const(0)) if self.dt not in _UNSIGNED \
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
    record's emitter over the values cast to `compute_dt` (the promoted type; float32
    for the 16-bit floats, the result rounded to out_dt once, as eager's numpy does)."""
    if op in COPIES:
        return L.cast(args[0], in_dts[0], out_dt)
    pointwise = RECORDS[op].pointwise if op in native_ops() else None
    if pointwise is None or pointwise.emit is None:
        raise NotImplementedError(f"no native code for {op.qualified_name}")
    register = register_dtype(compute_dt)
    E = Elements(L, register, contract=register is compute_dt)
    xs = [L.cast(a, d, register) for a, d in zip(args, in_dts)]
    if pointwise.scaled:
        attrs = dict(attrs)
        scale = attrs.pop(pointwise.scaled, 1)
        if scale != 1:  # of the tensors' type, as eager's alpha (0.3 rounds in bfloat16)
            if compute_dt in _HALF:
                scale = float(np.asarray(scale, compute_dt.np))
            xs[-1] = E.mul(xs[-1], E.const(scale))
    out = pointwise.emit(E, *xs, **attrs)
    return L.round_half(out, out_dt) if out_dt in _HALF else out


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
