"""MultivariateNormal(loc, covariance_matrix= | precision_matrix= | scale_tril=):
reparameterised samples loc + L eps, L the lower Cholesky factor of the covariance."""
from __future__ import annotations

import math

import numpy as np

from eager.derived import flip
from eager.distributions import constraints
from eager.distributions._linalg import cholesky, solve_triangular
from eager.distributions.distribution import Distribution
from eager.distributions.utils import lazy_property, standard_normal
from eager.derived_math import eye

__all__ = ["MultivariateNormal"]


def _batch_mv(bmat, bvec):
    return (bmat @ bvec.unsqueeze(-1)).squeeze(-1)


def batch_mahalanobis(L, x):
    """x^T (L L^T)^-1 x over the broadcast batch of L (.., n, n) and x (.., n)."""
    n = x.shape[-1]
    batch = _broadcast(L.shape[:-2], x.shape[:-1])
    y = solve_triangular(L.expand(batch + (n, n)), x.expand(batch + (n,)).unsqueeze(-1),
                         upper=False)
    return y.squeeze(-1).pow(2).sum(-1)


def _broadcast(a, b) -> tuple:
    return tuple(np.broadcast_shapes(tuple(a), tuple(b)))


def _precision_to_scale_tril(P):
    """The lower Cholesky factor of P^-1, from P without inverting it."""
    Lf = cholesky(flip(P, (-2, -1)))
    L_inv = flip(Lf, (-2, -1)).mT
    identity = eye(P.shape[-1], dtype=P.dtype, device=P.device).expand(P.shape)
    return solve_triangular(L_inv, identity, upper=False)


class MultivariateNormal(Distribution):
    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [m for m in (covariance_matrix, scale_tril, precision_matrix) if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        matrix = given[0]
        if matrix.dim() < 2:
            name = ("covariance_matrix" if covariance_matrix is not None else "scale_tril"
                    if scale_tril is not None else "precision_matrix")
            raise ValueError(f"{name} must be at least two-dimensional, with optional leading "
                             "batch dimensions")
        batch = _broadcast(matrix.shape[:-2], loc.shape[:-1])
        expanded = matrix.expand(batch + (-1, -1))
        if scale_tril is not None:
            self.scale_tril = expanded
        elif covariance_matrix is not None:
            self.covariance_matrix = expanded
        else:
            self.precision_matrix = expanded
        self.loc = loc.expand(batch + (-1,))
        super().__init__(batch, self.loc.shape[-1:], validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)

    def _matrix_shape(self) -> tuple:
        return tuple(self._batch_shape) + tuple(self._event_shape) * 2

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        L = self._unbroadcasted_scale_tril
        return (L @ L.mT).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        L = self._unbroadcasted_scale_tril
        identity = eye(L.shape[-1], dtype=L.dtype, device=L.device).expand(L.shape)
        L_inv = solve_triangular(L, identity, upper=False)
        return (L_inv.mT @ L_inv).expand(self._matrix_shape())

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(
            tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        eps = standard_normal(self._extended_shape(sample_shape), self.loc)
        return self.loc + _batch_mv(self._unbroadcasted_scale_tril, eps)

    def _half_log_det(self):
        return self._unbroadcasted_scale_tril.diagonal(0, -2, -1).log().sum(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        M = batch_mahalanobis(self._unbroadcasted_scale_tril, value - self.loc)
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + M) - self._half_log_det()

    def entropy(self):
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return H if len(self._batch_shape) == 0 else H.expand(tuple(self._batch_shape))
