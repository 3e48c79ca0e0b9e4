"""What each LLVM operation computes, as Python functions of the emulator's values
(values.py), in tables keyed by the operation's name: integer and float binary
operations, compares, casts and the math intrinsics. A table entry is made once per
instruction type (its width, its float precision) and returns a plain function of the
operands; vector operands go lane by lane (`lanewise`).

Every f32 result is rounded to float32 (double rounding through Python's float64 is exact
for +, -, *, / and sqrt; fma is rounded once, by hand). Math functions compute in
float64 and round once, so approximate GPU instructions (ex2.approx, tanh.approx) are
emulated more exactly than the GPU computes them.
"""
from __future__ import annotations

import math
import struct
from fractions import Fraction

import llvmlite.ir as ir

from runtime.cuda.emulator.values import (EmulationError, float_rounding, from_bytes,
                                          is_float, round_f32, signed, to_bytes)

INF = math.inf
NAN = math.nan


def lanewise(fn, ty: ir.Type):
    """fn over each lane when `ty` is a vector type; fn itself otherwise."""
    if not isinstance(ty, ir.VectorType):
        return fn
    return lambda *lanes: tuple(map(fn, *lanes))


def rounded(fn, ty: ir.Type):
    """fn with its float result rounded to `ty`'s precision."""
    rounding = float_rounding(ty)
    if rounding is None:
        return fn
    return lambda *args: rounding(fn(*args))


# integers -----------------------------------------------------------------------------
def _division(divide):
    """divide(a, b), refusing b == 0 (undefined behaviour in LLVM, a trap or garbage on
    a GPU)."""
    def division(a, b):
        if b == 0:
            raise EmulationError(f"integer division by zero ({a} / 0)")
        return divide(a, b)
    return division


def _sdiv(a, b, width):
    x, y = signed(a, width), signed(b, width)
    quotient = abs(x) // abs(y)
    return (quotient if (x < 0) == (y < 0) else -quotient) & ((1 << width) - 1)


def _srem(a, b, width):
    x, y = signed(a, width), signed(b, width)
    remainder = abs(x) % abs(y)
    return (remainder if x >= 0 else -remainder) & ((1 << width) - 1)


_INTEGER = {
    "add": lambda m, w: lambda a, b: (a + b) & m,
    "sub": lambda m, w: lambda a, b: (a - b) & m,
    "mul": lambda m, w: lambda a, b: (a * b) & m,
    "and": lambda m, w: lambda a, b: a & b,
    "or": lambda m, w: lambda a, b: a | b,
    "xor": lambda m, w: lambda a, b: a ^ b,
    "shl": lambda m, w: lambda a, b: (a << b) & m if b < w else 0,
    "lshr": lambda m, w: lambda a, b: a >> b,
    "ashr": lambda m, w: lambda a, b: (signed(a, w) >> min(b, w - 1)) & m,
    "udiv": lambda m, w: _division(lambda a, b: a // b),
    "urem": lambda m, w: _division(lambda a, b: a % b),
    "sdiv": lambda m, w: _division(lambda a, b: _sdiv(a, b, w)),
    "srem": lambda m, w: _division(lambda a, b: _srem(a, b, w)),
}


# floats -------------------------------------------------------------------------------
def _fdiv(a, b):
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return NAN
        return math.copysign(INF, a) * math.copysign(1.0, b)


def _frem(a, b):
    try:
        return math.fmod(a, b)
    except ValueError:
        return NAN


_FLOAT = {
    "fadd": lambda a, b: a + b,
    "fsub": lambda a, b: a - b,
    "fmul": lambda a, b: a * b,
    "fdiv": _fdiv,
    "frem": _frem,
}


BINARY_OPS = frozenset(_INTEGER) | frozenset(_FLOAT)


def binary(opname: str, ty: ir.Type):
    """The function of an `opname` instruction on operands of type `ty`."""
    scalar = ty.element if isinstance(ty, ir.VectorType) else ty
    if opname in _INTEGER and isinstance(scalar, ir.IntType):
        fn = _INTEGER[opname]((1 << scalar.width) - 1, scalar.width)
    elif opname in _FLOAT and is_float(scalar):
        fn = rounded(_FLOAT[opname], scalar)
    else:
        raise EmulationError(f"the emulator does not know {opname} on {ty}")
    return lanewise(fn, ty)


def _fneg(a):
    return -a


_ATOMIC = {
    "xchg": lambda old, value: value, "add": None, "sub": None, "and": None, "or": None,
    "xor": None, "fadd": None, "fsub": None,
    "max": "smax", "min": "smin", "umax": "umax", "umin": "umin",
    "fmax": "maxnum", "fmin": "minnum",
}


def atomic(operation: str, ty: ir.Type):
    """The new value an atomicrmw `operation` stores, as a function of (old, operand)."""
    if operation not in _ATOMIC:
        raise EmulationError(f"the emulator does not know atomicrmw {operation}")
    how = _ATOMIC[operation]
    if how is None:
        return binary(operation, ty)
    if isinstance(how, str):
        return math_intrinsic(f"llvm.{how}.x", ty)
    return how


# compares -----------------------------------------------------------------------------
_FLOAT_COMPARE = {
    "false": lambda a, b: 0,
    "true": lambda a, b: 1,
    "oeq": lambda a, b: int(a == b),
    "one": lambda a, b: int(a < b or a > b),
    "ogt": lambda a, b: int(a > b),
    "oge": lambda a, b: int(a >= b),
    "olt": lambda a, b: int(a < b),
    "ole": lambda a, b: int(a <= b),
    "ord": lambda a, b: int(a == a and b == b),
    "ueq": lambda a, b: int(not (a < b or a > b)),
    "une": lambda a, b: int(a != b),
    "ugt": lambda a, b: int(not a <= b),
    "uge": lambda a, b: int(not a < b),
    "ult": lambda a, b: int(not a >= b),
    "ule": lambda a, b: int(not a > b),
    "uno": lambda a, b: int(a != a or b != b),
}


def _integer_compare(op: str, width: int):
    if op in ("eq", "ne", "ugt", "uge", "ult", "ule"):
        return {"eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
                "ugt": lambda a, b: int(a > b), "uge": lambda a, b: int(a >= b),
                "ult": lambda a, b: int(a < b), "ule": lambda a, b: int(a <= b)}[op]
    s = 1 << (width - 1)  # flipping the sign bit orders signed values as unsigned
    return {"sgt": lambda a, b: int(a ^ s > b ^ s), "sge": lambda a, b: int(a ^ s >= b ^ s),
            "slt": lambda a, b: int(a ^ s < b ^ s), "sle": lambda a, b: int(a ^ s <= b ^ s)}[op]


def compare(instr) -> callable:
    ty = instr.operands[0].type
    scalar = ty.element if isinstance(ty, ir.VectorType) else ty
    if instr.opname == "fcmp":
        fn = _FLOAT_COMPARE[instr.op]
    else:
        fn = _integer_compare(instr.op, 64 if isinstance(scalar, ir.PointerType)
                              else scalar.width)
    return lanewise(fn, ty)


# casts --------------------------------------------------------------------------------
def _to_integer(width: int, is_signed: bool):
    low, high = (-(1 << (width - 1)), 1 << (width - 1)) if is_signed else (0, 1 << width)

    def convert(x):
        if not (x == x and -INF < x < INF and low <= math.trunc(x) < high):
            kind = "i" if is_signed else "u"
            raise EmulationError(f"the float {x!r} does not fit in {kind}{width} "
                                 "(LLVM makes the conversion poison)")
        return math.trunc(x) & ((1 << width) - 1)
    return convert


def _to_float(ty: ir.Type, width: int, is_signed: bool):
    rounding = float_rounding(ty)

    def convert(x):
        value = signed(x, width) if is_signed else x
        if rounding is not None and abs(value) > 1 << 53:  # one rounding, not two:
            drop = abs(value).bit_length() - 53            # round to odd at 53 bits
            kept = abs(value) >> drop | int(abs(value) & ((1 << drop) - 1) != 0)
            value = math.copysign(math.ldexp(kept, drop), value)
        return rounding(float(value)) if rounding else float(value)
    return convert


def _bitcast(source: ir.Type, target: ir.Type):
    return lambda x: from_bytes(target, to_bytes(source, x))


def cast(opname: str, source: ir.Type, target: ir.Type):
    """The function of a cast; None where the value passes unchanged (zext of an
    unsigned value, pointer casts, fpext, a bitcast between pointers)."""
    src = source.element if isinstance(source, ir.VectorType) else source
    dst = target.element if isinstance(target, ir.VectorType) else target
    if opname in ("zext", "addrspacecast", "fpext") or (
            opname == "bitcast" and source == target) or (
            opname == "bitcast" and isinstance(source, ir.PointerType)
            and isinstance(target, ir.PointerType)):
        return None
    if opname == "bitcast":
        return _bitcast(source, target)
    if opname in ("trunc", "ptrtoint", "inttoptr"):
        mask = (1 << (dst.width if isinstance(dst, ir.IntType) else 64)) - 1
        fn = (lambda x: x & mask)
    elif opname == "sext":
        sign, mask = 1 << (src.width - 1), (1 << dst.width) - 1
        fn = (lambda x: ((x ^ sign) - sign) & mask)
    elif opname in ("fptosi", "fptoui"):
        fn = _to_integer(dst.width, opname == "fptosi")
    elif opname in ("sitofp", "uitofp"):
        fn = _to_float(dst, src.width, opname == "sitofp")
    elif opname == "fptrunc":
        fn = float_rounding(dst)
    else:
        raise EmulationError(f"the emulator does not know the cast {opname}")
    return lanewise(fn, target)


# math intrinsics ----------------------------------------------------------------------
def _fma_f32(a, b, c):
    """a * b + c rounded once to float32: the product of two floats32 is exact in
    float64, so only a sum that lands exactly between two float32s needs its error."""
    product = a * b
    total = product + c
    result = round_f32(total)
    if result == total or total != total or total in (INF, -INF):
        return result
    virtual = total - product
    error = (product - (total - virtual)) + (c - virtual)
    bits = struct.unpack("<Q", struct.pack("<d", total))[0]
    if error == 0 or bits & 0x1FFFFFFF != 0x10000000:
        return result
    return round_f32(math.nextafter(total, INF if error > 0 else -INF))


def _fma_f64(a, b, c):
    if not all(map(math.isfinite, (a, b, c))):
        return a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    try:
        return float(exact)
    except OverflowError:  # beyond double's range: IEEE fma rounds to infinity
        return INF if exact > 0 else -INF


def _safe(fn, on_overflow=INF):
    def call(*args):
        try:
            return fn(*args)
        except OverflowError:
            return on_overflow
        except ValueError:
            return NAN
    return call


def _integral(fn):
    def call(x):
        if not math.isfinite(x):
            return x
        return math.copysign(float(fn(x)), x)
    return call


def _round_half_away(x):
    t = math.trunc(x)
    return t + (math.copysign(1, x) if abs(x - t) >= 0.5 else 0)


def _log(fn):
    def call(x):
        if x == 0:
            return -INF
        return NAN if x < 0 or x != x else (x if x == INF else fn(x))
    return call


def _maxnum(a, b):
    return b if a != a else a if b != b else (a if a > b else b)


def _minnum(a, b):
    return b if a != a else a if b != b else (a if a < b else b)


def _maximum(a, b):
    if a != a or b != b:
        return NAN
    if a == b == 0:
        return b if math.copysign(1, a) < 0 else a
    return a if a > b else b


def _minimum(a, b):
    if a != a or b != b:
        return NAN
    if a == b == 0:
        return a if math.copysign(1, a) < 0 else b
    return a if a < b else b


def _rsqrt(x):
    return _fdiv(1.0, _safe(math.sqrt)(x))


# float intrinsics by LLVM name (the part before the type suffix) and NVVM's own names
FLOAT_MATH = {
    "fabs": abs, "sqrt": _safe(math.sqrt), "floor": _integral(math.floor),
    "ceil": _integral(math.ceil), "trunc": _integral(math.trunc),
    "rint": _integral(round), "nearbyint": _integral(round), "roundeven": _integral(round),
    "round": _integral(_round_half_away), "copysign": math.copysign,
    "maxnum": _maxnum, "minnum": _minnum, "maximum": _maximum, "minimum": _minimum,
    "exp2": _safe(lambda x: 2.0 ** x), "exp": _safe(math.exp), "log": _log(math.log),
    "log2": _log(math.log2), "log10": _log(math.log10), "sin": _safe(math.sin),
    "cos": _safe(math.cos), "pow": _safe(math.pow), "tanh": math.tanh,
}
NVVM_MATH = {
    "ex2.approx.f": FLOAT_MATH["exp2"], "ex2.approx.ftz.f": FLOAT_MATH["exp2"],
    "ex2.approx.d": FLOAT_MATH["exp2"], "tanh.approx.f": math.tanh,
    "lg2.approx.f": FLOAT_MATH["log2"], "lg2.approx.ftz.f": FLOAT_MATH["log2"],
    "sin.approx.f": FLOAT_MATH["sin"], "cos.approx.f": FLOAT_MATH["cos"],
    "sqrt.approx.f": FLOAT_MATH["sqrt"], "sqrt.rn.f": FLOAT_MATH["sqrt"],
    "rsqrt.approx.f": _rsqrt, "rsqrt.approx.ftz.f": _rsqrt,
    "rcp.approx.ftz.f": lambda x: _fdiv(1.0, x), "rcp.rn.f": lambda x: _fdiv(1.0, x),
    "div.approx.f": _fdiv, "div.full.f": _fdiv, "div.rn.f": _fdiv,
    "fmax.f": _maxnum, "fmin.f": _minnum, "fmax.d": _maxnum, "fmin.d": _minnum,
    "fabs.f": abs, "fabs.d": abs, "floor.f": FLOAT_MATH["floor"],
    "ceil.f": FLOAT_MATH["ceil"], "trunc.f": FLOAT_MATH["trunc"],
    "round.f": FLOAT_MATH["rint"], "saturate.f": lambda x: min(max(x, 0.0), 1.0),
}


def _integer_math(name: str, width: int):
    mask, s = (1 << width) - 1, 1 << (width - 1)
    table = {
        "smax": lambda a, b: a if a ^ s > b ^ s else b,
        "smin": lambda a, b: a if a ^ s < b ^ s else b,
        "umax": max, "umin": min,
        "abs": lambda a, poison=0: abs(signed(a, width)) & mask,
        "ctpop": lambda a: bin(a).count("1"),
        "ctlz": lambda a, poison=0: width - a.bit_length(),
        "cttz": lambda a, poison=0: (a & -a).bit_length() - 1 if a else width,
    }
    return table.get(name)


def math_intrinsic(name: str, ret: ir.Type):
    """The function of the math intrinsic `name` (llvm.fma.f32, llvm.smax.i32,
    llvm.nvvm.ex2.approx.f, ...) returning `ret`; None when it is not one."""
    scalar = ret.element if isinstance(ret, ir.VectorType) else ret
    parts = name.split(".")
    if name.startswith("llvm.nvvm."):
        fn = NVVM_MATH.get(name[len("llvm.nvvm."):])
        if name == "llvm.nvvm.fma.rn.f":
            fn = _fma_f32
        return None if fn is None else rounded(fn, scalar)
    base = ".".join(parts[1:-1])
    if base in ("fma", "fmuladd"):  # fmuladd is one fma on NVPTX
        fn = _fma_f32 if isinstance(scalar, ir.FloatType) else rounded(_fma_f64, scalar)
        return lanewise(fn, ret)
    if base in FLOAT_MATH and is_float(scalar):
        return lanewise(rounded(FLOAT_MATH[base], scalar), ret)
    if isinstance(scalar, ir.IntType):
        fn = _integer_math(base, scalar.width)
        return None if fn is None else lanewise(fn, ret)
    return None
