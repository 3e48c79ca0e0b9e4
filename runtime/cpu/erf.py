"""Vectorised erf for numpy (which has none), accurate to about one ulp in float64, and
erfinv (below).

The method is fdlibm's s_erf.c (Sun Microsystems, 1993), the one FreeBSD's libm and
Cephes-derived libraries use: erf(x) = x + x*R(x^2) near zero, erx + P(s)/Q(s) with
s = |x| - 1 around one, and 1 - erfc(x) beyond, where
erfc(x) = exp(-x^2 - 0.5625 + R(1/x^2)/S(1/x^2)) / x. The coefficients are the
library's; each decimal value is the double whose bits the library lists beside it.
"""
from __future__ import annotations

import numpy as np

ERF_ERX = 8.45062911510467529297e-01  # erf(1) cut to 32 bits; P/Q near 1 supplies the rest
_EFX8 = 1.02703333676410069053e+00  # 8 * (2/sqrt(pi) - 1)

# erf(x) = x + x * PP(x^2) / QQ(x^2) on |x| < 0.84375
ERF_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
ERF_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02,
       5.08130628187576562776e-03, 1.32494738004321644526e-04, -3.96022827877536812320e-06)
# erf(x) = erx + PA(s) / QA(s), s = |x| - 1, on 0.84375 <= |x| < 1.25
ERF_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
ERF_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01,
       7.18286544141962662868e-02, 1.26171219808761642112e-01, 1.36370839120290507362e-02,
       1.19844998467991074170e-02)
# erfc(x) = exp(-x^2 - 0.5625 + RA(s) / SA(s)) / x, s = 1/x^2, on 1.25 <= |x| < 1/0.35
ERF_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
ERF_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02,
       4.34565877475229228821e+02, 6.45387271733267880336e+02, 4.29008140027567833386e+02,
       1.08635005541779435134e+02, 6.57024977031928170135e+00, -6.04244152148580987438e-02)
# the same with RB / SB on 1/0.35 <= |x| < 6 (beyond 6, erf(x) rounds to +-1)
ERF_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
ERF_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02,
       1.53672958608443695994e+03, 3.19985821950859553908e+03, 2.55305040643316442583e+03,
       4.74528541206955367215e+02, -2.24409524465858183362e+01)

_TINY = 2.0 ** -28  # below this erf(x) = x * 2/sqrt(pi) to double precision


def _poly(coefficients, z):
    """c0 + c1*z + c2*z^2 + ... by Horner's rule."""
    acc = np.full_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = acc * z + c
    return acc


def _near_zero(x):
    z = x * x
    return x + x * (_poly(ERF_PP, z) / _poly(ERF_QQ, z))


def _near_one(ax):
    s = ax - 1.0
    return ERF_ERX + _poly(ERF_PA, s) / _poly(ERF_QA, s)


def _tail(ax):
    """1 - erfc(ax) for 1.25 <= ax < 6."""
    s = 1.0 / (ax * ax)
    first = ax < 1 / 0.35
    ratio = np.where(first, _poly(ERF_RA, s) / _poly(ERF_SA, s),
                     _poly(ERF_RB, s) / _poly(ERF_SB, s))
    # z is ax with the low 32 bits of its mantissa cleared: z*z is then exact, and
    # exp(-ax^2) = exp(-z*z) * exp((z - ax) * (z + ax)) loses nothing to cancellation
    z = (ax.view(np.uint64) & np.uint64(0xFFFFFFFF00000000)).view(np.float64)
    r = np.exp(-z * z - 0.5625) * np.exp((z - ax) * (z + ax) + ratio)
    return 1.0 - r / ax


def erf(x: np.ndarray) -> np.ndarray:
    """erf of a floating-point array, computed in float64 and returned in x's dtype."""
    a = np.asarray(x, dtype=np.float64)
    ax = np.abs(a)
    out = a.copy()  # NaN stays NaN; every other element is overwritten below
    tiny = ax < _TINY
    out[tiny] = 0.125 * (8.0 * a[tiny] + _EFX8 * a[tiny])  # scaled: no underflow loss
    small = (ax >= _TINY) & (ax < 0.84375)
    out[small] = _near_zero(a[small])
    mid = (ax >= 0.84375) & (ax < 1.25)
    out[mid] = np.copysign(_near_one(ax[mid]), a[mid])
    tail = (ax >= 1.25) & (ax < 6.0)
    out[tail] = np.copysign(_tail(ax[tail]), a[tail])
    big = ax >= 6.0
    out[big] = np.copysign(1.0, a[big])
    return out.astype(np.asarray(x).dtype, copy=False)


# erfinv: PyTorch's calc_erfinv (aten/src/ATen/native/Math.h, from Gary L. Pavlis's MATLAB
# erfinv): a rational first guess, then two Newton steps on erf(x) - y. `erfinv` runs it in
# numpy (float64), `emit_erfinv` in generated code (the compute type).
ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
ERFINV_B = (1.0, -2.118377725, 1.442710462, -0.329097515, 0.012229801)
ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
ERFINV_D = (1.0, 3.543889200, 1.637067800)
ERFINV_CENTRAL = 0.7  # |y| up to this: the guess is a ratio of polynomials in y^2
_TWO_OVER_SQRT_PI = 1.1283791670955126


def erfinv(y: np.ndarray) -> np.ndarray:
    """erfinv of a floating-point array, computed in float64 and returned in y's dtype:
    NaN beyond [-1, 1], +-inf at +-1."""
    a = np.asarray(y, dtype=np.float64)
    ay = np.abs(a)
    inside = ay < 1.0  # NaN is not: it stays NaN
    out = np.where(ay == 1.0, np.copysign(np.inf, a), np.nan)
    v, av = a[inside], ay[inside]
    central = av <= ERFINV_CENTRAL
    z = np.where(central, v * v, np.sqrt(-np.log((1.0 - av) / 2.0)))
    x = np.where(central, v * _poly(ERFINV_A, z) / _poly(ERFINV_B, z),
                 np.copysign(_poly(ERFINV_C, z), v) / _poly(ERFINV_D, z))
    for _ in range(2):
        x = x - (erf(x) - v) / (_TWO_OVER_SQRT_PI * np.exp(-x * x))
    out[inside] = x
    return out.astype(np.asarray(y).dtype, copy=False)


def emit_erfinv(E, y):
    """`erfinv` in the compiler's element toolkit (an op record's emitter)."""
    def poly(coefficients, z):
        acc = E.const(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = E.add(E.mul(acc, z), E.const(c))
        return acc

    def signed_as_y(v):
        return E.select(E.lt(y, E.const(0.0)), E.neg(v), v)
    ay = E.abs(y)
    z_central = E.mul(y, y)
    z_tail = E.math("sqrt", E.neg(E.math("log", E.div(E.sub(E.const(1.0), ay),
                                                      E.const(2.0)))))
    x = E.select(E.le(ay, E.const(ERFINV_CENTRAL)),
                 E.div(E.mul(y, poly(ERFINV_A, z_central)), poly(ERFINV_B, z_central)),
                 E.div(signed_as_y(poly(ERFINV_C, z_tail)), poly(ERFINV_D, z_tail)))
    for _ in range(2):
        slope = E.mul(E.const(_TWO_OVER_SQRT_PI), E.math("exp", E.neg(E.mul(x, x))))
        x = E.sub(x, E.div(E.sub(E.math("erf", x), y), slope))
    edge = E.select(E.eq(ay, E.const(1.0)), signed_as_y(E.const(np.inf)), E.const(np.nan))
    return E.select(E.lt(ay, E.const(1.0)), x, edge)
