"""Kolmogorov-Smirnov checks for initialisers: a sample against a uniform or normal CDF."""
import math

import numpy as np

_erf = np.vectorize(math.erf)


def ks_statistic(sample, cdf) -> float:
    """Kolmogorov-Smirnov distance between a sample and a distribution's CDF."""
    x = np.sort(np.asarray(sample, np.float64).ravel())
    n = len(x)
    c = cdf(x)
    return max((np.arange(1, n + 1) / n - c).max(), (c - np.arange(n) / n).max())


def uniform_cdf(bound, low=None):
    low = -bound if low is None else low
    return lambda x: np.clip((x - low) / (bound - low), 0, 1)


def normal_cdf(std, mean=0.0):
    return lambda x: 0.5 * (1 + _erf((x - mean) / (std * math.sqrt(2))))


def ks_limit(n):
    return 1.95 / math.sqrt(n)  # rejects a true distribution with probability 0.1%
