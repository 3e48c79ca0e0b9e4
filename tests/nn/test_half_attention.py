"""16-bit F.scaled_dot_product_attention as PyTorch's CPU flash kernels compute it, forward
and backward: against scalar numpy models of their rules (row by row, block by block, as
cpu_flash_attention and cpu_flash_attention_backward loop), against PyTorch 2.13 bit for bit
where it is installed, and the rounded-once answers they replaced, which differ."""
import math

import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager.nn import _flash_attention
from ir import dtypes
from runtime.llvm.target import host

F32 = np.float32
TYPES = {"bfloat16": dtypes.bfloat16.np, "float16": dtypes.float16.np}


def _fexp(x):
    """fexp_u20 of one float32, step by step."""
    f = lambda a, b, c: F32(np.float64(a) * np.float64(b) + np.float64(c))  # noqa: E731
    if x < np.uint32(0xc2aeac50).view(F32):
        return F32(0)
    src = F32(F32(x) * np.uint32(0x3fb8aa3b).view(F32))
    frac = F32(src - np.floor(src))
    p = f(frac, F32(-0.079204240219773236), F32(-0.22433836478672356))
    p = f(frac, p, F32(0.30354260500649682))
    p = f(frac, p, F32(0.00010703434948458272))
    bits = int(f(F32(2 ** 23), F32(src - p), F32(2 ** 23 * 127)))
    return np.array([bits], np.uint32).view(F32)[0]


def _seq_dot(a, b):
    s = F32(0)
    for x, y in zip(a, b):
        s = F32(s + F32(x) * F32(y))
    return s


def _lane_dot(a, b, lanes):
    acc = [F32(0)] * lanes
    body = lanes * (len(a) // lanes)
    for i in range(body):
        acc[i % lanes] = F32(acc[i % lanes] + F32(a[i]) * F32(b[i]))
    while len(acc) > 1:
        h = len(acc) // 2
        acc = [F32(acc[i] + acc[i + h]) for i in range(h)]
    s = acc[0]
    for i in range(body, len(a)):
        s = F32(s + F32(a[i]) * F32(b[i]))
    return s


def model(q, k, v, half, mask=None, causal=False, scale=None):
    """PyTorch's cpu_flash_attention for one head: q (L, D), k and v (S, D) float32 holding
    16-bit values, mask (L, S) float32 or None. Scalar loops, in its order."""
    L, S, D = q.shape[0], k.shape[0], q.shape[1]
    sc = F32(1 / math.sqrt(D) if scale is None else scale)
    qs = min(256 if L >= 768 else 64 if L >= 192 else 32, L)
    ks = min(512, S)
    gemv = {"bfloat16": 4, "float16": 8}[half]
    out = np.zeros((L, D), F32)
    for m in range(0, L, qs):
        rows = min(qs, L - m)
        keys = min(m + rows, S) if causal else S
        mx = [F32(-np.inf)] * rows
        sm = [F32(0)] * rows
        dst = np.zeros((rows, D), F32)
        for n in range(0, keys, ks):
            cols = min(ks, S - n)
            for r in range(rows):
                qk = np.array([_lane_dot(q[m + r], k[n + c], gemv) if 1 in (rows, cols)
                               else _seq_dot(q[m + r], k[n + c]) for c in range(cols)], F32)
                if causal:
                    qk[np.arange(cols) + n > m + r] = -np.inf
                if mask is None:
                    qk = (qk * sc).astype(F32)
                else:
                    qk = (qk.astype(np.float64) * sc + mask[m + r, n:n + cols]).astype(F32)
                tmax = max(mx[r], qk.max())
                if tmax == -np.inf:
                    continue
                body = 16 * (cols // 16)
                e = [_fexp(F32(x - tmax)) if i < body else F32(math.exp(F32(x - tmax)))
                     for i, x in enumerate(qk)]
                lanes = [F32(0)] * 16
                for i in range(body):
                    lanes[i % 16] = F32(lanes[i % 16] + e[i])
                while len(lanes) > 1:
                    h = len(lanes) // 2
                    lanes = [F32(lanes[i] + lanes[i + h]) for i in range(h)]
                s = lanes[0] if body else F32(0)
                for i in range(body, cols):
                    s = F32(s + e[i])
                rescale = F32(math.exp(F32(mx[r] - tmax)))
                sm[r] = F32(np.float64(rescale) * sm[r] + s)
                mx[r] = tmax
                p = np.array(e, F32).astype(TYPES[half]).astype(F32)
                for d in range(D):
                    acc = F32(dst[r, d] * rescale) if n else F32(0)
                    for c in range(cols):
                        acc = F32(acc + p[c] * v[n + c, d])
                    dst[r, d] = acc
        for r in range(rows):
            out[m + r] = dst[r] * (F32(1) / (sm[r] if sm[r] else F32(1)))
    return out.astype(TYPES[half])


def _inputs(shape_q, S, half, seed=0, heads_kv=None):
    rng = np.random.default_rng(seed)
    B, H, L, D = shape_q
    Hk = heads_kv or H
    arrays = [rng.standard_normal(s).astype(F32).astype(TYPES[half]).astype(F32)
              for s in ((B, H, L, D), (B, Hk, S, D), (B, Hk, S, D))]
    return arrays


def _kiln(arrays, half, **kw):
    q, k, v = (eager.tensor(a).to(getattr(eager, half)) for a in arrays)
    return F.scaled_dot_product_attention(q, k, v, **kw)


HALVES = ["bfloat16", "float16"]


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("L, S, causal", [(1, 7, False), (7, 1, False), (16, 16, True),
                                          (33, 16, False), (16, 33, True), (40, 40, False)])
def test_kiln_computes_the_scalar_model_of_pytorchs_flash_kernel(half, L, S, causal):
    arrays = _inputs((1, 2, L, 8), S, half)
    got = _kiln(arrays, half, is_causal=causal).float().numpy()
    for h in range(2):
        want = model(*(a[0, h] for a in arrays), half, causal=causal).astype(F32)
        np.testing.assert_array_equal(got[0, h], want)


@pytest.mark.parametrize("half", HALVES)
def test_a_float_mask_and_a_given_scale_follow_the_model(half):
    arrays = _inputs((1, 1, 20, 8), 18, half)
    mask = np.random.default_rng(3).standard_normal((20, 18)).astype(F32)
    got = _kiln(arrays, half, attn_mask=eager.tensor(mask), scale=0.3).float().numpy()
    want = model(*(a[0, 0] for a in arrays), half, mask=mask, scale=0.3).astype(F32)
    np.testing.assert_array_equal(got[0, 0], want)


def test_fexp_u20_is_pytorchs_fast_exp_not_exp():
    x = np.linspace(-20, 0, 4001, dtype=F32)
    vec = _flash_attention.fexp_u20(x)
    assert all(vec[i] == _fexp(x[i]) for i in range(0, 4001, 97))
    exact = np.exp(x.astype(np.float64)).astype(F32)
    assert (vec != exact).mean() > 0.9
    assert np.max(np.abs(vec / exact - 1)) < 2 ** -8


@pytest.mark.parametrize("half", HALVES)
def test_the_rule_matters_the_rounded_once_answer_differs(half):
    arrays = _inputs((2, 4, 16, 32), 16, half)
    flash = _kiln(arrays, half).float().numpy()
    q, k, v = (a.astype(np.float64) for a in arrays)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(32)
    w = np.exp(s - s.max(-1, keepdims=True))
    once = ((w / w.sum(-1, keepdims=True)) @ v).astype(F32).astype(TYPES[half]).astype(F32)
    assert (flash != once).sum() > 500  # of 4096 (measured ~1300)
    assert np.abs(flash - once).max() < 0.05


def test_float32_and_compiled_functions_keep_the_math_path():
    arrays = _inputs((1, 2, 9, 8), 11, "bfloat16")
    q, k, v = (eager.tensor(a) for a in arrays)
    out = F.scaled_dot_product_attention(q, k, v).numpy()
    s = arrays[0].astype(np.float64) @ np.swapaxes(arrays[1], -1, -2) / math.sqrt(8)
    w = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (w / w.sum(-1, keepdims=True)) @ arrays[2], rtol=1e-5,
                               atol=1e-6)
    hq, hk, hv = (t.to(eager.bfloat16) for t in (q, k, v))
    compiled = eager.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c))
    once = F._math_attention(hq, hk, hv, None, 0.0, False, None, False)
    assert (compiled(hq, hk, hv).float().numpy() == once.float().numpy()).all()


CASES = [((2, 4, 16, 32), 16, {}), ((2, 4, 16, 32), 16, {"is_causal": True}),
         ((1, 2, 1, 16), 7, {}), ((1, 2, 7, 16), 1, {}), ((1, 2, 33, 16), 40, {}),
         ((1, 1, 40, 33), 600, {"is_causal": True}), ((1, 1, 600, 16), 37, {}),
         ((1, 1, 20, 16), 18, {"scale": 0.37}), ((1, 4, 12, 16), 12, {"gqa": 2}),
         ((2, 2, 12, 16), 14, {"mask": "bool"}), ((2, 2, 12, 16), 14, {"mask": "float"}),
         ((2, 2, 12, 16), 14, {"mask": "half4d"})]


def _mask(kind, shape, S, half):
    """A mask of `kind` (None, "bool", "float", "half4d": 4 dims in the 16-bit type) for
    queries shape[2] and S keys."""
    rng = np.random.default_rng(7)
    if kind == "bool":
        return rng.random((shape[2], S)) < 0.8
    if kind == "float":
        return rng.standard_normal((shape[2], S)).astype(F32)
    if kind == "half4d":
        return rng.standard_normal((shape[0], 1, shape[2], S)).astype(F32).astype(TYPES[half])
    return None


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("shape, S, kw", CASES)
def test_pytorch_gives_the_same_16_bit_values(half, shape, S, kw):
    torch = pytest.importorskip("torch")
    kw = dict(kw)
    gqa = kw.pop("gqa", None)
    mask_kind = kw.pop("mask", None)
    arrays = _inputs(shape, S, half, heads_kv=shape[1] // gqa if gqa else None)
    mask = _mask(mask_kind, shape, S, half)
    if gqa:
        kw["enable_gqa"] = True
    tdt = getattr(torch, half)
    tq, tk, tv = (torch.tensor(a).to(tdt) for a in arrays)
    tm = None if mask is None else torch.tensor(mask.astype(F32)).to(
        tdt if mask_kind == "half4d" else None)
    if mask_kind == "bool":
        tm = torch.tensor(mask)
    want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm, **kw)
    km = None
    if mask is not None:
        km = eager.tensor(mask if mask_kind != "half4d" else mask.astype(F32))
        if mask_kind == "half4d":
            km = km.to(getattr(eager, half))
    got = _kiln(arrays, half, attn_mask=km, **kw)
    apart = int((got.float().numpy() != want.float().numpy()).sum())
    assert apart == 0, f"{apart} of {got.numel()} apart"


def _fma32(a, b, c):
    return F32(np.float64(F32(a)) * np.float64(F32(b)) + np.float64(F32(c)))


def _sleef_exp(x):
    """Sleef's expf (u10) of one float32, step by step."""
    if x < -104:
        return F32(0)
    q = np.rint(F32(F32(x) * F32(1 / math.log(2))))
    s = _fma32(q, -0.693145751953125, x)
    s = _fma32(q, F32(-1.428606765330187045e-06), s)
    u = F32(0.000198527617612853646278381)
    for c in (0.00139304355252534151077271, 0.00833336077630519866943359,
              0.0416664853692054748535156, 0.166666671633720397949219, 0.5):
        u = _fma32(u, s, F32(c))
    return F32(np.float64(F32(1 + _fma32(F32(s * s), u, s))) * 2.0 ** q)


def _row_sum(a, b):
    """map2_reduce_all's sum of a * b: two 16-lane vectors (a row of 32 or more)."""
    t = [F32(x * y) for x, y in zip(a, b)]
    if len(t) < 32:
        lanes = t[:16]
        for i in range(16, len(t)):
            lanes[i - 16] = F32(lanes[i - 16] + t[i])
        return _seq_dot(lanes, [1] * len(lanes))
    acc = t[:32]
    for i in range(32, len(t)):
        acc[i % 32] = F32(acc[i % 32] + t[i])
    return _lane_dot([F32(acc[i] + acc[i + 16]) for i in range(16)], [1] * 16, 16)


def _add_dot(c, a, b, half, rule, scale=F32(1)):
    """c + scale * (a . b) as the GEMM that PyTorch's backward calls for that product."""
    if half == "bfloat16" or rule == "v":  # in order; the scale after
        return F32(c + F32(_seq_dot(a, b) * scale))
    if rule == "q":  # cpublas sum(): 4 partial sums, added in order
        parts = [F32(0)] * 4
        body = 4 * (len(a) // 4)
        for i in range(len(a)):
            j = i % 4 if i < body else 0
            parts[j] = F32(parts[j] + F32(a[i]) * F32(b[i]))
        return F32(c + F32(_seq_dot(parts, [1] * 4) * scale))
    for x, y in zip(a, b):  # "k": the first operand times the scale, one FMA per term
        c = _fma32(F32(x * scale), y, c)
    return c


def model_backward(q, k, v, out, go, lse, half, causal=False, scale=None):
    """PyTorch's cpu_flash_attention_backward for one head: q, out, go (L, D), k, v (S, D),
    float32 holding 16-bit values; lse (L,) float32. Scalar loops, in its order."""
    L, S, D = q.shape[0], k.shape[0], q.shape[1]
    sc = F32(1 / math.sqrt(D) if scale is None else scale)
    qs = min(256 if L >= 768 else 64 if L >= 192 else 32, L)
    ks = min(512, S)
    r16 = lambda x: F32(np.array(x, F32).astype(TYPES[half]))  # noqa: E731
    gq, gk, gv = np.zeros((L, D), F32), np.zeros((S, D), F32), np.zeros((S, D), F32)
    for m in range(0, L, qs):
        rows = min(qs, L - m)
        dsum = [_row_sum(go[m + r], out[m + r]) for r in range(rows)]
        for n in range(0, min(m + rows, S) if causal else S, ks):
            cols = min(ks, S - n)
            p = np.zeros((rows, cols), F32)
            ds = np.zeros((rows, cols), F32)
            for r, c in np.ndindex(rows, cols):
                if half == "bfloat16":
                    x = F32(_seq_dot(q[m + r], k[n + c]) * sc)
                else:
                    x = _add_dot(F32(0), k[n + c], q[m + r], half, "k", sc)
                p[r, c] = 0 if causal and n + c > m + r else _sleef_exp(F32(x - lse[m + r]))
                dp = (_lane_dot(go[m + r], v[n + c], {"bfloat16": 4, "float16": 8}[half])
                      if 1 in (rows, cols) else _seq_dot(go[m + r], v[n + c]))
                ds[r, c] = r16(F32(p[r, c] * F32(dp - dsum[r])))
            for c, d in np.ndindex(cols, D):
                gv[n + c, d] = r16(_add_dot(gv[n + c, d], [r16(x) for x in p[:, c]],
                                            go[m:m + rows, d], half, "v"))
                gk[n + c, d] = r16(_add_dot(gk[n + c, d], ds[:, c], q[m:m + rows, d], half,
                                            "k", sc))
            for r, d in np.ndindex(rows, D):
                gq[m + r, d] = r16(_add_dot(gq[m + r, d], ds[r], k[n:n + cols, d], half,
                                            "q", sc))
    return gq, gk, gv


def _kiln_grads(arrays, half, grad_out, **kw):
    qkv = [eager.tensor(a).to(getattr(eager, half)).requires_grad_() for a in arrays]
    out = F.scaled_dot_product_attention(*qkv, **kw)
    out.backward(eager.tensor(grad_out).to(getattr(eager, half)))
    return out, [t.grad.float().numpy() for t in qkv]


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("L, S, causal", [(16, 16, False), (33, 33, False), (20, 20, True),
                                          (5, 1, False), (1, 9, False)])
def test_kiln_gradients_follow_the_scalar_model_of_pytorchs_flash_backward(half, L, S,
                                                                            causal):
    arrays = _inputs((1, 2, L, 32), S, half, seed=1)
    grad_out = _inputs((1, 2, L, 32), 1, half, seed=2)[0]
    out, got = _kiln_grads(arrays, half, grad_out, is_causal=causal)
    assert out.grad_fn.name() == "ScaledDotProductFlashAttentionForCpuBackward0"
    lse = out.grad_fn.lse  # the forward's float32 log-sum-exp, saved for backward
    out = out.detach().float().numpy()
    for h in range(2):
        want = model_backward(*(a[0, h] for a in arrays), out[0, h], grad_out[0, h],
                              lse[0, h], half, causal)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g[0, h], w)


def test_sleef_exp_is_pytorchs_exp_not_the_correctly_rounded_one():
    x = np.linspace(-30, 0.5, 20001, dtype=F32)
    vec = _flash_attention.sleef_expf(x)
    assert all(vec[i] == _sleef_exp(x[i]) for i in range(0, 20001, 89))
    exact = np.exp(x.astype(np.float64)).astype(F32)
    assert 0.02 * x.size < (vec != exact).sum() < 0.2 * x.size  # measured 9.6%
    assert np.max(np.abs(vec / exact - 1)) < 2 ** -22


@pytest.mark.parametrize("half", HALVES)
def test_the_rule_matters_the_math_paths_gradient_differs(half):
    arrays = _inputs((2, 4, 16, 32), 16, half)
    grad_out = _inputs((2, 4, 16, 32), 1, half, seed=5)[0]
    _, flash = _kiln_grads(arrays, half, grad_out)
    qkv = [eager.tensor(a).to(getattr(eager, half)).requires_grad_() for a in arrays]
    F._math_attention(*qkv, None, 0.0, False, None, False).backward(
        eager.tensor(grad_out).to(getattr(eager, half)))
    for got, t in zip(flash, qkv):
        math_grad = t.grad.float().numpy()
        assert (got != math_grad).sum() > 1000  # of 4096 (measured ~1700-1900)
        np.testing.assert_allclose(got, math_grad, atol=0.1, rtol=0.05)


GRAD_CASES = [((2, 4, 16, 32), 16, {}), ((2, 4, 16, 32), 16, {"is_causal": True}),
              ((1, 2, 1, 16), 7, {}), ((1, 2, 7, 16), 1, {}), ((1, 2, 33, 16), 40, {}),
              ((1, 2, 40, 32), 600, {}), ((1, 1, 1100, 16), 40, {}),
              ((1, 2, 20, 16), 18, {"scale": 0.37}), ((1, 4, 12, 16), 12, {"gqa": 2}),
              ((2, 2, 12, 16), 14, {"mask": "bool"}),
              ((2, 2, 12, 16), 14, {"mask": "float"})]


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("shape, S, kw", GRAD_CASES)
def test_pytorch_gives_the_same_16_bit_gradients(half, shape, S, kw):
    torch = pytest.importorskip("torch")
    if half == "float16" and "avx512fp16" in host().enabled:
        # (with MKL's and oneDNN's AMX and FP16 kernels capped, as tests/conftest.py
        # does, grad_v stays 1-11 of 576-4096 elements apart on such a CPU)
        pytest.skip("PyTorch's float16 attention gradients on a CPU with AVX512-FP16 "
                    "sum in an order kiln does not model (the numpy model tests run)")
    kw = dict(kw)
    gqa = kw.pop("gqa", None)
    mask_kind = kw.pop("mask", None)
    arrays = _inputs(shape, S, half, heads_kv=shape[1] // gqa if gqa else None)
    grad_out = _inputs(shape, 1, half, seed=5)[0]
    mask = _mask(mask_kind, shape, S, half)
    if gqa:
        kw["enable_gqa"] = True
    tdt = getattr(torch, half)
    tqkv = [torch.tensor(a).to(tdt).requires_grad_() for a in arrays]
    torch.nn.functional.scaled_dot_product_attention(
        *tqkv, attn_mask=None if mask is None else torch.tensor(mask), **kw).backward(
        torch.tensor(grad_out).to(tdt))
    km = None if mask is None else eager.tensor(mask)
    _, got = _kiln_grads(arrays, half, grad_out, attn_mask=km, **kw)
    for name, g, t in zip("qkv", got, tqkv):
        apart = int((g != t.grad.float().numpy()).sum())
        # float16 with two key blocks: the forward's output and log-sum-exp are a few
        # elements from PyTorch's, which the gradients carry (measured: grad_q 8 of 2560,
        # grad_k 77 of 38400 apart; none from PyTorch's own output and log-sum-exp)
        allowed = 100 if (half, S) == ("float16", 600) else 0
        assert apart <= allowed, f"grad_{name}: {apart} of {g.size} apart"


def test_a_gradient_taken_with_create_graph_cannot_be_differentiated_again():
    q = eager.tensor(_inputs((1, 1, 4, 8), 4, "bfloat16")[0]).to(eager.bfloat16)
    q.requires_grad_()
    (grad,) = eager.autograd.grad(F.scaled_dot_product_attention(q, q, q).float().sum(), [q],
                                  create_graph=True)
    with pytest.raises(RuntimeError, match="derivative for aten::_scaled_dot_product_flash_"
                                           "attention_for_cpu_backward is not implemented"):
        grad.float().sum().backward()
