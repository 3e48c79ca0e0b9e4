"""nll_loss's sums of 16-bit floats on the CPU, as PyTorch's CPU kernel makes them
(aten/src/ATen/native/LossNLL.cpp, nll_loss_out_frame; LossNLL2d.cpp for (N, C, d...)):
the terms -x[i, t[i]] * w[t[i]] added in the 16-bit type itself, each addition rounded,
in a cascade of eight partial sums. Partial j is added into partial j + 1, and restarts
from zero, at each counted index that is a multiple of 16^(j+1) (of 2^(power (j+1)),
`power` ceil(log2 n) // 8 from 2^39 terms); an ignored index adds nothing and carries
nothing, but is counted (the index runs over every target, in (N, d...) order). The partials are added in order at the end. The total weight is the same sum of
the weights (without a weight, the count of targets not ignored, rounded to the type),
and mean is one rounded division.

Summed in float32 and rounded once instead, bfloat16 and float16 losses were apart from
PyTorch 2.13's in about half of the cases (measured: 280 of 512 sums and means of
nll_loss and cross_entropy), and gradients in the weighted means, whose total weight
was apart too. The gradient of the sum is the sum's (each term's is the output's), so
the rest of nll_loss's graph gives PyTorch's w * -(g / total_weight) at the targets."""
from __future__ import annotations

import numpy as np

from eager import dispatcher
from eager.autograd import Function
from eager.dispatcher import DispatchKey
from eager.factories import tensor
from eager.tensor import Tensor
from ir import dtypes

LEVELS = 8


def cascaded(loss: Tensor) -> bool:
    """Whether nll_loss sums `loss` in PyTorch's cascade: 16-bit floats on the CPU, run
    eagerly. A captured graph keeps the float32 sum rounded once (its sum node), as CUDA
    does (PyTorch's CUDA kernel sums in float32 too)."""
    return (loss.dtype in dtypes.HALF and loss.device.type == "cpu"
            and not dispatcher.key_active(DispatchKey.Tracer))


def cascade_sum(terms: np.ndarray, counted: np.ndarray, dt) -> np.float32:
    """The 16-bit sum of `terms` (float32 values of type `dt`) at the indices `counted`
    holds True, as PyTorch's nll_loss kernel adds them (above)."""
    index = np.flatnonzero(counted)
    values = terms.reshape(-1)[index].astype(np.float32)
    power = max(4, (max(counted.size - 1, 0)).bit_length() // LEVELS)
    carried = np.zeros(index.size, np.int64)  # how many levels carry up at each index
    at = np.flatnonzero(index & ((1 << power) - 1) == 0)
    for j in range(1, LEVELS):
        carried[at] += index[at] & ((1 << (power * j)) - 1) == 0
    total = np.zeros(1, np.float32)
    with np.errstate(over="ignore"):  # float16 sums past 65504 are inf, as PyTorch's
        for level in range(LEVELS):
            if values.size <= 1:  # it reaches the total, whichever level it stays in
                return _rounded(total + values.sum(), dt)[0]
            closes = carried > level if level < LEVELS - 1 else np.zeros(carried.size, bool)
            sums, left = _runs_summed(values, closes, dt)
            total = _rounded(total + left, dt)
            values, carried = sums, carried[closes]
    return total[0]


def _runs_summed(values: np.ndarray, closes: np.ndarray, dt):
    """The sum of each run of `values` that ends at a value where `closes` holds, and of
    the run after the last such value, each from zero in order, every addition rounded
    to dt. The runs are added side by side, longest first, one place at a time."""
    ends = np.flatnonzero(closes) + 1
    starts = np.concatenate(([0], ends))
    lengths = np.concatenate((ends, [values.size])) - starts
    order = np.argsort(-lengths, kind="stable")
    starts, lengths = starts[order], lengths[order]
    acc = np.zeros(starts.size, np.float32)
    for k in range(int(lengths[0])):
        live = int(np.count_nonzero(lengths > k))
        acc[:live] = _rounded(acc[:live] + values[starts[:live] + k], dt)
    sums = np.empty_like(acc)
    sums[order] = acc
    return sums[:-1], sums[-1]


def _rounded(a: np.ndarray, dt) -> np.ndarray:
    """float32 values rounded to dt, as float32."""
    return a.astype(dt.np).astype(np.float32)


class _CascadeSum(Function):
    """cascade_sum of a 16-bit tensor's counted elements, as a 0-dim tensor of its type;
    its gradient is the sum's."""

    @staticmethod
    def forward(ctx, terms: Tensor, counted: np.ndarray) -> Tensor:
        ctx.shape = list(terms.shape)
        total = cascade_sum(terms.detach()._host_np().astype(np.float32), counted, terms.dtype)
        return tensor(total, dtype=terms.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad.expand(ctx.shape), None


def reduced(loss: Tensor, weights: Tensor | None, valid: Tensor, reduction: str) -> Tensor:
    """nll_loss's sum or mean of its per-target losses `loss` (16-bit, CPU), `weights`
    the per-target weights (None without a weight), `valid` where the target is not
    ignored."""
    counted = valid.detach()._host_np().reshape(-1)
    total = _CascadeSum.apply(loss, counted)
    if reduction == "sum":
        return total
    if weights is None:  # the count as a tensor of the type (a number would divide wide)
        return total / tensor(np.count_nonzero(counted), dtype=loss.dtype)
    return total / _CascadeSum.apply(weights, counted)
