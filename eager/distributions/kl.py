"""kl_divergence(p, q) and register_kl: KL(p || q) by the pair of types, the most
specific registered pair winning (as PyTorch dispatches), for the pairs PyTorch
registers among kiln's distributions."""
from __future__ import annotations

import math
import warnings
from functools import total_ordering

from eager.distributions.bernoulli import Bernoulli
from eager.distributions.categorical import Categorical
from eager.distributions.distribution import Distribution
from eager.distributions.independent import Independent
from eager.distributions._linalg import solve_triangular
from eager.distributions.multivariate_normal import (MultivariateNormal, _broadcast,
                                                     batch_mahalanobis)
from eager.distributions.normal import Normal
from eager.distributions.uniform import Uniform
from eager.distributions.utils import sum_rightmost
from eager.nn._activations import softplus_of
from eager.factories import full_like
from eager.tensor import ops

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict = {}  # (type_p, type_q) -> function
_KL_MEMOIZE: dict = {}   # the pair of a call's types -> the function chosen for it


def register_kl(type_p, type_q):
    """Decorator: `@register_kl(Normal, Normal) def kl(p, q): ...`."""
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)):
        raise TypeError(f"Expected type_p to be a Distribution subclass but got {type_p}")
    if not (isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise TypeError(f"Expected type_q to be a Distribution subclass but got {type_q}")

    def decorator(fun):
        _KL_REGISTRY[type_p, type_q] = fun
        _KL_MEMOIZE.clear()
        return fun
    return decorator


@total_ordering
class _Match:
    """A registered pair, ordered so that the more specific (subclass) pair is smaller."""

    def __init__(self, *types):
        self.types = types

    def __eq__(self, other):
        return self.types == other.types

    def __le__(self, other):
        return all(issubclass(x, y) for x, y in zip(self.types, other.types))


def _dispatch_kl(type_p, type_q):
    matches = [(p, q) for p, q in _KL_REGISTRY if issubclass(type_p, p) and issubclass(type_q, q)]
    if not matches:
        return NotImplemented
    left_p, left_q = min(_Match(*m) for m in matches).types
    right_q, right_p = min(_Match(*reversed(m)) for m in matches).types
    left, right = _KL_REGISTRY[left_p, left_q], _KL_REGISTRY[right_p, right_q]
    if left is not right:
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). "
                      f"Please register_kl({left_p.__name__}, {right_q.__name__})",
                      RuntimeWarning, stacklevel=3)
    return left


def kl_divergence(p: Distribution, q: Distribution):
    """KL(p || q), over p's and q's broadcast batch shape."""
    key = type(p), type(q)
    if key not in _KL_MEMOIZE:
        _KL_MEMOIZE[key] = _dispatch_kl(*key)
    fun = _KL_MEMOIZE[key]
    if fun is NotImplemented:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type "
                                  f"{p.__class__.__name__} and q type {q.__class__.__name__}")
    return fun(p, q)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (softplus_of(-q.logits) - softplus_of(-p.logits))
    t1 = ops.where(p.probs == 0, 0.0, ops.where(q.probs == 0, math.inf, t1))
    t2 = (1 - p.probs) * (softplus_of(q.logits) - softplus_of(p.logits))
    t2 = ops.where(p.probs == 1, 0.0, ops.where(q.probs == 1, math.inf, t2))
    return t1 + t2


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = ops.where((q.probs == 0).expand_as(t), math.inf, t)
    t = ops.where((p.probs == 0).expand_as(t), 0.0, t)
    return t.sum(-1)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return ops.where((q.low > p.low) | (q.high < p.high), math.inf, result)


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    width = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / width).log()
    t2 = width.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)


@register_kl(Normal, Uniform)
def _kl_normal_uniform(p, q):
    return full_like(p.loc, math.inf)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_multivariatenormal_multivariatenormal(p, q):
    if p.event_shape != q.event_shape:
        raise ValueError("KL-divergence between two Multivariate Normals with different event "
                         "shapes cannot be computed")
    p_tril, q_tril = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_term1 = p_tril.diagonal(0, -2, -1).log().sum(-1)
    half_term1 = q_tril.diagonal(0, -2, -1).log().sum(-1) - half_term1
    n = p.event_shape[0]
    batch = _broadcast(q_tril.shape[:-2], p_tril.shape[:-2])
    ratio = solve_triangular(q_tril.expand(batch + (n, n)), p_tril.expand(batch + (n, n)),
                             upper=False)
    term2 = ratio.pow(2).sum((-2, -1))
    term3 = batch_mahalanobis(q_tril, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - n)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    return sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
