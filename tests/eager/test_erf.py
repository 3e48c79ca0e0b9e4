"""The vectorised erf kernel against math.erf: within one ulp in float64 on a dense grid,
across every boundary of its piecewise approximation, and exact at the special values."""
from __future__ import annotations

import math

import numpy as np
import pytest

import eager
from runtime.cpu.erf import erf

_math_erf = np.vectorize(math.erf, otypes=[np.float64])
# the boundaries between the approximation's pieces, where mistakes would show first
_BREAKS = [2.0 ** -28, 0.84375, 1.25, 1 / 0.35, 6.0]


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place between float64 arrays of the same sign."""
    ia, ib = a.view(np.int64), b.view(np.int64)
    ia = np.where(ia < 0, np.int64(-(2 ** 63)) - ia, ia)  # a monotonic integer order
    ib = np.where(ib < 0, np.int64(-(2 ** 63)) - ib, ib)
    return np.abs(ia - ib)


def test_erf_is_within_one_ulp_on_a_dense_grid():
    x = np.linspace(-7.0, 7.0, 400_001)
    assert ulps(erf(x), _math_erf(x)).max() <= 1


@pytest.mark.parametrize("scale", [1e-300, 1e-12, 1e-6, 1e-2, 0.3, 1.0, 2.0, 4.0, 30.0])
def test_erf_is_within_one_ulp_at_every_scale(scale):
    x = np.random.default_rng(7).standard_normal(20_000) * scale
    assert ulps(erf(x), _math_erf(x)).max() <= 1


@pytest.mark.parametrize("edge", _BREAKS, ids=repr)
def test_erf_is_within_one_ulp_around_each_piece_boundary(edge):
    steps = np.arange(-200, 201)
    x = np.concatenate([np.nextafter(edge, np.inf) + steps * np.spacing(edge),
                        -(edge + steps * np.spacing(edge))])
    assert ulps(erf(x), _math_erf(x)).max() <= 1


def test_erf_special_values():
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e300, -1e300, 5e-324, -5e-324, 2.2e-308])
    np.testing.assert_array_equal(erf(x), [math.erf(v) for v in x])
    assert np.signbit(erf(np.array([-0.0])))[0] and not np.signbit(erf(np.array([0.0])))[0]
    assert np.isnan(erf(np.array([np.nan, -np.nan]))).all()


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_erf_keeps_a_narrow_dtype_and_rounds_once(dtype):
    x = np.linspace(-4, 4, 1001).astype(dtype)
    out = erf(x)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, _math_erf(x.astype(np.float64)).astype(dtype))


def test_eager_erf_uses_it():
    x = eager.linspace(-3, 3, 97, dtype=eager.float64).reshape(1, 97).t()  # non-contiguous
    out = eager.erf(x)
    assert out.dtype is eager.float64 and out.shape == (97, 1)
    assert ulps(out.numpy().ravel(), _math_erf(x.numpy()).ravel()).max() <= 1
