"""vmath's trigonometric and hyperbolic functions, their inverses and exp2 (see
runtime/cpu/vmath.py, whose `emit` calls them and whose docstring lists their measured
accuracy). Each computes in double: float arguments are widened and the result rounded
once. sin, cos and tan reduce by Cody-Waite below TRIG_REDUCED and by Payne-Hanek
beyond it (runtime/cpu/vmath_payne_hanek.py): no library call, the same code on PTX."""
from __future__ import annotations

from runtime.cpu.vmath_payne_hanek import PI_OVER_2, reduce_lanes
from runtime.llvm.toolkit import any_lane, when

INF, NAN = float("inf"), float("nan")
LN2 = 0.6931471805599453

# sin and cos: x = q pi/2 + r with pi/2 in three doubles (PI_OVER_2), r a double-double,
# then fdlibm's kernels on |r| <= pi/4 (k_sin.c, k_cos.c); float computes in double
TWO_OVER_PI = 0.6366197723675814
SIN_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
         2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
COS_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
         -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)
LN2_TAIL = 2.3190468138462996e-17  # ln2 - its double (mpmath)
# fdlibm's s_atan.c: atan at 0.5, 1, 1.5 and infinity in two parts, and the polynomial
ATAN_HI = (4.63647609000806093515e-01, 7.85398163397448278999e-01, 9.82793723247329054082e-01,
           1.57079632679489655800e+00)
ATAN_LO = (2.26987774529616870924e-17, 3.06161699786838301793e-17, 1.39033110312309984516e-17,
           6.12323399573676603587e-17)
ATAN_T = (3.33333333333329318027e-01, -1.99999999998764832476e-01, 1.42857142725034663711e-01,
          -1.11111104054623557880e-01, 9.09088713343650656196e-02, -7.69187620504482999495e-02,
          6.66107313738753120669e-02, -5.83357013379057348645e-02, 4.97687799461593236017e-02,
          -3.65315727442169155270e-02, 1.62858201153657823623e-02)
TRIG_REDUCED = 2.0 ** 40
"""|x| below which sin and cos reduce by Cody-Waite (q < 2^40 is exact in a double and
the dropped tail of pi/2, 5.6e-50, moves r by less than 2^-120); at and beyond it (finite)
Payne-Hanek reduces, on a branch taken only when some lane is there."""


def _in_double(m, x, body):
    """body(d, x) for a double _Math d: float arguments are widened and the result
    rounded once, so float32 functions composed of double ones are nearly exact."""
    if m.f64:
        return body(m, x)
    d = m.double()
    return m.b.fptrunc(body(d, m.b.fpext(x, d.ty)), m.ty)


def _reduce_trig(d, x):
    """(hi, lo, n) with x = n pi/2 + hi + lo, |hi + lo| <= pi/4 (a double-double; n in
    d's integer view) for finite x; inf and nan come out as nan through the kernels.
    Cody-Waite below TRIG_REDUCED; beyond, Payne-Hanek on a branch taken only when some
    lane (on PTX: the thread) is large."""
    a = d.abs(x)
    reduced = d.lt(a, TRIG_REDUCED)
    q = d.select(reduced, d.rint(d.mul(x, TWO_OVER_PI)), 0.0)
    c1, c2, c3 = PI_OVER_2
    r1 = d.fma(d.neg(q), c1, x)  # exact: x and q c1 agree in their leading bits
    s = d.mul(q, c2)
    hi, e = d.two_sum(r1, d.neg(s))
    lo = d.fma(d.neg(q), c3, d.sub(e, d.fma(q, c2, d.neg(s))))
    hi, lo = d.fast_two_sum(hi, lo)
    large = d.b.and_(d.b.not_(reduced), d.lt(a, INF))

    def payne_hanek(small):
        exact = reduce_lanes(d, x)
        return [d.b.select(large, y, z) for y, z in zip(exact, small)]
    return when(d.b, any_lane(d.b, large), [hi, lo, d.to_int(q)], payne_hanek)


def _sin_cos_reduced(d, hi, lo):
    """(sin r, cos r) for r = hi + lo, |r| <= pi/4: fdlibm's __kernel_sin(hi, lo) and
    __kernel_cos(hi, lo)."""
    z = d.mul(hi, hi)
    v = d.mul(z, hi)
    sin_r = d.sub(hi, d.sub(d.sub(d.mul(z, d.sub(d.mul(lo, 0.5), d.mul(v, d.poly(z, SIN_S[1:])))),
                                  lo), d.mul(v, SIN_S[0])))
    half_z = d.mul(z, 0.5)
    w = d.sub(1.0, half_z)
    cos_r = d.add(w, d.add(d.sub(d.sub(1.0, w), half_z),
                           d.sub(d.mul(d.mul(z, z), d.poly(z, COS_C)), d.mul(hi, lo))))
    return sin_r, cos_r


def _trig(m, x, cosine: bool):
    """sin(x) or cos(x), in double: sin or cos of r, by n's quadrant."""
    def body(d, xd):
        hi, lo, n = _reduce_trig(d, xd)
        sin_r, cos_r = _sin_cos_reduced(d, hi, lo)
        n = d.b.add(n, d.i(1 if cosine else 0))
        y = d.select(d.b.icmp_signed("!=", d.iand(n, 1), d.i(0)), cos_r, sin_r)
        y = d.select(d.b.icmp_signed("!=", d.iand(n, 2), d.i(0)), d.neg(y), y)
        if not cosine:
            y = d.select(d.eq(xd, 0.0), xd, y)  # sin(-0.0) is -0.0
        return y
    return _in_double(m, x, body)


def _tan(m, x):
    """sin r / cos r, or -cos r / sin r in odd quadrants."""
    def body(d, xd):
        hi, lo, n = _reduce_trig(d, xd)
        sin_r, cos_r = _sin_cos_reduced(d, hi, lo)
        odd = d.b.icmp_signed("!=", d.iand(n, 1), d.i(0))
        y = d.select(odd, d.div(d.neg(cos_r), sin_r), d.div(sin_r, cos_r))
        return d.select(d.eq(xd, 0.0), xd, y)
    return _in_double(m, x, body)


def _exp2(m, x):
    """e^(x ln2) with x ln2 carried as a double-double (its rounding error would be
    multiplied by x): float in double."""
    def body(d, xd):
        hi = d.mul(xd, LN2)
        lo = d.fma(xd, LN2, d.neg(hi))
        lo = d.select(d.lt(d.abs(hi), 1024.0), d.fma(xd, LN2_TAIL, lo), 0.0)  # (inf, far out)
        return d.exp(hi, lo)
    return _in_double(m, x, body)


def _sinh(m, x):
    """(u + u / (u + 1)) / 2 with u = expm1(|x|), where e^|x| is finite; beyond,
    (e^(|x|/2) / 2) e^(|x|/2); x's sign last."""
    def body(d, xd):
        a = d.abs(xd)
        u = d.emit("expm1", d.below(a, 709.0))
        y = d.mul(d.add(u, d.div(u, d.add(u, 1.0))), 0.5)
        h = d.emit("exp", d.mul(a, 0.5))
        y = d.select(d.lt(a, 709.0), y, d.mul(d.mul(h, 0.5), h))
        return d.select(d.isnan(xd), xd, d.copysign(y, xd))
    return _in_double(m, x, body)


def _cosh(m, x):
    """(e + 1/e) / 2 with e = e^|x| where finite; beyond, (e^(|x|/2) / 2) e^(|x|/2)."""
    def body(d, xd):
        a = d.abs(xd)
        e = d.emit("exp", d.below(a, 709.0))
        y = d.mul(d.add(e, d.div(1.0, e)), 0.5)
        h = d.emit("exp", d.mul(a, 0.5))
        y = d.select(d.lt(a, 709.0), y, d.mul(d.mul(h, 0.5), h))
        return d.select(d.isnan(xd), xd, y)
    return _in_double(m, x, body)


def _asinh(m, x):
    """log1p(a + a^2 / (1 + sqrt(1 + a^2))) for a = |x|; log(a) + ln2 where a^2 would
    swamp 1 (a > 2^28); x's sign last."""
    def body(d, xd):
        a = d.abs(xd)
        square = d.mul(a, a)
        y = d.emit("log1p", d.add(a, d.div(square, d.add(1.0, d.call("sqrt",
                                                                         d.add(square, 1.0))))))
        big = d.add(d.emit("log", a), LN2)
        y = d.select(d.gt(a, 2.0 ** 28), big, y)
        return d.select(d.isnan(xd), xd, d.copysign(y, xd))
    return _in_double(m, x, body)


def _acosh(m, x):
    """log1p(t + sqrt(2t + t^2)) for t = x - 1; log(x) + ln2 beyond 2^28; NaN below 1."""
    def body(d, xd):
        t = d.sub(xd, 1.0)
        y = d.emit("log1p", d.add(t, d.call("sqrt", d.fma(t, t, d.mul(t, 2.0)))))
        big = d.add(d.emit("log", xd), LN2)
        y = d.select(d.gt(xd, 2.0 ** 28), big, y)
        return d.select(d.b.fcmp_unordered("<", xd, d.f(1.0)), NAN, y)
    return _in_double(m, x, body)


def _atanh(m, x):
    """log1p(2a / (1 - a)) / 2 for a = |x| (inf at 1, NaN beyond); x's sign last."""
    def body(d, xd):
        a = d.abs(xd)
        y = d.mul(d.emit("log1p", d.div(d.add(a, a), d.sub(1.0, a))), 0.5)
        y = d.select(d.gt(a, 1.0), NAN, y)
        return d.select(d.isnan(xd), xd, d.copysign(y, xd))
    return _in_double(m, x, body)


def _atan_positive(d, a):
    """atan(a) for a >= 0 or nan (fdlibm's s_atan.c: a reduced about 0.5, 1, 1.5 or
    infinity, then an odd polynomial)."""
    ranges = [d.lt(a, 0.4375), d.lt(a, 0.6875), d.lt(a, 1.1875), d.lt(a, 2.4375)]
    t = d.select(ranges[3], d.div(d.sub(a, 1.5), d.fma(a, 1.5, 1.0)), d.div(-1.0, a))
    t = d.select(ranges[2], d.div(d.sub(a, 1.0), d.add(a, 1.0)), t)
    t = d.select(ranges[1], d.div(d.fma(a, 2.0, -1.0), d.add(a, 2.0)), t)
    t = d.select(ranges[0], a, t)
    z = d.mul(t, t)
    w = d.mul(z, z)
    s1 = d.mul(z, d.poly(w, ATAN_T[0::2]))
    s2 = d.mul(w, d.poly(w, ATAN_T[1::2]))
    tail = d.mul(t, d.add(s1, s2))
    hi, lo = d.f(ATAN_HI[3]), d.f(ATAN_LO[3])
    for k in (2, 1, 0):
        hi = d.select(ranges[k + 1], ATAN_HI[k], hi)
        lo = d.select(ranges[k + 1], ATAN_LO[k], lo)
    y = d.sub(hi, d.sub(d.sub(tail, lo), t))
    y = d.select(ranges[0], d.sub(t, tail), y)
    return d.select(d.gt(a, 2.0 ** 66), ATAN_HI[3] + ATAN_LO[3], y)


def _atan(m, x):
    def body(d, xd):
        y = d.copysign(_atan_positive(d, d.abs(xd)), xd)
        return d.select(d.isnan(xd), xd, y)
    return _in_double(m, x, body)


def _atan2(m, y, x):
    """atan(|y / x|) put in x's and y's quadrant (pi in two parts), with C99's zeros and
    infinities: float in double."""
    if not m.f64:
        d = m.double()
        return m.b.fptrunc(_atan2(d, m.b.fpext(y, d.ty), m.b.fpext(x, d.ty)), m.ty)
    d = m
    ay, ax = d.abs(y), d.abs(x)
    z = _atan_positive(d, d.div(ay, ax))
    both_inf = d.b.and_(d.eq(ay, INF), d.eq(ax, INF))
    z = d.select(both_inf, ATAN_HI[1] + ATAN_LO[1], z)  # atan(inf / inf) taken as pi/4
    z = d.select(d.eq(ax, 0.0), PI_OVER_2[0], z)  # (y = 0 too: replaced below)
    z = d.select(d.b.and_(d.eq(ax, INF), d.lt(ay, INF)), 0.0, z)
    negative_x = d.b.icmp_signed("<", d.bits(x), d.i(0))  # -0.0 too
    pi_hi, pi_lo = 2 * PI_OVER_2[0], 2 * PI_OVER_2[1]
    z = d.select(negative_x, d.sub(pi_hi, d.sub(z, pi_lo)), z)
    z = d.select(d.eq(ay, 0.0), d.select(negative_x, pi_hi, 0.0), z)
    z = d.copysign(z, y)
    return d.select(d.b.or_(d.isnan(x), d.isnan(y)), d.add(x, y), z)


def _asin(m, x):
    """atan2(x, sqrt((1 - x)(1 + x))): NaN beyond 1."""
    def body(d, xd):
        root = d.call("sqrt", d.mul(d.sub(1.0, xd), d.add(1.0, xd)))
        return _atan2(d, xd, root)
    return _in_double(m, x, body)


def _acos(m, x):
    """atan2(sqrt((1 - x)(1 + x)), x): NaN beyond 1."""
    def body(d, xd):
        root = d.call("sqrt", d.mul(d.sub(1.0, xd), d.add(1.0, xd)))
        return _atan2(d, root, xd)
    return _in_double(m, x, body)


BODIES = {"sin": (lambda m, x: _trig(m, x, False), 1), "cos": (lambda m, x: _trig(m, x, True), 1),
          "tan": (_tan, 1), "exp2": (_exp2, 1), "sinh": (_sinh, 1), "cosh": (_cosh, 1),
          "asinh": (_asinh, 1), "acosh": (_acosh, 1), "atanh": (_atanh, 1),
          "atan": (_atan, 1), "atan2": (_atan2, 2), "asin": (_asin, 1), "acos": (_acos, 1)}
