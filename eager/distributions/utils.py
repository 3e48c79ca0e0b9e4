"""Helpers the distributions share (PyTorch's torch.distributions.utils): parameters
broadcast to one shape, probabilities and logits turned into each other, lazily made
attributes, standard normal draws."""
from __future__ import annotations

from numbers import Number

import numpy as np

from eager.autograd import enable_grad
from eager.derived_math import logsumexp
from eager.factories import randn, tensor
from eager.tensor import Size, Tensor

__all__ = ["broadcast_all", "probs_to_logits", "logits_to_probs", "clamp_probs",
           "lazy_property", "broadcast_tensors", "finfo_eps", "finfo_min"]


def broadcast_tensors(*tensors) -> tuple:
    shape = Size(np.broadcast_shapes(*(tuple(t.shape) for t in tensors)))
    return tuple(t.expand(shape) for t in tensors)


def broadcast_all(*values) -> tuple:
    """Numbers and tensors as tensors of one broadcast shape (numbers take the dtype and
    device of the first tensor, else the default dtype)."""
    if not all(isinstance(v, (Tensor, Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, "
                         "torch.Tensor or objects implementing __torch_function__.")
    like = next((v for v in values if isinstance(v, Tensor)), None)
    if like is None:
        return tuple(tensor(float(v)) for v in values)
    made = [v if isinstance(v, Tensor) else tensor(v, dtype=like.dtype, device=like.device)
            for v in values]
    return broadcast_tensors(*made)


def finfo_eps(dtype) -> float:
    return float(np.finfo(dtype.np).eps)


def finfo_min(dtype) -> float:
    return float(np.finfo(dtype.np).min)


def clamp_probs(probs: Tensor) -> Tensor:
    eps = finfo_eps(probs.dtype)
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """Log-odds for a binary event, else log-probabilities."""
    ps = clamp_probs(probs)
    return ps.log() - (-ps).log1p() if is_binary else ps.log()


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    return logits.sigmoid() if is_binary else logits.softmax(-1)


def normalize_logits(logits: Tensor) -> Tensor:
    return logits - logsumexp(logits, -1, keepdim=True)


def sum_rightmost(value: Tensor, dim: int) -> Tensor:
    """Sum out the last `dim` dimensions."""
    if dim == 0:
        return value
    return value.reshape(tuple(value.shape[:-dim]) + (-1,)).sum(-1)


def standard_normal(shape, like: Tensor) -> Tensor:
    return randn(tuple(shape), dtype=like.dtype, device=like.device)


class lazy_property:  # noqa: N801 - PyTorch's name
    """Computed at the first read (with grad enabled, so it keeps its history), then an
    attribute of the instance."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value
