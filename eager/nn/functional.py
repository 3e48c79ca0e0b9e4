"""nn.functional: the layer math as functions of tensors, built from eager ops, so
autograd (and later the compiler) sees only primitive ops."""
from __future__ import annotations

import math

from eager import _missing
from eager import factories
from eager import dispatcher
from eager.amp import autocast_mode as _autocast
from eager.dispatcher import ATEN, DispatchKey
from eager.kernels._common import rounded_once
from ir.records import named
from eager.tensor import Tensor, ops, reading_values
from ir import dtypes


for _name, _op in named("functional").items():  # F.tanh, F.sigmoid: as the ops themselves
    globals()[_name] = ATEN[_op]


from eager.nn._activations import *  # noqa: E402,F401,F403 - F's activations, distances
from eager.nn._activations import softmax_dim  # noqa: E402
from eager.nn import _flash_attention  # noqa: E402
from eager.nn._losses import *  # noqa: E402,F401,F403 - F's other losses
from eager.nn._normalization import *  # noqa: E402,F401,F403 - norms, channel dropout, pad
from eager.nn._normalization import dropped  # noqa: E402
from eager.nn import _nll  # noqa: E402
from eager.nn._convolution import *  # noqa: E402,F401,F403 - convolutions and pools
from eager.nn._sampling import *  # noqa: E402,F401,F403 - pixel shuffle, interpolate, grid_sample


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return ops.linear(input, weight, bias)


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return ops.relu(input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    return ops.gelu(input, approximate=approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    return ops.silu(input)




def softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return ops.softmax(input, softmax_dim(input, dim), dtype)


def log_softmax(input: Tensor, dim: int | None = None, dtype=None) -> Tensor:
    return ops.log_softmax(input, softmax_dim(input, dim), dtype)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return dropped(input, p, training)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    return ops.native_layer_norm(input, shape, weight, bias, eps)[0]


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return ops.embedding(weight, input, -1 if padding_idx is None else padding_idx)


def _reduce(loss: Tensor, reduction: str, count=None) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return ops.sum(loss)
    if reduction == "mean":
        return ops.sum(loss) / count if count is not None else ops.mean(loss)
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _pick(log_probs: Tensor, target: Tensor) -> Tensor:
    """log_probs[i, target[i]] for a (N, C) input: a gather, which checks each index
    against C where it runs (in eager, and in a compiled kernel's status word)."""
    return ops.squeeze(ops.gather(log_probs, 1, ops.unsqueeze(target, 1)), [1])


def _check_targets(target: Tensor, classes: int) -> None:
    """PyTorch's IndexError for a class index outside [0, classes). Skipped while a graph
    is captured: reading the values there would break the graph, and the gather in
    `_pick` checks them when the graph runs."""
    if dispatcher.key_active(DispatchKey.Tracer):
        return
    bad = target.detach()._host_np()
    if bad.size and (bad.min() < 0 or bad.max() >= classes):
        raise IndexError(f"Target {int(bad[(bad < 0) | (bad >= classes)][0])} is out of bounds.")


def _as_rows(input: Tensor, target: Tensor):
    """(N, C, d1, ...) inputs with (N, d1, ...) targets as (N*d1*..., C) rows."""
    if input.dim() == 1:
        return ops.unsqueeze(input, 0), ops.reshape(target, [1])
    if input.dim() > 2:
        c = input.shape[1]
        moved = ops.permute(input, [0] + list(range(2, input.dim())) + [1])
        return ops.reshape(moved, [-1, c]), ops.reshape(target, [-1])
    return input, target


@_autocast.policy("nll_loss")
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,
             ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    if target.dtype not in (dtypes.int64, dtypes.int32):
        raise RuntimeError(f"expected scalar type Long but found {target.dtype.name}")
    out_shape = target.shape
    rows, tgt = _as_rows(input, target)
    if rows.shape[0] != tgt.shape[0]:
        raise ValueError(f"Expected input batch_size ({rows.shape[0]}) to match target "
                         f"batch_size ({tgt.shape[0]}).")
    c = rows.shape[1]
    valid = ops.ne(tgt, ignore_index)
    safe = ops.where(valid, tgt, 0)
    _check_targets(safe, c)
    w = valid if weight is None else ops.index_select(weight, 0, safe) * valid
    # ignored rows are 0 whatever their log-probability (an -inf would give NaN times 0),
    # and take no gradient (a mean over no target divides it by 0: NaN times 0 again)
    loss = ops.where(valid, ops.neg(_pick(rows, safe)) * w, 0.0)
    if reduction == "none":
        return ops.reshape(loss, list(out_shape))
    if reduction in ("mean", "sum") and _nll.cascaded(loss):  # 16-bit, as PyTorch's CPU sums
        return _nll.reduced(loss, None if weight is None else w, valid, reduction)
    return _reduce(loss, reduction, ops.sum(w) if reduction == "mean" else None)


@_autocast.policy("cross_entropy")
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    class_dim = 0 if input.dim() == 1 else 1
    log_probs = ops.log_softmax(input, class_dim)
    if target.dtype.is_floating_point:  # class probabilities
        if target.shape != input.shape:
            raise RuntimeError("cross_entropy: class-probability targets must match the input "
                               f"shape {list(input.shape)}, got {list(target.shape)}")
        c = input.shape[class_dim]
        target = target * (1 - label_smoothing) + label_smoothing / c
        per = ops.neg(ops.sum(log_probs * target if weight is None else
                              log_probs * target * _class_view(weight, input), [class_dim]))
        return _reduce(per, reduction)
    nll = nll_loss(log_probs, target, weight, ignore_index, reduction)
    if label_smoothing <= 0.0:
        return nll
    rows, tgt = _as_rows(log_probs, target)
    valid = ops.ne(tgt, ignore_index)
    lp = rows if weight is None else rows * weight
    smooth = ops.neg(ops.sum(lp, [1])) * valid / rows.shape[1]
    if reduction == "none":
        smooth = ops.reshape(smooth, list(target.shape))
    elif reduction == "mean":
        denom = ops.sum(valid) if weight is None else ops.sum(
            ops.index_select(weight, 0, ops.where(valid, tgt, 0)) * valid)
        smooth = ops.sum(smooth) / denom
    else:
        smooth = ops.sum(smooth)
    return nll * (1 - label_smoothing) + smooth * label_smoothing


def _class_view(weight: Tensor, input: Tensor) -> Tensor:
    shape = [1] * input.dim()
    shape[1 if input.dim() > 1 else 0] = weight.shape[0]
    return ops.reshape(weight, shape)


@_autocast.policy("mse_loss")
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    diff = input - target
    return _reduce(diff * diff, reduction)


@_autocast.policy("l1_loss")
def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _reduce(ops.abs(input - target), reduction)


@_autocast.policy("scaled_dot_product_attention")
def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v; `is_causal` masks keys after each query.
    `enable_gqa`: grouped-query attention, the heads (dim -3) of key and value each serving
    a group of query heads (Llama's): they are repeated to the query's.
    16-bit floats on the CPU take PyTorch's flash kernels' values and gradients where
    PyTorch runs them (nn/_flash_attention.py), elsewhere, and in
    compiled functions, the math path: float32, rounded once."""
    if attn_mask is not None and is_causal:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set "
                           "when is_causal=True")
    if not dispatcher.key_active(DispatchKey.Tracer) and _flash_attention.applies(
            query, key, value, attn_mask, dropout_p, enable_gqa):
        return _flash_attention.ScaledDotProductFlashAttentionForCpu.apply(
            query, key, value, attn_mask, is_causal, scale)
    return _math_attention(query, key, value, attn_mask, dropout_p, is_causal, scale,
                           enable_gqa)


@rounded_once
def _math_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None,
                    dropout_p: float, is_causal: bool, scale: float | None,
                    enable_gqa: bool) -> Tensor:
    """PyTorch's math path: 16-bit floats in float32, rounded once."""
    if enable_gqa and query.dim() >= 3:
        key, value = _grouped_heads(query, key, value)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = ops.matmul(query, ops.transpose(key, -2, -1)) * scale
    q_len, k_len = query.shape[-2], key.shape[-2]
    if is_causal:
        rows = ops.unsqueeze(factories.arange(q_len, device=query.device), 1)
        cols = ops.unsqueeze(factories.arange(k_len, device=query.device), 0)
        attn_mask = ops.ge(rows, cols)
    if attn_mask is not None:
        if attn_mask.dtype is dtypes.bool_:
            scores = ops.where(attn_mask, scores, -math.inf)
        else:
            scores = scores + attn_mask
    if is_causal and k_len > 0:  # every query sees the first key: no row is all -inf
        weights = ops.softmax(scores, -1)
        if dropout_p > 0.0:
            weights = dropout(weights, dropout_p)
        return ops.matmul(weights, value)
    # PyTorch gives a query that may see no key zero weights, and so a zero output and no
    # gradient, where a plain softmax would give NaN
    blind = ops.eq(ops.amax(scores.detach(), [-1], True), -math.inf)
    weights = ops.where(blind, 0.0, ops.softmax(ops.where(blind, 0.0, scores), -1))
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return ops.matmul(weights, value)


def _grouped_heads(query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """key and value with each head repeated to the query's number of heads (dim -3)."""
    heads, kv = query.shape[-3], (key.shape[-3], value.shape[-3])
    if any(h == 0 or heads % h for h in kv):
        raise RuntimeError(f"scaled_dot_product_attention: with enable_gqa, the number of heads "
                           f"in key ({kv[0]}) and value ({kv[1]}) must divide the number of "
                           f"heads in query ({heads}); shapes {list(query.shape)}, "
                           f"{list(key.shape)}, {list(value.shape)}")
    return tuple(t if t.shape[-3] == heads else t.repeat_interleave(heads // t.shape[-3], -3)
                 for t in (key, value))


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    why = "to check the class values" if num_classes >= 0 else \
        "its output size, num_classes, is the largest class value + 1"
    with reading_values(why):
        values = tensor.detach()._host_np()
    if values.size == 0 and num_classes <= 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    if values.size and values.min() < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes < 0:
        num_classes = int(values.max()) + 1 if values.size else 0
    elif values.size and values.max() >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    classes = factories.arange(num_classes, device=tensor.device)
    return ops.eq(ops.unsqueeze(tensor, -1), classes).long()

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.nn.functional", "eager.nn.functional")
