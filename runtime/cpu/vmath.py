"""kiln's vectorised math library: exp, log, tanh, ... written out as LLVM IR, so a vector
loop that uses them calls no scalar libm function.

    y = vmath.emit(builder, "exp", x)   # x: float, double, <N x float> or <N x double>

Each (function, type) is one internal, alwaysinline helper in the builder's module, named
`kiln.vmath.<name>.<type>` (kiln.vmath.exp.v16f32), defined on first use and reused; O3
inlines it. The reduction of huge sin, cos and tan arguments is one internal function a
module that is not inlined (kiln.vmath.payne_hanek), called lane by lane on a branch
taken only when some lane needs it. In an NVPTX module the body is emitted where it is used instead (the same PTX
after O3), since the CUDA emulator (runtime/cuda/emulator/launch.py) calls no functions. The
methods are SLEEF's and fdlibm's: Cody-Waite reduction for exp and expm1, fdlibm's log(1+f)
= f - f^2/2 + s(f^2/2 + R(s^2)) with s = f/(2+f) for log and log1p, fdlibm's rational erf
for double, and polynomials fitted here (mpmath.chebyfit of the function named beside them,
rounded to the type) for the rest. Special values (inf, nan, -0.0, subnormal inputs and
results) come out as numpy gives them (C99 Annex F).

Measured accuracy, max error in ulp. float32: against numpy float64 on every 97th float32
bit pattern (the tests take every 1021st) and every value within 4096 of the edges
(overflow, underflow, saturation, subnormals, method boundaries). float64: against numpy in
x87 long double on 25 million random bit patterns, uniform and log-uniform samples and
values around the same edges; erf against mpmath. pow: on 0.7 million (float32) and 7
million (float64) pairs spanning overflow and underflow, x near 1 with huge y, negative x.

    function   float32  float64
    exp         0.96     0.98
    expm1       1.44     1.81
    log         0.82     0.83
    log1p       0.83     0.81
    tanh        0.81     0.82
    sigmoid     1.45     1.45     n / (1 + e), the quotient corrected for 1 + e's rounding
    erf         1.03     0.79     (1.00 against math.erf, which the tests use)
    sqrt        0.50     0.50     llvm.sqrt: correctly rounded
    rsqrt       0.50     0.50     1 / sqrt, corrected for the rounding of sqrt
    pow         0.50     1.13     float32 is computed in double: correctly rounded on
                                  every point tried
    sin, cos    0.50     0.77     Cody-Waite by pi/2 in three doubles, r a double-double,
                                  fdlibm's kernels; Payne-Hanek for |x| >= 2^40
                                  (vmath_trig.TRIG_REDUCED, vmath_payne_hanek.py): 0.50
                                  and 0.76 there against mpmath (66,000 random and
                                  hard arguments up to the largest value)
    tan         0.50     1.99     sin r / cos r of the same reductions (2.08 beyond 2^40)
    exp2        0.50     1.12     exp of x ln2 as a double-double
    sinh        0.50     2.25     from expm1; cosh from exp
    cosh        0.50     1.48
    asinh       0.50     1.46     log1p forms (log(x) + ln2 for huge x)
    acosh       0.50     1.59
    atanh       0.50     1.76
    atan        0.50     0.78     fdlibm's s_atan.c
    atan2       0.50     1.25     atan(|y/x|) in its quadrant, C99's zeros and infinities
    asin        0.50     1.98     atan2(x, sqrt((1 - x)(1 + x)))
    acos        0.50     1.61     atan2(sqrt((1 - x)(1 + x)), x)

The float32 forms of the functions from sin on compute in double and round once
(correctly rounded on every point of the tests' float32 sweep: shown as 0.50).
exp_nonpositive (PARTIAL: x <= 0 or nan) gives exp's value bit for bit: checked on every
float32 x <= 0 and on the float64 sample, and by the tests on their sweeps.

sin and the functions after it are measured on the tests' sweeps only (every 1021st
float32 bit pattern, the float64 sample), against numpy in double / long double.

Everything uses llvm.fma, so it assumes hardware FMA (x86-64-v3, AArch64).
"""
from __future__ import annotations

import llvmlite.ir as ir

# float64 erf uses fdlibm's four ranges: the tables of eager's numpy erf
from runtime.cpu.erf import (ERF_ERX, ERF_PA, ERF_PP, ERF_QA, ERF_QQ, ERF_RA, ERF_RB,
                             ERF_SA, ERF_SB)
from runtime.cpu import vmath_trig
from runtime.llvm.toolkit import Target, constant, define, intrinsic, mangle, vector

NAMES = ("exp", "log", "tanh", "sigmoid", "erf", "sqrt", "rsqrt", "pow", "expm1", "log1p",
         "sin", "cos", "tan", "exp2", "sinh", "cosh", "asinh", "acosh", "atanh", "atan",
         "atan2", "asin", "acos")
"""The functions, each defined for every argument."""
PARTIAL = {"exp_nonpositive": "x <= 0 or nan"}
"""Functions for callers that know where their arguments lie (a row kernel's exp(x - max)),
with the arguments they are defined for: elsewhere their results are meaningless."""

INF, NAN = float("inf"), float("nan")

# e^r - 1 = r + r^2 P(r) on |r| <= ln2/2, fitted to (e^r - 1 - r) / r^2
EXPM1_P = ((0.5, 0.16666667, 0.041666463, 0.0083333105, 0.00139339, 0.00019891269),
           (0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333325973,
            0.0013888888888883633, 0.0001984126987538548, 2.480158732595111e-05,
            2.7557254685728803e-06, 2.755727313289604e-07, 2.5105513541847086e-08,
            2.0914898727175524e-09))
LOG2E = 1.4426950408889634
LN2_CW = ((0.693145751953125, 1.4286068e-06),  # ln2 in two parts; q * hi is exact (SLEEF)
          (0.69314718055966295651160180568695068359375, 2.8235290563031577e-13))
# fdlibm's ln2 split and log(1+f) polynomial in s^2 (e_logf.c, e_log.c)
LN2_LOG = ((0.6931381225585938, 9.05800061445916e-06),
           (6.93147180369123816490e-01, 1.90821492927058770002e-10))
LG = ((0.6666666269302368, 0.40000972151756287, 0.2849878668785095, 0.24279078841209412),
      (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01))
# tanh(x) = x + x^3 P(x^2) on |x| < 0.5625, fitted to (tanh(x)/x - 1) / x^2
TANH_P = ((-0.33333334, 0.13333333, -0.05396802, 0.02186497, -0.008821457, 0.0033900263,
           -0.0009483059),
          (-0.3333333333333333, 0.13333333333333333, -0.05396825396825185,
           0.021869488536007134, -0.008863235524525068, 0.0035921279201211087,
           -0.0014558327639006777, 0.0005900122238604031, -0.00023903091817063964,
           9.647636736943323e-05, -3.793165148079466e-05, 1.316642215852823e-05,
           -2.910322883401469e-06))
# exp_nonpositive: 2^q made 2^up times too large (normal wherever e^x is not 0), and the
# x it clamps to, far below where e^x rounds to 0, where r is still small
EXP_UP = (32, 64)
EXP_FLOOR = (-200.0, -1600.0)
TANH_SMALL = 0.5625
TANH_ONE = (9.5, 19.5)  # tanh rounds to 1 beyond

# float erf: x (1 + P(x^2)) below 1, fitted to erf(x)/x - 1; 1 - e^(-x^2) Q(x - 2.46) on
# [1, 3.92], fitted to erfc(x) e^(x^2); erf rounds to 1 from 3.9192059 on
ERF32_P = (0.12837917, -0.37612626, 0.11283594, -0.026854211, 0.0051890872, -0.00080168643,
           7.875875e-05)
ERFC32_Q = (0.21382067, -0.07638144, 0.025922518, -0.008408349, 0.0026180218, -0.0007860494,
            0.00023007514, -6.466663e-05, 1.595671e-05, -4.289409e-06, 1.8340565e-06,
            -4.564932e-07)
ERF32_ONE = 3.92
# double erf: fdlibm's s_erf.c; lowest power first, each from the bits the library lists
# double pow's log: log(1+f) = 2s + s^3 (2/3 + s^2 A(s^2)), A fitted on s^2 <= 0.0295
ATANH_A = (0.4, 0.28571428571428564, 0.22222222222228522, 0.18181818179629908,
           0.15384615765102574, 0.1333329622582821, 0.1176682645681458, 0.10456028749030954,
           0.10765126886769226)
TWO_THIRDS = (0.6666666666666666, 3.700743415417188e-17)
def emit(builder: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    """Call vmath's `name` on `args` (all of one float or double scalar or vector type) at
    the builder's position; the result has the arguments' type."""
    if name not in _BODIES:
        raise ValueError(f"no vmath function {name!r}; there are "
                         f"{', '.join(NAMES + tuple(PARTIAL))}")
    body, arity = _BODIES[name]
    if len(args) != arity:
        raise TypeError(f"vmath {name} takes {arity} argument(s), got {len(args)}")
    ty = args[0].type
    if not _is_float(ty) or any(a.type != ty for a in args):
        raise TypeError(f"vmath {name} needs float or double scalars or vectors of one type, "
                        f"got {', '.join(str(a.type) for a in args)}")
    if Target.of(builder.module).is_nvptx:  # straight-line code where it is used: the
        return body(_Math(builder, ty), *args)  # CUDA emulator runs intrinsic calls only
    fname = f"kiln.vmath.{name}.{mangle(ty)}"
    fn = builder.module.globals.get(fname)
    if fn is None:
        fn, inner = define(builder.module, fname, ir.FunctionType(ty, [ty] * arity),
                           linkage="internal", attributes=("alwaysinline",))
        inner.ret(body(_Math(inner, ty), *fn.args))
    return builder.call(fn, args)


def _is_float(ty: ir.Type) -> bool:
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    return isinstance(elem, (ir.FloatType, ir.DoubleType))


class _Math:
    """Builds the IR of one function body for a float type T (scalar or vector): Python
    numbers become constants of T's shape, integer operations act on the same-width
    integer view of T, and intrinsics are declared under T's suffix."""

    def __init__(self, builder: ir.IRBuilder, ty: ir.Type):
        self.b, self.ty = builder, ty
        self.lanes = ty.count if isinstance(ty, ir.VectorType) else None
        self.f64 = mangle(ty).endswith("f64")
        self.mant, self.bias = (52, 1023) if self.f64 else (23, 127)
        self.ity = self.shaped(ir.IntType(64 if self.f64 else 32))

    def shaped(self, elem: ir.Type) -> ir.Type:
        return vector(elem, self.lanes)

    def pick(self, pair):
        """The float32 or float64 member of a (float32, float64) pair."""
        return pair[1] if self.f64 else pair[0]

    def f(self, x):
        return constant(self.ty, float(x)) if isinstance(x, (int, float)) else x

    def i(self, x):
        return constant(self.ity, int(x)) if isinstance(x, int) else x

    def call(self, name, *args):
        """The intrinsic llvm.<name> for T on args (numbers made constants of T)."""
        return intrinsic(self.b, name, [self.f(a) for a in args], self.ty, (self.ty,))

    # float arithmetic, comparisons (ordered: false on nan) and selection
    def add(self, x, y): return self.b.fadd(self.f(x), self.f(y))
    def sub(self, x, y): return self.b.fsub(self.f(x), self.f(y))
    def mul(self, x, y): return self.b.fmul(self.f(x), self.f(y))
    def div(self, x, y): return self.b.fdiv(self.f(x), self.f(y))
    def neg(self, x): return self.b.fneg(x)
    def fma(self, x, y, z): return self.call("fma", x, y, z)
    def abs(self, x): return self.call("fabs", x)
    def copysign(self, x, sign): return self.call("copysign", x, sign)
    def rint(self, x): return self.call("rint", x)
    def trunc(self, x): return self.call("trunc", x)
    def lt(self, x, y): return self.b.fcmp_ordered("<", self.f(x), self.f(y))
    def gt(self, x, y): return self.b.fcmp_ordered(">", self.f(x), self.f(y))
    def ge(self, x, y): return self.b.fcmp_ordered(">=", self.f(x), self.f(y))
    def eq(self, x, y): return self.b.fcmp_ordered("==", self.f(x), self.f(y))
    def ne(self, x, y): return self.b.fcmp_ordered("!=", self.f(x), self.f(y))
    def isnan(self, x): return self.b.fcmp_unordered("uno", x, x)
    def select(self, cond, x, y): return self.b.select(cond, self.f(x), self.f(y))

    def below(self, x, limit):
        """min(x, limit), and limit for nan (callers put nan back at the end)."""
        return self.select(self.lt(x, limit), x, limit)

    def clamp(self, x, lo, hi):
        return self.below(self.select(self.gt(x, lo), x, lo), hi)

    def poly(self, x, coefficients):
        """c0 + c1 x + c2 x^2 + ... by Horner's rule with fused multiply-adds."""
        acc = self.f(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = self.fma(acc, x, c)
        return acc

    # the integer view
    def bits(self, x): return self.b.bitcast(x, self.ity)
    def from_bits(self, n): return self.b.bitcast(n, self.ty)
    def iadd(self, n, k): return self.b.add(self.i(n), self.i(k))
    def isub(self, n, k): return self.b.sub(self.i(n), self.i(k))
    def ishr(self, n, k): return self.b.ashr(self.i(n), self.i(k))
    def iand(self, n, k): return self.b.and_(self.i(n), self.i(k))
    def to_int(self, x): return self.b.fptosi(x, self.ity)
    def to_float(self, n): return self.b.sitofp(n, self.ty)

    def pow2(self, n):
        """2^n for integers n in the normal exponent range, built in the exponent bits."""
        return self.from_bits(self.b.shl(self.iadd(n, self.bias), self.i(self.mant)))

    # what the functions in other files (vmath_trig.py) build on
    def double(self):
        """This builder's _Math for doubles of the same shape."""
        return _Math(self.b, self.shaped(ir.DoubleType()))

    def on(self, builder: ir.IRBuilder, ty: ir.Type):
        """A _Math for `ty` building with another builder (a helper function's body)."""
        return _Math(builder, ty)

    def emit(self, name, *args):
        """vmath's `name` on args."""
        return emit(self.b, name, *args)

    def exp(self, x, lo):
        """e^(x + lo), lo a low part (see _exp)."""
        return _exp(self, x, lo)

    def two_sum(self, x, y):
        return _two_sum(self, x, y)

    def fast_two_sum(self, x, y):
        return _fast_two_sum(self, x, y)

    def dd_mul(self, x, y):
        return _dd_mul(self, x, y)


def _reduce_exp(m: _Math, x, lo=None):
    """(q, r) with x (+ lo) = q ln2 + r, |r| <= ln2/2: Cody-Waite with ln2 in two parts."""
    q = m.rint(m.mul(x, LOG2E))
    hi_part, lo_part = m.pick(LN2_CW)
    r = m.fma(q, -lo_part, m.fma(q, -hi_part, x))
    return q, (r if lo is None else m.add(r, lo))


def _expm1_small(m: _Math, r):
    """e^r - 1 for |r| <= ln2/2."""
    return m.fma(m.mul(r, r), m.poly(r, m.pick(EXPM1_P)), r)


def _exp(m: _Math, x, lo=None):
    """e^(x + lo) = 2^q e^r, the scaling done in two halves so neither factor overflows
    and a subnormal result is rounded once. lo is a low part, for pow. Below the lowest
    bound the result is 0, computed from x = 0 and replaced: scaling down to 0 costs a
    microcode assist per lane on x86 (a softmax row masked with -inf ran 2x slower)."""
    lowest, highest = m.pick(((-104.0, 89.0), (-746.0, 710.0)))
    zero = m.lt(x, lowest)
    q, r = _reduce_exp(m, m.select(zero, 0.0, m.below(x, highest)), lo)
    n = m.to_int(q)
    half = m.ishr(n, 1)
    y = m.mul(m.mul(m.add(_expm1_small(m, r), 1.0), m.pow2(m.isub(n, half))), m.pow2(half))
    return m.select(m.isnan(x), x, m.select(zero, 0.0, y))


def _exp_nonpositive(m: _Math, x):
    """e^x for x <= 0 or nan (a softmax's x - max, which cannot overflow): `_exp`'s value
    bit for bit in fewer operations (a sum of it over 128K float32: 24 -> 17 us, lanes
    masked with -inf as fast). With p = e^r - 1 and s = 2^(q + up), (1 + p) s is one
    fused multiply-add whose result is normal (1 + p rounded, then scaled exactly), and
    one multiply by 2^-up rounds it once, as `_exp`'s second factor does. Where e^x is
    0, q is clamped to make s +0 (no lane underflows on its way to 0: that costs a
    microcode assist per lane on x86), and x to keep r small; nan stays nan through r
    and p, and no nan is converted to an integer."""
    up, floor = m.pick(EXP_UP), m.pick(EXP_FLOOR)
    zero_scale = -(m.bias + up)  # the q whose s is +0
    q, r = _reduce_exp(m, m.select(m.lt(x, floor), floor, x))
    s = m.pow2(m.iadd(m.to_int(m.select(m.gt(q, zero_scale), q, zero_scale)), up))
    return m.mul(m.fma(_expm1_small(m, r), s, s), 2.0 ** -up)


def _expm1(m: _Math, x):
    """2^q (1 + p) - 1 = fma(p, 2^q, 2^q - 1) with p = e^r - 1, exact when q = 0. 2^q is
    capped at the largest finite power of two and the last doubling done after."""
    q, r = _reduce_exp(m, m.clamp(x, *m.pick(((-20.0, 89.0), (-40.0, 710.0)))))
    n = m.to_int(q)
    capped = m.b.select(m.b.icmp_signed(">", n, m.i(m.bias)), m.i(m.bias), n)
    scale = m.pow2(capped)
    y = m.fma(_expm1_small(m, r), scale, m.sub(scale, 1.0))
    y = m.mul(y, m.pow2(m.isub(n, capped)))
    return m.select(m.b.or_(m.isnan(x), m.eq(x, 0.0)), x, y)


def _reduce_log(m: _Math, x):
    """(k, f) as floats with x = 2^k (1 + f) and 1 + f in [sqrt(1/2), sqrt(2)), x > 0;
    subnormals are scaled into the normal range first."""
    scale = m.mant + 2
    tiny = m.lt(x, 2.0 ** (1 - m.bias))
    x = m.select(tiny, m.mul(x, 2.0 ** scale), x)
    one, sqrt_half = m.pick(((0x3f800000, 0x3f3504f3), (0x3ff0000000000000, 0x3fe6a09e667f3bcd)))
    n = m.iadd(m.bits(x), one - sqrt_half)
    k = m.isub(m.ishr(n, m.mant), m.bias)
    k = m.b.select(tiny, m.isub(k, scale), k)
    mantissa = m.from_bits(m.iadd(m.iand(n, (1 << m.mant) - 1), sqrt_half))
    return m.to_float(k), m.sub(mantissa, 1.0)


def _log_sum(m: _Math, k, f, lo):
    """k ln2 + log(1 + f) + lo, with lo a small correction (fdlibm)."""
    s = m.div(f, m.add(f, 2.0))
    z = m.mul(s, s)
    half_f2 = m.mul(m.mul(f, f), 0.5)
    ln2_hi, ln2_lo = m.pick(LN2_LOG)
    y = m.fma(s, m.add(half_f2, m.mul(z, m.poly(z, m.pick(LG)))), m.fma(k, ln2_lo, lo))
    return m.fma(k, ln2_hi, m.add(m.sub(y, half_f2), f))


def _log(m: _Math, x):
    y = _log_sum(m, *_reduce_log(m, x), 0.0)
    y = m.select(m.eq(x, INF), x, y)
    y = m.select(m.eq(x, 0.0), -INF, y)
    return m.select(m.b.fcmp_unordered("<", x, m.f(0.0)), NAN, y)


def _log1p(m: _Math, x):
    """log(u) + c/u where u + c = 1 + x exactly (Knuth's two-sum)."""
    u = m.add(x, 1.0)
    u_minus_1 = m.sub(u, 1.0)
    c = m.add(m.sub(1.0, m.sub(u, u_minus_1)), m.sub(x, u_minus_1))
    y = _log_sum(m, *_reduce_log(m, u), m.div(c, u))
    y = m.select(m.eq(x, INF), x, y)
    y = m.select(m.eq(x, -1.0), -INF, y)
    y = m.select(m.eq(x, 0.0), x, y)
    return m.select(m.b.fcmp_unordered("<", x, m.f(-1.0)), NAN, y)


def _divide(m: _Math, n, d, d_lo):
    """n / (d + d_lo), nearly correctly rounded: n times the reciprocal of d, corrected by
    one Newton step on the exact remainder."""
    inverse = m.div(1.0, d)
    q = m.mul(n, inverse)
    remainder = m.sub(m.fma(m.neg(q), d, n), m.mul(q, d_lo))
    return m.fma(remainder, inverse, q)


def _tanh(m: _Math, x):
    """a + a^3 P(a^2) for a = |x| near 0; further out e / (e + 2) with e = expm1(2a),
    where errors in e shrink, saturating to 1 where tanh rounds to 1; x's sign last."""
    a = m.abs(x)
    z = m.mul(a, a)
    small = m.fma(a, m.mul(z, m.poly(z, m.pick(TANH_P))), a)
    e = emit(m.b, "expm1", m.mul(m.below(a, m.pick(TANH_ONE)), 2.0))
    d = m.add(e, 2.0)
    big = _divide(m, e, d, m.sub(2.0, m.sub(d, e)))  # e >= 2 here: exact rounding error
    y = m.copysign(m.select(m.lt(a, TANH_SMALL), small, big), x)
    return m.select(m.isnan(x), x, y)


def _sigmoid(m: _Math, x):
    """n / (1 + e) with e = exp(-|x|) and n = 1 for x >= 0, e below: nothing overflows and
    tiny results keep their precision."""
    e = emit(m.b, "exp", m.neg(m.abs(x)))
    d = m.add(e, 1.0)
    return _divide(m, m.select(m.ge(x, 0.0), 1.0, e), d, m.add(m.sub(1.0, d), e))


def _erf(m: _Math, x):
    return _erf64(m, x) if m.f64 else _erf32(m, x)


def _small_erf(m: _Math, x, ratio):
    """x (1 + ratio), computed as 8x (1 + ratio) / 8 so a subnormal result rounds once."""
    x8 = m.mul(x, 8.0)
    return m.mul(m.fma(x8, ratio, x8), 0.125)


def _exp_minus_square(m: _Math, a, plus, nonpositive: bool = False):
    """e^(plus - a^2), with a^2's rounding error put back: e^-(h + l) = e^-h (1 - l).
    `nonpositive`: plus - a^2 is known to be <= 0 (or nan), and exp_nonpositive gives
    exp's value in fewer operations."""
    h = m.mul(a, a)
    e = emit(m.b, "exp_nonpositive" if nonpositive else "exp", m.sub(plus, h))
    return m.fma(m.neg(e), m.fma(a, a, m.neg(h)), e)


def _erf32(m: _Math, x):
    small = _small_erf(m, x, m.poly(m.mul(x, x), ERF32_P))
    a = m.below(m.abs(x), ERF32_ONE)
    big = m.sub(1.0, m.mul(_exp_minus_square(m, a, 0.0, nonpositive=True),
                           m.poly(m.sub(a, 2.46), ERFC32_Q)))
    big = m.select(m.lt(a, ERF32_ONE), big, 1.0)
    y = m.select(m.lt(m.abs(x), 1.0), small, m.copysign(big, x))
    return m.select(m.isnan(x), x, y)


def _erf64(m: _Math, x):
    """fdlibm's four ranges; erfc(a) = e^(-a^2 - 0.5625 + R/S(1/a^2)) / a in the tail."""
    a = m.abs(x)
    z = m.mul(x, x)
    small = _small_erf(m, x, m.div(m.poly(z, ERF_PP), m.poly(z, ERF_QQ)))
    s = m.sub(a, 1.0)
    middle = m.add(ERF_ERX, m.div(m.poly(s, ERF_PA), m.poly(s, ERF_QA)))
    tail_a = m.below(a, 6.0)
    w = m.div(1.0, m.mul(tail_a, tail_a))
    ratio = m.select(m.lt(tail_a, 1 / 0.35), m.div(m.poly(w, ERF_RA), m.poly(w, ERF_SA)),
                     m.div(m.poly(w, ERF_RB), m.poly(w, ERF_SB)))
    tail = m.sub(1.0, m.div(_exp_minus_square(m, tail_a, m.add(ratio, -0.5625)), tail_a))
    y = m.copysign(m.select(m.lt(a, 1.25), middle, m.select(m.lt(a, 6.0), tail, 1.0)), x)
    y = m.select(m.lt(a, 0.84375), small, y)
    return m.select(m.isnan(x), x, y)


def _sqrt(m: _Math, x):
    return m.call("sqrt", x)


def _rsqrt(m: _Math, x):
    """1 / (s + s_lo) with s = sqrt(x) rounded and s_lo = (x - s^2) / 2s its error; tiny x
    are scaled up by an even power of two first, so that x - s^2 is exact."""
    tiny, scale = m.pick(((2.0 ** -96, 96), (2.0 ** -960, 960)))
    small = m.lt(x, tiny)
    x_scaled = m.select(small, m.mul(x, 2.0 ** scale), x)
    s = m.call("sqrt", x_scaled)
    inverse = m.div(1.0, s)
    s_lo = m.mul(m.mul(m.fma(m.neg(s), s, x_scaled), inverse), 0.5)
    y = m.mul(_divide(m, 1.0, s, s_lo), m.select(small, 2.0 ** (scale // 2), 1.0))
    normal = m.b.and_(m.gt(x, 0.0), m.lt(x, INF))
    return m.select(normal, y, m.div(1.0, m.call("sqrt", x)))


def _pow(m: _Math, x, y):
    """|x|^y = e^(y log|x|), log|x| carried beyond the type's precision (in double for
    float, as a double-double for double); then C99's signs and special cases."""
    a = m.abs(x)
    r = _pow_magnitude64(m, a, y) if m.f64 else _pow_magnitude32(m, a, y)
    y_int = m.eq(y, m.trunc(y))
    half_y = m.mul(y, 0.5)
    y_odd = m.b.and_(y_int, m.ne(half_y, m.trunc(half_y)))
    sign_bit = m.b.icmp_signed("<", m.bits(x), m.i(0))
    r = m.select(m.b.and_(sign_bit, y_odd), m.neg(r), r)
    negative_finite = m.b.and_(m.lt(x, 0.0), m.gt(x, -INF))
    r = m.select(m.b.and_(negative_finite, m.b.not_(y_int)), NAN, r)
    r = m.select(m.b.and_(m.eq(a, 1.0), m.eq(m.abs(y), INF)), 1.0, r)
    return m.select(m.b.or_(m.eq(x, 1.0), m.eq(y, 0.0)), 1.0, r)


def _pow_magnitude32(m: _Math, a, y):
    wide = m.shaped(ir.DoubleType())
    t = m.b.fmul(m.b.fpext(y, wide), emit(m.b, "log", m.b.fpext(a, wide)))
    return m.b.fptrunc(emit(m.b, "exp", t), m.ty)


def _pow_magnitude64(m: _Math, a, y):
    log_hi, log_lo = _log_double_double(m, a)
    t = m.mul(y, log_hi)
    t_lo = m.fma(y, log_lo, m.fma(y, log_hi, m.neg(t)))
    return _exp(m, t, m.select(m.lt(m.abs(t), 1024.0), t_lo, 0.0))


# double-double arithmetic: a value is an unevaluated sum (hi, lo) with |lo| <= ulp(hi)/2
def _two_sum(m: _Math, x, y):
    s = m.add(x, y)
    t = m.sub(s, x)
    return s, m.add(m.sub(x, m.sub(s, t)), m.sub(y, t))


def _fast_two_sum(m: _Math, x, y):
    """(x + y, its rounding error) for |x| >= |y|."""
    s = m.add(x, y)
    return s, m.sub(y, m.sub(s, x))


def _dd_add(m: _Math, x, y):
    s, e = _two_sum(m, x[0], y[0])
    return _fast_two_sum(m, s, m.add(e, m.add(x[1], y[1])))


def _dd_mul(m: _Math, x, y):
    p = m.mul(x[0], y[0])
    e = m.fma(x[0], y[0], m.neg(p))
    return _fast_two_sum(m, p, m.fma(x[0], y[1], m.fma(x[1], y[0], e)))


def _log_double_double(m: _Math, a):
    """log(a) for a >= 0 as (hi, lo), good to about 2^-70 (SLEEF's logk): with s = f/(2+f)
    as a double-double, log(1+f) = 2s + s^3 (2/3 + s^2 A(s^2)), where only 2s and
    s^3 2/3 need the extra precision."""
    k, f = _reduce_log(m, a)
    d = m.add(f, 2.0)
    d_lo = m.sub(f, m.sub(d, 2.0))
    s_hi = m.div(f, d)
    s = (s_hi, m.div(m.sub(m.fma(m.neg(s_hi), d, f), m.mul(s_hi, d_lo)), d))
    w = m.mul(s_hi, s_hi)
    c = _dd_add(m, (m.f(TWO_THIRDS[0]), m.f(TWO_THIRDS[1])),
                (m.mul(w, m.poly(w, ATANH_A)), m.f(0.0)))
    odd = _dd_mul(m, _dd_mul(m, _dd_mul(m, s, s), s), c)
    k_ln2 = (m.mul(k, LN2_LOG[1][0]), m.mul(k, LN2_LOG[1][1]))
    hi, lo = _dd_add(m, _dd_add(m, k_ln2, (m.add(s[0], s[0]), m.add(s[1], s[1]))), odd)
    finite = m.b.and_(m.gt(a, 0.0), m.lt(a, INF))
    hi = m.select(finite, hi, m.select(m.eq(a, 0.0), -INF, a))
    return hi, m.select(finite, lo, 0.0)


_BODIES = {"exp": (_exp, 1), "log": (_log, 1), "tanh": (_tanh, 1), "sigmoid": (_sigmoid, 1),
           "erf": (_erf, 1), "sqrt": (_sqrt, 1), "rsqrt": (_rsqrt, 1), "pow": (_pow, 2),
           "expm1": (_expm1, 1), "log1p": (_log1p, 1),
           "exp_nonpositive": (_exp_nonpositive, 1)}
_BODIES.update(vmath_trig.BODIES)
