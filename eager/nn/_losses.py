"""nn.functional's losses beyond cross_entropy, nll_loss, mse_loss and l1_loss, in eager
ops, with PyTorch's reductions ("none", "mean", "sum"; kl_div also "batchmean")."""
from __future__ import annotations

import math

from eager import dispatcher, factories
from eager.amp import autocast_mode as _autocast
from eager.dispatcher import DispatchKey
from eager.kernels._common import rounded_once
from eager.nn._activations import logsigmoid, pairwise_distance, softplus_of
from eager.tensor import Tensor, ops
from ir import dtypes

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "smooth_l1_loss",
           "huber_loss", "kl_div", "margin_ranking_loss", "cosine_embedding_loss",
           "hinge_embedding_loss", "soft_margin_loss", "poisson_nll_loss", "gaussian_nll_loss",
           "triplet_margin_loss", "multilabel_soft_margin_loss"]


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "mean":
        return ops.mean(loss)
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _same_size(fn: str, input: Tensor, target: Tensor) -> None:
    if input.shape != target.shape:
        raise ValueError(f"{fn}: Using a target size ({list(target.shape)}) that is different "
                         f"to the input size ({list(input.shape)}) is deprecated. Please ensure "
                         f"they have the same size.")


@_autocast.policy("binary_cross_entropy")
def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """-w (t log x + (1 - t) log(1 - x)), each log at least -100 (as PyTorch's)."""
    _same_size("binary_cross_entropy", input, target)
    if not dispatcher.key_active(DispatchKey.Tracer):  # a captured graph would break here
        values = input.detach()._host_np()
        if values.size and not ((values >= 0) & (values <= 1)).all():
            raise RuntimeError("all elements of input should be between 0 and 1")
    loss = _binary_cross_entropy(input, target)  # PyTorch's kernel, then its mul_(weight)
    return _reduce(loss if weight is None else loss * weight, reduction)


@rounded_once
def _binary_cross_entropy(input: Tensor, target: Tensor) -> Tensor:
    log_x = ops.clamp(ops.log(input), -100.0, None)
    log_not_x = ops.clamp(ops.log(1 - input), -100.0, None)
    return -(target * log_x + (1 - target) * log_not_x)


@_autocast.policy("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,
                                     weight: Tensor | None = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """binary_cross_entropy(sigmoid(x), t) computed stably from the logits x, as PyTorch's
    composite: (1 - t) x - logsigmoid(x), 16-bit floats rounded after each op; pos_weight
    weighs the positive term per class."""
    _same_size("binary_cross_entropy_with_logits", input, target)
    if pos_weight is None:
        loss = (1 - target) * input - logsigmoid(input)
    else:
        log_weight = (pos_weight - 1) * target + 1
        loss = (1 - target) * input - log_weight * logsigmoid(input)
    return _reduce(loss if weight is None else loss * weight, reduction)


@_autocast.policy("smooth_l1_loss")
def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """PyTorch's kernel computes bfloat16 in float32 and rounds once, float16 op by op."""
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    by_type = rounded_once(_smooth_l1) if input.dtype is dtypes.bfloat16 else _smooth_l1
    return _reduce(by_type(input, target, beta), reduction)


def _smooth_l1(input: Tensor, target: Tensor, beta: float) -> Tensor:
    d = ops.abs(input - target)
    return d if beta == 0 else ops.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)


@_autocast.policy("huber_loss")
def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean",
               delta: float = 1.0) -> Tensor:
    """PyTorch's kernel computes float16 in float32 and rounds once, bfloat16 op by op."""
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    by_type = rounded_once(_huber) if input.dtype is dtypes.float16 else _huber
    return _reduce(by_type(input, target, delta), reduction)


def _huber(input: Tensor, target: Tensor, delta: float) -> Tensor:
    d = ops.abs(input - target)
    return ops.where(d < delta, 0.5 * d * d, (d - 0.5 * delta) * delta)


@_autocast.policy("kl_div")
def kl_div(input: Tensor, target: Tensor, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """target (log target - input), input being log-probabilities; 0 where target is 0."""
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:
        positive = target > 0
        safe = ops.where(positive, target, 1.0)
        loss = ops.where(positive, target * (ops.log(safe) - input), 0.0)
    if reduction == "batchmean":
        return ops.sum(loss) / (input.shape[0] if input.dim() else 1)
    return _reduce(loss, reduction)


@_autocast.policy("margin_ranking_loss")
def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        reduction: str = "mean") -> Tensor:
    return _reduce(ops.clamp(-target * (input1 - input2) + margin, 0.0, None), reduction)


@_autocast.policy("cosine_embedding_loss")
def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          reduction: str = "mean") -> Tensor:
    """1 - cos for target 1, max(0, cos - margin) for target -1 (cos along dim 1)."""
    eps = 1e-12  # PyTorch's EPSILON in this loss
    dot = ops.sum(input1 * input2, [-1], False)
    m1 = ops.sum(input1 * input1, [-1], False) + eps
    m2 = ops.sum(input2 * input2, [-1], False) + eps
    cos = dot / ops.sqrt(m1 * m2)
    loss = ops.where(target == 1, 1 - cos, ops.where(target == -1,
                                                     ops.clamp(cos - margin, 0.0, None), 0.0))
    return _reduce(loss, reduction)


@_autocast.policy("hinge_embedding_loss")
def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0,
                         reduction: str = "mean") -> Tensor:
    beyond = ops.where(target != 1, ops.clamp(margin - input, 0.0, None), 0.0)
    return _reduce(beyond + ops.where(target != -1, input, 0.0), reduction)


@_autocast.policy("soft_margin_loss")
def soft_margin_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce(softplus_of(-target * input), reduction)


@_autocast.policy("poisson_nll_loss")
def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,
                     eps: float = 1e-8, reduction: str = "mean") -> Tensor:
    loss = ops.exp(input) - target * input if log_input else \
        input - target * ops.log(input + eps)
    if full:  # Stirling's term t log t - t + log(2 pi t) / 2, where t > 1
        big = target > 1
        t = ops.where(big, target, 1.0)
        stirling = t * ops.log(t) - t + ops.log(t * (2 * math.pi)) * 0.5
        loss = loss + ops.where(big, stirling, 0.0)
    return _reduce(loss, reduction)


@_autocast.policy("gaussian_nll_loss")
def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor, full: bool = False,
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """(log max(var, eps) + (input - target)^2 / max(var, eps)) / 2 (+ log(2 pi) / 2)."""
    if not isinstance(var, Tensor):
        var = factories.full_like(input, float(var))
    if var.dim() == input.dim() - 1 and var.shape == input.shape[:-1]:
        var = ops.unsqueeze(var, -1)
    if not dispatcher.key_active(DispatchKey.Tracer):
        if (var.detach()._host_np() < 0).any():
            raise ValueError("var has negative entry/entries")
    var = ops.clamp(var.detach(), eps, None) + (var - var.detach())  # clamp, gradient kept
    loss = (ops.log(var) + (input - target) ** 2 / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@_autocast.policy("triplet_margin_loss")
def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor,
                        margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                        swap: bool = False, reduction: str = "mean") -> Tensor:
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = ops.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(ops.clamp(d_pos - d_neg + margin, 0.0, None), reduction)


@_autocast.policy("multilabel_soft_margin_loss")
def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                reduction: str = "mean") -> Tensor:
    per = -(target * -softplus_of(-input) + (1 - target) * -softplus_of(input))
    if weight is not None:
        per = per * weight
    return _reduce(ops.mean(per, [-1], False), reduction)

