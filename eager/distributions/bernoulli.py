"""Bernoulli(probs= or logits=): 1 with probability probs (not reparameterisable)."""
from __future__ import annotations

import math
from numbers import Number

from eager.autograd import no_grad
from eager.distributions import constraints
from eager.distributions.distribution import Distribution
from eager.distributions.utils import (broadcast_all, lazy_property, logits_to_probs,
                                       probs_to_logits)
from eager.factories import rand
from eager.nn._activations import softplus_of
from eager.tensor import Size, ops

__all__ = ["Bernoulli"]


def bce_with_logits(logits, target):
    """binary_cross_entropy_with_logits(reduction="none"): -t log s(x) - (1-t) log s(-x)."""
    return softplus_of(logits) - logits * target


class Bernoulli(Distribution):
    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        given = probs if probs is not None else logits
        (param,) = broadcast_all(given)
        if probs is not None:
            self.probs = param
        else:
            self.logits = param
        self._param = param
        super().__init__(Size() if isinstance(given, Number) else param.shape,
                         validate_args=validate_args)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return ops.where(self.probs == 0.5, math.nan, mode)

    @property
    def variance(self):
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        with no_grad():
            probs = self.probs.expand(shape)
            return (rand(shape, dtype=probs.dtype, device=probs.device) < probs).to(probs.dtype)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -bce_with_logits(logits, value)

    def entropy(self):
        return bce_with_logits(self.logits, self.probs)
