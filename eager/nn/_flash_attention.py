"""16-bit scaled_dot_product_attention as PyTorch's CPU computes it: its flash-attention
kernel (cpu_flash_attention), which PyTorch picks for 4-dim inputs without dropout, not the
float32 composite rounded once that kiln computes elsewhere (PyTorch's math path).

The rule, measured against PyTorch 2.13 (AVX512) bit for bit:
- keys in blocks of 512, queries in blocks of 32 (64 from 192 queries, 256 from 768);
- q k^T in float32 from the 16-bit operands, each dot product summed in order (a block of
  one query or one key: in 4 lanes for bfloat16, 8 for float16, added in halves);
- times the scale (a float32), or, with a mask, times the scale plus the mask in one FMA;
  causal keys are -inf before the scale;
- an online softmax per key block: the row's max so far, exps of the scores less it by
  PyTorch's fast exp (fexp_u20: a cubic for 2^fraction, about a bfloat16 unit from exp)
  over the block's whole 16-lane vectors and a correctly rounded exp for its last keys,
  their sum in 16 lanes added in halves, then the last keys one by one; the running sum
  and the output scaled by exp(old max - new max) (sum: one FMA);
- the exps rounded to the 16-bit type, their product with v summed in float32 in order
  onto the running output; at the end the output times 1 / sum, rounded once.

float32/float64 stay on the composite: this file is only the 16-bit CPU case."""
from __future__ import annotations

import math

import numpy as np

from eager.autograd.custom_function import Function
from eager.autograd.engine import grad as autograd_grad
from eager.autograd.grad_mode import enable_grad
from eager.kernels._common import result
from ir import dtypes

F32 = np.float32
_LN_FLT_MIN = np.uint32(0xc2aeac50).view(F32)
_LN_FLT_MAX = np.uint32(0x42b17218).view(F32)
_LOG2E = np.uint32(0x3fb8aa3b).view(F32)
_GEMV_LANES = {"bfloat16": 4, "float16": 8}  # a product with one query or one key


def applies(query, key, value, attn_mask, dropout_p: float, enable_gqa: bool) -> bool:
    """Whether PyTorch's CPU runs its flash kernel here for 16-bit floats (sdp_utils_cpp's
    checks): q, k, v of one 16-bit type on the CPU, 4 dims, no dropout, one batch size,
    heads equal (or dividing, with enable_gqa), one head size, no empty sequence, the last
    dim dense; a mask of 2 or 4 dims, boolean, float32 or of q's type."""
    dt = query.dtype
    if dt not in dtypes.HALF or dropout_p > 0.0:
        return False
    qkv = (query, key, value)
    if any(t.dtype is not dt or t.device.type != "cpu" or t.dim() != 4 for t in qkv):
        return False
    if key.shape[0] != query.shape[0] or value.shape[0] != query.shape[0]:
        return False
    heads, kv_heads = query.shape[1], (key.shape[1], value.shape[1])
    if kv_heads[0] != kv_heads[1] or (heads != kv_heads[0] and not (
            enable_gqa and kv_heads[0] and heads % kv_heads[0] == 0)):
        return False
    if not query.shape[-1] == key.shape[-1] == value.shape[-1]:
        return False
    if 0 in (query.shape[2], key.shape[2], query.shape[3]):
        return False
    if any(t.stride(-1) != 1 for t in qkv):
        return False
    if attn_mask is not None:
        if attn_mask.dim() not in (2, 4) or attn_mask.device.type != "cpu" or \
                attn_mask.dtype not in (dtypes.bool_, dtypes.float32, dt) or \
                attn_mask._requires_grad:
            return False
    return True


def forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, half: str, mask=None,
            is_causal: bool = False, scale: float | None = None) -> np.ndarray:
    """PyTorch's CPU flash attention of float32 arrays holding 16-bit values (q (B, H, L,
    D), k and v (B, H, S, D)); `mask` float32 broadcastable to (B, H, L, S) or None.
    Returns the float32 output before its rounding to the 16-bit type `half`."""
    L, S = q.shape[2], k.shape[2]
    scale = F32(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    q_split = min(256 if L >= 768 else 64 if L >= 192 else 32, L)
    kv_split = min(512, S)
    lone_queries = q_split == 1 or (L - 1) % q_split == 0  # a last block of one query
    half_np = dtypes.bfloat16.np if half == "bfloat16" else dtypes.float16.np
    row_max = np.full(q.shape[:3], -np.inf, F32)
    row_sum = np.zeros(q.shape[:3], F32)
    out = np.zeros(q.shape, F32)
    rows = np.arange(L)[:, None]
    for n in range(0, S, kv_split):
        cols = min(kv_split, S - n)
        scores = _ordered_dot(q, np.swapaxes(k[:, :, n:n + cols], -1, -2))
        if cols == 1:
            scores = _lane_dot(q, np.swapaxes(k[:, :, n:n + cols], -1, -2), _GEMV_LANES[half])
        elif lone_queries:
            scores[:, :, -1:] = _lane_dot(q[:, :, -1:], np.swapaxes(k[:, :, n:n + cols], -1, -2),
                                          _GEMV_LANES[half])
        if is_causal:
            scores[..., rows < n + np.arange(cols)] = -np.inf
        with np.errstate(invalid="ignore"):
            if mask is None:
                scores = (scores * scale).astype(F32)
            else:
                scores = _fma(scores, scale, np.broadcast_to(mask, scores.shape[:2] + (
                    L, S))[..., n:n + cols])
        new_max = np.maximum(row_max, scores.max(-1))
        seen = new_max != -np.inf  # rows with a key seen so far
        safe_max = np.where(seen, new_max, F32(0))
        probs, block_sum = _exp_sum(scores, safe_max[..., None])
        probs[~seen] = 0
        block_sum[~seen] = 0
        with np.errstate(invalid="ignore", over="ignore"):
            rescale = np.exp((row_max - safe_max).astype(np.float64)).astype(F32)
        rescale = np.where(seen, rescale, F32(1))
        row_sum = np.where(seen, _fma(rescale, row_sum, block_sum), row_sum)
        if n:
            out = (out * rescale[..., None]).astype(F32)
        row_max = np.where(seen, new_max, row_max)
        product = _ordered_dot(probs.astype(half_np).astype(F32), v[:, :, n:n + cols])
        out = (out + product).astype(F32) if n else product
    row_sum[row_sum == 0] = 1
    return (out * (F32(1) / row_sum)[..., None]).astype(F32)


def _fma(a, b, c) -> np.ndarray:
    """a * b + c rounded once to float32 (float32 products are exact in float64)."""
    with np.errstate(invalid="ignore"):
        return (np.asarray(a, np.float64) * np.asarray(b, np.float64) +
                np.asarray(c, np.float64)).astype(F32)


def _ordered_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b over the last two dims in float32, each sum taken term by term in order (the
    products of 16-bit values are exact in float32)."""
    acc = np.zeros(a.shape[:-1] + b.shape[-1:], F32)
    for i in range(a.shape[-1]):
        acc += a[..., i, None] * b[..., i, None, :]
    return acc


def _lane_dot(a: np.ndarray, b: np.ndarray, lanes: int) -> np.ndarray:
    """a @ b in `lanes` float32 partial sums (term i in lane i % lanes), the lanes added in
    halves, the last len % lanes terms one by one."""
    terms = a[..., :, :, None] * b[..., None, :, :]  # ..., rows, K, cols
    K = terms.shape[-2]
    body = lanes * (K // lanes)
    acc = np.zeros(terms.shape[:-2] + (lanes,) + terms.shape[-1:], F32)
    for i in range(0, body, lanes):
        acc += terms[..., i:i + lanes, :]
    acc = _halves(acc, -2)
    for i in range(body, K):
        acc += terms[..., i, :]
    return acc


def _halves(acc: np.ndarray, axis: int) -> np.ndarray:
    """Lanes along `axis` added as a vector's reduce_all adds them: halves, then halves."""
    acc = np.moveaxis(acc, axis, -1)
    while acc.shape[-1] > 1:
        h = acc.shape[-1] // 2
        acc = acc[..., :h] + acc[..., h:]
    return acc[..., 0]


def _exp_sum(scores: np.ndarray, row_max: np.ndarray):
    """PyTorch's _exp_reduce_sum_fusion_kernel: exps of scores - max (fexp_u20 over whole
    16-lane vectors, exp over the rest) and their float32 sum in its order."""
    with np.errstate(invalid="ignore"):
        x = (scores - row_max).astype(F32)
    cols = x.shape[-1]
    body = 16 * (cols // 16)
    e = np.empty_like(x)
    e[..., :body] = fexp_u20(x[..., :body])
    with np.errstate(over="ignore"):
        e[..., body:] = np.exp(x[..., body:].astype(np.float64)).astype(F32)
    lanes = np.zeros(x.shape[:-1] + (16,), F32)
    for i in range(0, body, 16):
        lanes += e[..., i:i + 16]
    total = _halves(lanes, -1) if body else np.zeros(x.shape[:-1], F32)
    for i in range(body, cols):
        total += e[..., i]
    return e, total


def fexp_u20(x: np.ndarray) -> np.ndarray:
    """PyTorch's Vectorized<float>::fexp_u20: 2^(x log2 e), the fraction's power a cubic
    (its float32 FMAs), set into the exponent bits by a truncating conversion; 0 below
    ln(FLT_MIN), inf above ln(FLT_MAX)."""
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        src = (x * _LOG2E).astype(F32)
        frac = (src - np.floor(src)).astype(F32)
        poly = _fma(frac, F32(-0.079204240219773236), F32(-0.22433836478672356))
        poly = _fma(frac, poly, F32(0.30354260500649682))
        poly = _fma(frac, poly, F32(0.00010703434948458272))
        src = (src - poly).astype(F32)
        bits = _fma(F32(2 ** 23), src, F32(2 ** 23 * 127))
        bits = np.trunc(np.where(np.isfinite(bits), bits, 0)).astype(np.int64)
    out = bits.astype(np.uint32).view(F32)
    out = np.where(x < _LN_FLT_MIN, F32(0), out)
    return np.where(x > _LN_FLT_MAX, F32(np.inf), out).astype(F32)



class ScaledDotProductFlashAttentionForCpu(Function):
    """The 16-bit output as PyTorch's flash kernel gives it; its gradient is still that of
    the float32 composite rounded once (`math`, F's math path): PyTorch's flash backward
    rounds elsewhere (16-bit probabilities and gradient accumulators), not yet modelled."""

    @staticmethod
    def forward(ctx, q, k, v, attn_mask, is_causal, scale, enable_gqa, math):
        ctx.save_for_backward(q, k, v)
        ctx.rest = attn_mask, is_causal, scale, enable_gqa, math
        return _forward_tensor(q, k, v, attn_mask, is_causal, scale)

    @staticmethod
    def backward(ctx, grad):
        attn_mask, is_causal, scale, enable_gqa, math = ctx.rest
        inputs = [t.detach().requires_grad_(need)
                  for t, need in zip(ctx.saved_tensors, ctx.needs_input_grad)]
        with enable_grad():
            out = math(*inputs, attn_mask, 0.0, is_causal, scale, enable_gqa)
            wanted = [t for t in inputs if t.requires_grad]
            found = iter(autograd_grad(out, wanted, grad))
        grads = tuple(next(found) if t.requires_grad else None for t in inputs)
        return grads + (None,) * 5


def _forward_tensor(q, k, v, attn_mask, is_causal, scale):
    dt = q.dtype
    arrays = [t.detach()._host_np().astype(F32) for t in (q, k, v)]
    if arrays[1].shape[1] != arrays[0].shape[1]:  # grouped-query heads
        rep = arrays[0].shape[1] // arrays[1].shape[1]
        arrays[1:] = [np.repeat(a, rep, axis=1) for a in arrays[1:]]
    mask = None
    if attn_mask is not None:
        m = attn_mask.detach()._host_np()
        # PyTorch converts a boolean mask to q's type: 0 where kept, -inf where not
        mask = np.where(m, F32(0), F32(-np.inf)) if m.dtype == np.bool_ else m.astype(F32)
    return result(forward(*arrays, dt.name, mask, is_causal, scale), dt)
