"""The two factorisations MultivariateNormal needs, as autograd.Functions: the values
from numpy (LAPACK), the backward in differentiable eager ops (itself made of these
Functions, so a second derivative works). kiln has no linalg ops of its own yet; these
stay private to distributions until it does.

Both take matrices with the same batch dimensions (callers expand first)."""
from __future__ import annotations

import numpy as np

from eager.autograd import Function
from eager.derived_math import eye
from eager.factories import tensor


def _host(t) -> np.ndarray:
    return t.detach().numpy()


def _like(a: np.ndarray, t):
    return tensor(np.ascontiguousarray(a), dtype=t.dtype, device=t.device)


class SolveTriangular(Function):
    """X = A^-1 B for a triangular A (the other triangle of A is not read)."""

    @staticmethod
    def forward(ctx, A, B, upper: bool):
        a = np.triu(_host(A)) if upper else np.tril(_host(A))
        X = _like(np.linalg.solve(a, _host(B)), B)
        ctx.upper = upper
        ctx.save_for_backward(A, X)
        return X

    @staticmethod
    def backward(ctx, grad):
        A, X = ctx.saved_tensors
        grad_B = solve_triangular(A.mT, grad, upper=not ctx.upper)
        grad_A = -(grad_B @ X.mT)
        grad_A = grad_A.triu() if ctx.upper else grad_A.tril()
        return grad_A, grad_B, None


class Cholesky(Function):
    """L with A = L L^T, L lower triangular."""

    @staticmethod
    def forward(ctx, A):
        try:
            L = _like(np.linalg.cholesky(_host(A)), A)
        except np.linalg.LinAlgError:
            raise RuntimeError("linalg.cholesky: The factorization could not be completed "
                               "because the input is not positive-definite.") from None
        ctx.save_for_backward(L)
        return L

    @staticmethod
    def backward(ctx, grad):
        (L,) = ctx.saved_tensors
        # PyTorch's cholesky_backward: S = L^-T Phi(L^T gL) L^-1, symmetrised, where Phi
        # keeps the lower triangle and halves the diagonal
        P = L.mT @ grad.tril()
        P = P.tril() - 0.5 * P * eye(L.shape[-1], dtype=L.dtype, device=L.device)
        Y = solve_triangular(L.mT, P, upper=True)
        S = solve_triangular(L.mT, Y.mT, upper=True).mT
        return 0.5 * (S + S.mT)


def solve_triangular(A, B, *, upper: bool):
    return SolveTriangular.apply(A, B, upper)


def cholesky(A):
    return Cholesky.apply(A)
