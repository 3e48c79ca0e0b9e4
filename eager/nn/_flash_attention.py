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

The backward (cpu_flash_attention_backward) recomputes the probabilities from the
forward's log-sum-exp and rounds at each block: see `backward`. Measured: q, k, v
gradients of (2, 4, 16, 32) were ~1700-1900 of 4096 apart from PyTorch's on the math
path's rule, now none. Left: with two key blocks or more, the forward's output and
log-sum-exp are a few elements from PyTorch's (float16 mostly), which the gradients carry;
bfloat16 q of 33 rows keeps a few grad_v elements apart (4 of 8448), not traced.

float32/float64 stay on the composite: this file is only the 16-bit CPU case."""
from __future__ import annotations

import math

import numpy as np

from eager.autograd.custom_function import DelayedError, Function, _delayed
from eager.dispatcher import tls
from eager.kernels._common import result
from ir import dtypes

F32 = np.float32
_LN_FLT_MIN = np.uint32(0xc2aeac50).view(F32)
_LN_FLT_MAX = np.uint32(0x42b17218).view(F32)
_LOG2E = np.uint32(0x3fb8aa3b).view(F32)
_R_LN2 = F32(1 / math.log(2))
_GEMV_LANES = {"bfloat16": 4, "float16": 8}  # a product with one query or one key
_BACKWARD_OP = "_scaled_dot_product_flash_attention_for_cpu_backward"


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
            is_causal: bool = False, scale: float | None = None):
    """PyTorch's CPU flash attention of float32 arrays holding 16-bit values (q (B, H, L,
    D), k and v (B, H, S, D)); `mask` float32 broadcastable to (B, H, L, S) or None.
    Returns the float32 output before its rounding to the 16-bit type `half`, and the
    float32 log-sum-exp of each row's scores that its backward reads (max + log sum; 0 for
    a row with no key)."""
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
    lse = np.where(row_max == -np.inf, F32(0), row_max) + \
        np.log(row_sum.astype(np.float64)).astype(F32)
    return (out * (F32(1) / row_sum)[..., None]).astype(F32), lse.astype(F32)


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


def backward(q, k, v, out, grad_out, lse, half: str, mask=None, is_causal: bool = False,
             scale: float | None = None):
    """PyTorch's cpu_flash_attention_backward of float32 arrays holding 16-bit values (q,
    out, grad_out (B, H, L, D); k, v (B, Hk, S, D), Hk dividing H) from the forward's
    float32 log-sum-exp `lse` (B, H, L). Returns grad_q, grad_k, grad_v, float32 arrays of
    16-bit values.

    In blocks as the forward's (queries outer, keys inner; causal blocks past the diagonal
    skipped): the scores times the scale, plus the mask, their probabilities exp(x - lse)
    by Sleef's exp (sleef_expf), zero past the diagonal; dsum, each row's sum of
    grad_out * out in 16-lane vectors; the score gradient p (grad_out v^T - dsum) in
    float32 (grad_out v^T in a GEMV's lanes for a block of one query or one key). The
    probabilities and the score gradient are rounded to 16 bits before their products,
    and each gradient is a 16-bit tensor added into once per block: one rounding per
    block. The query heads of a key/value head (grouped-query attention) add into its
    grad_k and grad_v in turn, head after head. The GEMMs' orders are _GEMMS'."""
    B, H, L, _ = q.shape
    rep = H // k.shape[1]
    grads = [np.zeros(t.shape, F32) for t in (q, k, v)]
    if mask is not None:
        mask = np.broadcast_to(mask, (B, H, L, k.shape[2]))
    group = lambda a: a.reshape((B, k.shape[1], rep) + a.shape[2:])  # noqa: E731
    for r in range(rep):
        member = [None if a is None else group(a)[:, :, r]
                  for a in (q, out, grad_out, lse, mask)]
        group(grads[0])[:, :, r] = _backward_heads(k, v, *member, grads[1:], half,
                                                   is_causal, scale)
    return tuple(grads)


def _backward_heads(k, v, q, out, grad_out, lse, mask, grad_kv, half, is_causal, scale):
    """One query head per key/value head: returns grad_q, adds into grad_kv's arrays."""
    L, S = q.shape[2], k.shape[2]
    scale = F32(1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    q_split = min(256 if L >= 768 else 64 if L >= 192 else 32, L)
    kv_split = min(512, S)
    half_np = dtypes.bfloat16.np if half == "bfloat16" else dtypes.float16.np
    to_half = lambda x: x.astype(half_np).astype(F32)  # noqa: E731
    scores_of, add_v, add_q, add_k = _GEMMS[half]
    grad_q = np.zeros(q.shape, F32)
    grad_k, grad_v = grad_kv
    for m in range(0, L, q_split):
        rows = slice(m, min(m + q_split, L))
        qb, gob = q[:, :, rows], grad_out[:, :, rows]
        dsum = _row_dot(gob, out[:, :, rows])
        for n in range(0, min(rows.stop, S) if is_causal else S, kv_split):
            cols = slice(n, min(n + kv_split, S))
            kb, vb = k[:, :, cols], v[:, :, cols]
            scores = scores_of(qb, np.swapaxes(kb, -1, -2), scale)
            if mask is not None:
                scores = (scores + mask[:, :, rows, cols]).astype(F32)
            with np.errstate(invalid="ignore"):
                probs = sleef_expf((scores - lse[:, :, rows, None]).astype(F32))
            if is_causal:
                probs[..., np.arange(m, rows.stop)[:, None] < np.arange(n, cols.stop)] = 0
            grad_v[:, :, cols] = to_half(add_v(grad_v[:, :, cols],
                                               np.swapaxes(to_half(probs), -1, -2), gob))
            if 1 in (qb.shape[2], kb.shape[2]):  # a block of one query or one key
                dp = _lane_dot(gob, np.swapaxes(vb, -1, -2), _GEMV_LANES[half])
            else:
                dp = _ordered_dot(gob, np.swapaxes(vb, -1, -2))
            with np.errstate(invalid="ignore"):
                ds = to_half(probs * (dp - dsum[..., None]).astype(F32))
            grad_q[:, :, rows] = to_half(add_q(grad_q[:, :, rows], ds, kb, scale))
            grad_k[:, :, cols] = to_half(add_k(grad_k[:, :, cols], np.swapaxes(ds, -1, -2),
                                               qb, scale))
    return grad_q


def sleef_expf(x: np.ndarray) -> np.ndarray:
    """Sleef's vectorised expf (u10), PyTorch's Vectorized<float>::exp: 2^q times a
    degree-7 polynomial of the rest s = x - q ln 2 (ln 2 in two parts), each step one
    float32 FMA; 0 below -104, inf above 100. One value in ten over [-30, 0.5] is an ulp
    from the correctly rounded exp, enough to move a 16-bit gradient now and then."""
    x = np.asarray(x, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        q = np.rint((x * _R_LN2).astype(F32))
        q = np.where(np.isfinite(q), q, F32(0))
        s = _fma(q, F32(-0.693145751953125), x)
        s = _fma(q, F32(-1.428606765330187045e-06), s)
        u = F32(0.000198527617612853646278381)
        for c in (0.00139304355252534151077271, 0.00833336077630519866943359,
                  0.0416664853692054748535156, 0.166666671633720397949219, 0.5):
            u = _fma(u, s, F32(c))
        u = (F32(1) + _fma((s * s).astype(F32), u, s)).astype(F32)
        u = (u.astype(np.float64) * np.exp2(q.astype(np.float64))).astype(F32)
    u = np.where(x < -104, F32(0), u)
    return np.where(x > 100, F32(np.inf), u).astype(F32)


def _row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each row's sum of a * b as PyTorch's map2_reduce_all of 16-bit rows: 32 terms at a
    time in two 16-lane vectors, the tail into their first lanes, the two added, then
    halves; a row under 32 terms: its two vectors' lanes added, then lane by lane."""
    terms = (a * b).astype(F32)
    D = terms.shape[-1]
    if D < 32:
        lanes = terms[..., :16].copy()
        lanes[..., :max(D - 16, 0)] += terms[..., 16:]
        total = lanes[..., 0].copy()
        for i in range(1, min(D, 16)):
            total += lanes[..., i]
        return total
    acc = terms[..., :32].copy()
    body = 32 * (D // 32)
    for i in range(32, body, 32):
        acc += terms[..., i:i + 32]
    acc[..., :D - body] += terms[..., body:]
    return _halves(acc[..., :16] + acc[..., 16:], -1)


def _scaled_after(c, a, b, scale=F32(1)) -> np.ndarray:
    """c + scale * (a @ b), the sums in order (PyTorch's bfloat16 GEMMs here, measured
    on a CPU with AVX512-BF16)."""
    return (c + (_ordered_dot(a, b) * scale).astype(F32)).astype(F32)


def _fma_chain(c, a, b, scale=F32(1), scale_a: bool = False) -> np.ndarray:
    """c + a @ b as PyTorch's own GEMM loops (float16 without AVX512-FP16): one operand
    times the scale first (a's or b's), then term by term in order, each one FMA."""
    for i in range(a.shape[-1]):
        x, y = a[..., :, i, None], b[..., i, None, :]
        if scale_a:
            x = (x * scale).astype(F32)
        else:
            y = (y * scale).astype(F32)
        c = _fma(x, y, c)
    return c


def _four_sums(c, a, b, scale=F32(1)) -> np.ndarray:
    """c + scale * (a @ b), each dot product in PyTorch's cpublas sum(): 4 partial sums
    (term i in sum i % 4, the tail in the first), then added in order."""
    K = a.shape[-1]
    parts = np.zeros((4,) + a.shape[:-1] + b.shape[-1:], F32)
    for i in range(K):
        parts[i % 4 if i < 4 * (K // 4) else 0] += a[..., i, None] * b[..., i, None, :]
    dot = ((parts[0] + parts[1]) + parts[2]) + parts[3]
    return (c + (dot * scale).astype(F32)).astype(F32)


# per 16-bit type: the scores, then what grad_v, grad_q and grad_k each add per block (the
# float16 ones also match PyTorch's BlasKernel.cpp: scores and grad_k from an FMA loop with
# one operand scaled first, grad_q from 4-way partial dot products)
_GEMMS = {
    "bfloat16": (lambda q, kt, s: _scaled_after(0, q, kt, s), _scaled_after,
                 _scaled_after, _scaled_after),
    "float16": (lambda q, kt, s: _fma_chain(np.zeros(q.shape[:-1] + kt.shape[-1:], F32),
                                            q, kt, s),
                _fma_chain, _four_sums,
                lambda c, ds_t, q, s: _fma_chain(c, ds_t, q, s, scale_a=True)),
}


class ScaledDotProductFlashAttentionForCpu(
        Function, node_name="ScaledDotProductFlashAttentionForCpuBackward0"):
    """The 16-bit output and gradients as PyTorch's flash kernels give them (`forward` and
    `backward` above); the forward keeps its output and log-sum-exp for the backward. Its
    node has the name of PyTorch's (aten::_scaled_dot_product_flash_attention_for_cpu)."""

    @staticmethod
    def forward(ctx, q, k, v, attn_mask, is_causal, scale):
        arrays, mask = _arrays(q, k, v, attn_mask)
        rep = q.shape[1] // k.shape[1]  # grouped-query heads: k and v repeated to q's
        arrays[1:] = [np.repeat(a, rep, axis=1) for a in arrays[1:]] if rep > 1 else arrays[1:]
        out, lse = forward(*arrays, q.dtype.name, mask, is_causal, scale)
        out = result(out, q.dtype)
        ctx.save_for_backward(q, k, v, out)
        ctx.rest = attn_mask, is_causal, scale
        ctx.lse = lse  # float32 (B, H, L), as PyTorch's forward returns it
        return out

    @staticmethod
    def backward(ctx, grad):
        attn_mask, is_causal, scale = ctx.rest
        q, k, v, out = ctx.saved_tensors
        arrays, mask = _arrays(q, k, v, attn_mask)
        out, grad = (t.detach()._host_np().astype(F32) for t in (out, grad))
        found = backward(*arrays, out, grad, ctx.lse, q.dtype.name, mask, is_causal, scale)
        grads = [result(g, q.dtype) if need else None
                 for g, need in zip(found, ctx.needs_input_grad)]
        if tls.grad_enabled:  # create_graph=True: as PyTorch's, no derivative of this one
            node = DelayedError(f"derivative for aten::{_BACKWARD_OP} is not implemented")
            grads = [_delayed(node, nr, g) for nr, g in enumerate(grads)]
        return tuple(grads) + (None,) * 3


def _arrays(q, k, v, attn_mask):
    """q, k, v as float32 arrays; the mask float32 (or None)."""
    arrays = [t.detach()._host_np().astype(F32) for t in (q, k, v)]
    mask = None
    if attn_mask is not None:
        m = attn_mask.detach()._host_np()
        # PyTorch converts a boolean mask to q's type: 0 where kept, -inf where not
        mask = np.where(m, F32(0), F32(-np.inf)) if m.dtype == np.bool_ else m.astype(F32)
    return arrays, mask
