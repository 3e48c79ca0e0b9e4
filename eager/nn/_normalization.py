"""nn.functional's normalisations (batch_norm, group_norm, instance_norm, rms_norm),
channel dropout (dropout1d/2d/3d) and pad, in eager ops (group_norm in its own op,
eager/kernels/group_norm.py). rms_norm takes 16-bit floats in float32 and rounds once
(rounded_once), as PyTorch's does."""
from __future__ import annotations

import warnings

import numpy as np

from eager import factories
from eager.autograd.grad_mode import no_grad
from eager.derived_math import reciprocal
from eager.kernels._common import compute_np, rounded_once
from eager.tensor import Tensor, ops
from ir import dtypes

__all__ = ["batch_norm", "group_norm", "instance_norm", "rms_norm", "dropout1d", "dropout2d",
           "dropout3d", "pad"]


def _channel_view(t: Tensor | None, input: Tensor):
    """A per-channel (dim 1) tensor shaped to broadcast against input."""
    return None if t is None else t.reshape([1, -1] + [1] * (input.dim() - 2))


def _affine(out: Tensor, weight, bias, input: Tensor) -> Tensor:
    if weight is not None:
        out = out * _channel_view(weight, input)
    if bias is not None:
        out = out + _channel_view(bias, input)
    return out


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (dim 1) over the batch and the other dims: with the batch's
    statistics in training (running ones updated: mean, and the unbiased variance, by
    `momentum`), with the running ones otherwise."""
    if input.dim() < 2:
        raise ValueError(f"expected 2D or more input (got {input.dim()}D input)")
    dims = [0] + list(range(2, input.dim()))
    count = input.numel() // max(input.shape[1], 1)
    if training and count <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got "
                         f"input size {list(input.shape)}")
    if not training and (running_mean is None or running_var is None):
        raise RuntimeError("batch_norm in eval mode needs running_mean and running_var")
    if input.dtype in dtypes.HALF:
        return _half_batch_norm(input, running_mean, running_var, weight, bias, training,
                                momentum, eps, dims, count)
    if training:
        mean = ops.mean(input, dims, True)
        var = ops.var(input, dims, correction=0, keepdim=True)
        if running_mean is not None and running_var is not None:
            with no_grad():
                m = momentum
                running_mean.mul_(1 - m).add_(mean.detach().reshape(-1), alpha=m)
                unbiased = var.detach().reshape(-1) * (count / (count - 1))
                running_var.mul_(1 - m).add_(unbiased, alpha=m)
    else:
        mean, var = _channel_view(running_mean, input), _channel_view(running_var, input)
    return _affine((input - mean) * ops.rsqrt(var + eps), weight, bias, input)


def _half_batch_norm(input: Tensor, running_mean, running_var, weight, bias,
                     training: bool, momentum: float, eps: float, dims: list, count: int):
    """batch_norm of a 16-bit input as PyTorch's CPU kernel computes it, each rule
    measured against PyTorch 2.13 (0 of 32256 outputs apart, both types, training and
    eval; the composite in 16-bit ops was ~1400 apart). Training keeps the channel's mean
    and invstd in the parameters' type (`stat`; rounded where that is a 16-bit float):
    bfloat16's invstd from its sum of squares rounded, over the count rounded. In float32
    then alpha = weight * invstd, beta = bias - mean * alpha, and the output is one FMA,
    x * alpha + beta (addcmul), rounded once. The running statistics update in float32
    and round once, except bfloat16 ones, which PyTorch updates in c10::BFloat16
    arithmetic (`_bfloat16_running_update`)."""
    dt, x = input.dtype, input.float()
    stat = next((t.dtype for t in (weight, running_mean) if t is not None), dt)
    kept = stat if stat in dtypes.HALF else None

    def wide(t):
        return None if t is None else _channel_view(t, input).float()
    if training:
        mean = ops.mean(x, dims, True)
        var = ops.var(x, dims, correction=0, keepdim=True)
        var_sum = var * count
        if kept is dtypes.bfloat16:
            var_sum = var_sum.to(kept)
            var = (var_sum / factories.tensor(count, dtype=kept)).float()
        invstd = reciprocal(ops.sqrt(var + eps))
        if running_mean is not None and running_var is not None:
            with no_grad():
                if running_mean.dtype is dtypes.bfloat16:
                    _bfloat16_running_update(running_mean, running_var, mean.detach(),
                                             var_sum.detach(), count, momentum)
                else:
                    unbiased = ops.var(x, dims, correction=1).reshape(-1)
                    _half_running_update(running_mean, mean.detach().reshape(-1), momentum)
                    _half_running_update(running_var, unbiased, momentum)
        if kept is not None:
            mean, invstd = mean.to(kept).float(), invstd.to(kept).float()
    else:
        mean, invstd = wide(running_mean), reciprocal(ops.sqrt(wide(running_var) + eps))
    alpha = invstd if weight is None else invstd * wide(weight)
    beta = -(mean * alpha) if bias is None else wide(bias) - mean * alpha
    return ops.addcmul(beta, x, alpha).to(dt)


def _half_running_update(running: Tensor, batch: Tensor, momentum: float) -> None:
    """running = (1 - momentum) * running + momentum * batch, as PyTorch's CPU kernel:
    in float32 rounded once."""
    running.copy_(running.float() * (1 - momentum) + batch * momentum)


def _bfloat16_running_update(running_mean: Tensor, running_var: Tensor, mean: Tensor,
                             var_sum: Tensor, count: int, momentum: float) -> None:
    """bfloat16 running statistics as PyTorch's CPU kernel updates them, in c10::BFloat16
    arithmetic: the momentum m rounded to bfloat16; the mean m * mean + (1 - m) * running,
    each product, 1 - m and the sum rounded; the unbiased variance the channel's sum of
    squares rounded to bfloat16 over count - 1 rounded to bfloat16, the quotient rounded,
    then m times it in float32 (a bfloat16 times a float is a float) plus (1 - m) *
    running rounded, that float sum rounded once. The variance rounded once from float32
    was a unit off PyTorch's in 15% of channels; now none (960 in 40 draws of shapes and
    momenta)."""
    bf16 = dtypes.bfloat16
    m = factories.tensor(momentum, dtype=bf16)
    rest = 1 - m
    running_mean.copy_(m * mean.reshape(-1).to(bf16) + rest * running_mean)
    unbiased = var_sum.reshape(-1).to(bf16) / factories.tensor(count - 1, dtype=bf16)
    running_var.copy_(m.float() * unbiased.float() + (rest * running_var).float())


def instance_norm(input: Tensor, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5) -> Tensor:
    """Normalise each (sample, channel) over the remaining dims."""
    if not use_input_stats:
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    dims = list(range(2, input.dim()))
    mean = ops.mean(input, dims, True)
    var = ops.var(input, dims, correction=0, keepdim=True)
    if running_mean is not None and running_var is not None:
        count = input.numel() // max(input.shape[0] * input.shape[1], 1)
        with no_grad():
            batch_mean = mean.detach().mean([0]).reshape(-1)
            batch_var = var.detach().mean([0]).reshape(-1) * (count / max(count - 1, 1))
            running_mean.mul_(1 - momentum).add_(batch_mean, alpha=momentum)
            running_var.mul_(1 - momentum).add_(batch_var, alpha=momentum)
    return _affine((input - mean) * ops.rsqrt(var + eps), weight, bias, input)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise each sample's channels in num_groups groups: native_group_norm (its
    gradient NativeGroupNormBackward0, 16-bit ones as PyTorch's kernel computes them).
    Parameters of another type than the input's are float32 beside a 16-bit input
    (PyTorch's mixed kernel: the result keeps the input's type) or PyTorch's error."""
    if input.dim() < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.dim()}")
    n, c = input.shape[:2]
    if num_groups > 0 and c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    params = [t for t in (weight, bias) if t is not None]
    if any(t.dtype is not input.dtype for t in params) and not (
            input.dtype in dtypes.HALF and all(t.dtype is dtypes.float32 for t in params)):
        raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype."
                           if input.dtype is dtypes.float64 else
                           "mixed dtype (CPU): expect parameter to have scalar type of Float")
    hw = input.numel() // max(n * c, 1)
    return ops.native_group_norm(input, weight, bias, n, c, hw, num_groups, eps)[0]


@rounded_once
def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
             eps: float | None = None) -> Tensor:
    """input / sqrt(mean(input^2) + eps) over the last dims, times weight; eps defaults to
    the machine epsilon of the type it computes in (float32's for the 16-bit floats, which
    compute in float32 and round once), as PyTorch's."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.dim() - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in shape)}], but got input of size "
                           f"{list(input.shape)}")
    if eps is None:
        eps = float(np.finfo(compute_np(input.dtype)).eps)
    dims = list(range(input.dim() - len(shape), input.dim()))
    out = input * ops.rsqrt(ops.mean(input * input, dims, True) + eps)
    return out if weight is None else out * weight


def dropped(input: Tensor, p: float, training: bool, mask_shape=None) -> Tensor:
    """PyTorch's dropout: each element (or, with `mask_shape`, each slice a mask of that
    shape broadcasts over) zeroed with probability p in training, the rest scaled by
    1 / (1 - p)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0
    shape = input.shape if mask_shape is None else mask_shape
    keep = factories.rand(*shape, dtype=input.dtype, device=input.device) >= p
    return input * keep * (1.0 / (1.0 - p))


def _feature_dropout(input: Tensor, p: float, training: bool) -> Tensor:
    """PyTorch's feature_dropout: dim 0 the batch, dim 1 the channels, the rest one
    feature map dropped whole."""
    if input.dim() < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    return dropped(input, p, training, list(input.shape[:2]) + [1] * (input.dim() - 2))


def _unbatched(input: Tensor, p: float, training: bool) -> Tensor:
    """Feature dropout of an input without its batch dim: one added, then taken off."""
    return ops.squeeze(_feature_dropout(ops.unsqueeze(input, 0), p, training), [0])


def _check_p(p: float) -> None:
    if not 0.0 <= p <= 1.0:  # before the rank, as PyTorch checks them
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _warn_rank(name: str, input: Tensor, spatial: int) -> None:
    warnings.warn(f"{name}: Received a {input.dim()}-D input to {name}, which is deprecated and "
                  f"will result in an error in a future release. To retain the behavior and "
                  f"silence this warning, please use dropout instead. Note that {name} exists "
                  f"to provide channel-wise dropout on inputs with {spatial} spatial dimensions, "
                  f"a channel dimension, and an optional batch dimension (i.e. {spatial + 1}D "
                  f"or {spatial + 2}D inputs).", stacklevel=3)


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels (dim -2 of an (N, C, L) or (C, L) input)."""
    _check_p(p)
    if input.dim() not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.dim()}D "
                           f"input. Note that dropout1d exists to provide channel-wise dropout "
                           f"on inputs with 1 spatial dimension, a channel dimension, and an "
                           f"optional batch dimension (i.e. 2D or 3D inputs).")
    return _feature_dropout(input, p, training) if input.dim() == 3 else \
        _unbatched(input, p, training)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, H, W). As PyTorch's: other ranks warn and are read as
    (N, C, *) (a 3-D input as (N, C, L), a 2-D one as (N, C): each element its own
    channel)."""
    _check_p(p)
    if input.dim() not in (3, 4):
        _warn_rank("dropout2d", input, 2)
    if input.dim() == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change "
                      "in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout "
                      "behavior, please switch to using dropout1d instead.", stacklevel=2)
    return _feature_dropout(input, p, training)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W). As PyTorch's: other ranks warn,
    and any but 5-D are read as unbatched (C, *)."""
    _check_p(p)
    if input.dim() not in (4, 5):
        _warn_rank("dropout3d", input, 3)
    return _feature_dropout(input, p, training) if input.dim() == 5 else \
        _unbatched(input, p, training)


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last len(pad) // 2 dims: (left, right) of the last, then of the one before,
    ...; negative amounts crop. Modes: constant (value), reflect, replicate, circular."""
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > input.dim():
        raise RuntimeError(f"Padding length should be even and at most twice the number of "
                           f"dimensions of the input; got {len(pad)} for a {input.dim()}D input")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode {mode!r} is not supported (constant, reflect, "
                                  f"replicate, circular)")
    if mode != "constant" and value not in (None, 0, 0.0):
        raise RuntimeError(f"Padding mode \"{mode}\" doesn't take in value argument")
    out = input
    for i in range(len(pad) // 2):
        dim = input.dim() - 1 - i
        left, right = pad[2 * i], pad[2 * i + 1]
        out = _pad_dim(out, dim, left, right, mode, 0.0 if value is None else value)
    return out


def _pad_dim(x: Tensor, dim: int, left: int, right: int, mode: str, value: float) -> Tensor:
    n = x.shape[dim]
    if left < 0 or right < 0:  # crop first
        x = ops.slice(x, dim, max(-left, 0), n - max(-right, 0))
        n, left, right = x.shape[dim], max(left, 0), max(right, 0)
    if not left and not right:
        return x
    if mode == "constant":
        def block(k):
            shape = list(x.shape)
            shape[dim] = k
            return factories.full(shape, value, dtype=x.dtype, device=x.device)
        parts = ([block(left)] if left else []) + [x] + ([block(right)] if right else [])
        return ops.cat(parts, dim)
    if mode == "reflect" and (left >= n or right >= n):
        raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding "
                           f"input dimension, but got: padding ({left}, {right}) at dimension "
                           f"{dim} of input {list(x.shape)}")
    if mode == "circular" and (left > n or right > n):
        raise RuntimeError("Padding value causes wrapping around more than once.")
    if mode == "replicate" and n == 0:
        raise RuntimeError(f"pad: replicate needs a non-empty dimension {dim}")
    positions = range(-left, n + right)
    if mode == "reflect":
        index = [abs(i) if i < 0 else (2 * (n - 1) - i if i >= n else i) for i in positions]
    elif mode == "replicate":
        index = [min(max(i, 0), n - 1) for i in positions]
    else:
        index = [i % n for i in positions]
    return ops.index_select(x, dim, factories.tensor(index, device=x.device))
