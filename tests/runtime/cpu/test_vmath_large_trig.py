"""vmath's sin, cos and tan beyond Cody-Waite's range (|x| >= vmath_trig.TRIG_REDUCED,
reduced by runtime/cpu/vmath_payne_hanek.py) against mpmath: log-spaced and random
arguments up to the largest double and float32, both signs, and the doubles and floats
closest to a multiple of pi/2 (found here from the continued fraction of 2^e 2/pi, as
Kahan and McDonald did), every vector width bit for bit the scalar code, lanes below the
bound untouched by a large neighbour, inf and nan giving nan.

The kernels are test_vmath's (one JIT module for every function, dtype and width)."""
import functools

import numpy as np
import pytest

from runtime.cpu import vmath_trig
from test_vmath import MAX_ULP, WIDTHS, run

mpmath = pytest.importorskip("mpmath")

NAMES = ("sin", "cos", "tan")
DTYPES = (np.float32, np.float64)
PRECISION = {np.float32: 24, np.float64: 53}
KAHAN_MCDONALD = 6381956970095103 * 2.0 ** 797
"""The double closest to a multiple of pi/2: cos is -4.687165924254628e-19."""


def _nearest_multiples(dtype, exponents):
    """For each exponent e, an m of dtype's precision p (2^(p-1) <= m < 2^p) that makes
    m 2^e close to a multiple of pi/2: the largest continued-fraction denominator of
    frac(2^e 2/pi) below 2^p, times the least integer that brings it to 2^(p-1)."""
    p = PRECISION[dtype]
    values = []
    with mpmath.workprec(1400):
        for e in exponents:
            rest = mpmath.frac(mpmath.mpf(2) ** e * 2 / mpmath.pi)
            before, denominator = 0, 1
            while rest:
                term = int(mpmath.floor(1 / rest))
                rest = 1 / rest - term
                before, denominator, last = denominator, term * denominator + before, denominator
                if denominator >= 2 ** p:
                    denominator = last
                    break
            m = denominator * -(-2 ** (p - 1) // denominator)
            if m < 2 ** p:
                values.append(float(m) * 2.0 ** e)
    return np.array(values, dtype)


@functools.cache
def large_arguments(dtype):
    """Log-spaced from TRIG_REDUCED to the largest finite value, random bit patterns at
    and beyond it, the neighbours of TRIG_REDUCED and the nearest multiples of pi/2;
    both signs."""
    info = np.finfo(dtype)
    rng = np.random.default_rng(3)
    log_spaced = np.geomspace(vmath_trig.TRIG_REDUCED, float(info.max) / 2, 1500)
    uint = np.uint32 if dtype is np.float32 else np.uint64
    first = np.array(vmath_trig.TRIG_REDUCED, dtype).view(uint)
    random = rng.integers(first, np.array(info.max, dtype).view(uint), 1500,
                          dtype=uint).view(dtype)
    edge = (first + np.arange(0, 50, dtype=uint)).view(dtype)
    p = PRECISION[dtype]
    hard = _nearest_multiples(dtype, range(41 - p, info.maxexp - p, 3))
    x = np.concatenate([log_spaced, random, edge, hard, [info.max]]).astype(dtype)
    if dtype is np.float64:
        x = np.append(x, KAHAN_MCDONALD)
    return np.concatenate([x, -x])


@functools.cache
def exact(name, dtype):
    """mpmath's `name` of each large argument (mpmath reduces huge arguments itself)."""
    fn = getattr(mpmath, name)
    with mpmath.workprec(160):
        return [fn(mpmath.mpf(float(v))) for v in large_arguments(dtype)]


def ulp_errors(got, want, dtype):
    """|got - want| in ulps of dtype at the exact values `want` (all normal here)."""
    p = PRECISION[dtype]
    errors = []
    with mpmath.workprec(160):
        for g, w in zip(got, want):
            ulp = mpmath.ldexp(1, int(mpmath.floor(mpmath.log(abs(w), 2))) - p + 1)
            errors.append(float(abs(mpmath.mpf(float(g)) - w) / ulp))
    return np.array(errors)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", NAMES)
def test_large_arguments_are_within_the_sweeps_bound(name, dtype):
    x = large_arguments(dtype)
    errors = ulp_errors(run(name, dtype, x), exact(name, dtype), dtype)
    worst = int(np.argmax(errors))
    assert errors[worst] <= MAX_ULP[name][dtype is np.float64], \
        f"{errors[worst]} ulp at {name}({x[worst]!r})"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", NAMES)
def test_every_width_and_the_scalar_code_agree_on_large_arguments(name, dtype):
    x = large_arguments(dtype)
    native = run(name, dtype, x).view(np.uint8)
    for width in WIDTHS[dtype][1:]:
        assert np.array_equal(run(name, dtype, x, width=width).view(np.uint8), native), width


def test_the_double_nearest_a_multiple_of_pi_over_2_is_correctly_rounded():
    """Its reduction cancels 61 bits beyond the 53 of x; cos is sin of the remainder."""
    x = np.array([KAHAN_MCDONALD, -KAHAN_MCDONALD])
    assert run("cos", np.float64, x).tolist() == [-4.687165924254628e-19] * 2
    assert run("sin", np.float64, x).tolist() == [1.0, -1.0]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("name", NAMES)
def test_small_lanes_beside_large_ones_keep_their_values(name, dtype):
    """A vector holding one large lane takes the large branch for all its lanes: the
    others come out as they do with no large neighbour; inf and nan give nan."""
    small = np.resize(np.array([0.5, -3.0, 2.0, 1e5, -0.0, 7.25, 1e-3, 100.0], dtype), 64)
    mixed = small.copy()
    mixed[::5] = dtype(1e30)
    mixed[3::7] = np.inf
    mixed[4::9] = np.nan
    for width in WIDTHS[dtype]:
        got, alone = run(name, dtype, mixed, width=width), run(name, dtype, small, width=width)
        kept = np.isin(np.arange(mixed.size), np.flatnonzero(mixed == small))
        assert np.array_equal(got[kept].view(np.uint8), alone[kept].view(np.uint8)), width
        assert np.isnan(got[~np.isfinite(mixed)]).all() and np.isfinite(got[mixed == 1e30]).all()
