"""group_norm's 16-bit gradients as PyTorch's CPU kernel computes them
(NativeGroupNormBackward0): against a scalar numpy model of that rule (mean and rstd as
the forward saved them, rounded to the 16-bit type; float32 sums in 8 lanes; PyTorch's
fused multiply-adds), against PyTorch where installed, and float32/float64 gradients
against float64 references and finite differences; the compiled step against eager.

The gradients given lie nearly along x, so grad_input cancels to a small part of its
terms and shows each float32 rounding before it (with random ones, a sum in another
order changed one float16 gradient in thousands)."""
import numpy as np
import pytest

import compiler
import eager
from eager.autograd.gradcheck import gradcheck, gradgradcheck
from eager.tensor import ops
from ir import dtypes

F = eager.nn.functional
f32 = np.float32
SHAPES = [((2, 6, 7, 5), 3), ((3, 10, 9), 5), ((2, 8, 40), 2), ((2, 64, 3), 2), ((3, 6, 1), 3)]
"""Odd group sizes, a channel of 40 (two whole vectors of 16 and a tail), 32 channels to a
group (a whole vector of 16 weights), channels of one element."""


def _fma(a, b, c):
    """a * b + c rounded to float32 once (the sum rounded in float64 first: a second
    rounding that matters is ~2^-29 rare)."""
    return f32(float(a) * float(b) + float(c))


def _lanes(values, whole: int, weights=None):
    """PyTorch's sum: the first `whole` terms in 8 lanes, the lanes in order, the rest
    (with `weights`, each term times its weight, one fused multiply-add a step)."""
    def add(acc, j):
        return _fma(values[j], weights[j], acc) if weights is not None else \
            f32(acc + values[j])
    lanes = [f32(0)] * 8
    for j in range(whole):
        lanes[j % 8] = add(lanes[j % 8], j)
    total = f32(0)
    for lane in lanes:
        total = f32(total + lane)
    for j in range(whole, len(values)):
        total = add(total, j)
    return total


def _model(g, x, mean, rstd, weight, group, bfloat16: bool):
    """grad_input, grad_weight, grad_bias (float32, unrounded) of (N, C, HxW) arrays."""
    n, c, hw = x.shape
    d = c // group
    ds = np.array([[_lanes(g[i, k] * x[i, k], hw // 16 * 16) for k in range(c)]
                   for i in range(n)], f32)
    db = np.array([[_lanes(g[i, k], hw // 16 * 16) for k in range(c)] for i in range(n)], f32)
    gamma = np.ones(c, f32) if weight is None else weight
    dx = np.zeros(x.shape, f32)
    s = f32(1) / f32(d * hw)
    for i in range(n):
        for j in range(group):
            m, r, ch = mean[i, j], rstd[i, j], slice(j * d, (j + 1) * d)
            ds_g = _lanes(ds[i, ch], d // 16 * 16, gamma[ch])
            db_g = _lanes(db[i, ch], d // 16 * 16, gamma[ch])
            c2 = f32(f32(f32(f32(_fma(db_g, m, -ds_g) * r) * r) * r) * s)
            c3 = _fma(-f32(db_g * r), s, f32(-c2 * m))
            for k in range(j * d, (j + 1) * d):
                c1 = f32(r * gamma[k])
                for e in range(hw):
                    first = _fma(c1, g[i, k, e], f32(c2 * x[i, k, e])) if bfloat16 else \
                        _fma(c2, x[i, k, e], f32(c1 * g[i, k, e]))
                    dx[i, k, e] = f32(first + c3)
    dw, dbias = np.zeros(c, f32), np.zeros(c, f32)
    for i in range(n):
        for k in range(c):
            m, r = mean[i, k // d], rstd[i, k // d]
            dw[k] = _fma(_fma(-db[i, k], m, ds[i, k]), r, dw[k])
            dbias[k] = f32(dbias[k] + db[i, k])
    return dx, dw, dbias


def _data(shape, seed=0):
    """x, weight, bias and a gradient nearly along x."""
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = rng.standard_normal(shape) * 2 + 0.5
    grad = 0.7 * x + 0.3 + 0.01 * rng.standard_normal(shape)
    return (x.astype(f32), rng.uniform(0.5, 1.5, c).astype(f32),
            rng.standard_normal(c).astype(f32), grad.astype(f32))


def _rounded(a, dt):
    return dtypes.cast(np.asarray(a, f32), dt).astype(f32)


def _eager_grads(x, w, b, g, group, dt, affine):
    t = getattr(eager, dt.name)
    xs = eager.tensor(x).to(t).requires_grad_()
    ws, bs = ((eager.tensor(w).to(t).requires_grad_(), eager.tensor(b).to(t).requires_grad_())
              if affine else (None, None))
    out = F.group_norm(xs, group, ws, bs)
    assert type(out.grad_fn).__name__ == "NativeGroupNormBackward0"
    out.backward(eager.tensor(g).to(t))
    return [a.grad.float().numpy() for a in ((xs, ws, bs) if affine else (xs,))]


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("shape, group", SHAPES, ids=str)
def test_16_bit_group_norm_gradients_are_pytorchs_rule(shape, group, affine, dt):
    x, w, b, g = (_rounded(a, dt) for a in _data(shape))
    got = _eager_grads(x, w, b, g, group, dt, affine)
    n, c = shape[:2]
    hw = x.size // (n * c)
    t = getattr(eager, dt.name)
    _, mean, rstd = ops.native_group_norm(eager.tensor(x).to(t), None, None, n, c, hw, group,
                                          1e-5)
    model = _model(g.reshape(n, c, hw), x.reshape(n, c, hw), mean.float().numpy(),
                   rstd.float().numpy(), w if affine else None, group, dt is dtypes.bfloat16)
    for k, want in zip(got, model):
        np.testing.assert_array_equal(k, _rounded(want, dt).reshape(k.shape))
    # the test can fail: the gradient of the composite computed in float32 and rounded
    # once (kiln's before) is another answer
    wide = [eager.tensor(a).requires_grad_() for a in (x, w, b)]
    out = F.group_norm(wide[0], group, *(wide[1:] if affine else (None, None)))
    out.backward(eager.tensor(g))
    assert (_rounded(wide[0].grad.numpy(), dt) != got[0]).sum() > 0


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
@pytest.mark.parametrize("shape, group", SHAPES + [((4, 16, 64), 16), ((2, 12, 170), 4)],
                         ids=str)
def test_16_bit_group_norm_gradients_are_pytorchs(shape, group, affine, dt):
    torch = pytest.importorskip("torch")
    x, w, b, g = _data(shape)
    got = _eager_grads(x, w, b, g, group, getattr(dtypes, dt), affine)
    t = getattr(torch, dt)
    xs = torch.tensor(x).to(t).requires_grad_()
    ws, bs = ((torch.tensor(w).to(t).requires_grad_(), torch.tensor(b).to(t).requires_grad_())
              if affine else (None, None))
    torch.nn.functional.group_norm(xs, group, ws, bs).backward(torch.tensor(g).to(t))
    for k, want in zip(got, (xs, ws, bs)):
        np.testing.assert_array_equal(k, want.grad.float().numpy())


@pytest.mark.parametrize("dt", [eager.float32, eager.float64], ids=str)
def test_group_norm_gradients_follow_float64(dt):
    x, w, b, g = _data((3, 6, 4, 5), 1)
    leaves = [eager.tensor(a).to(dt).requires_grad_() for a in (x, w, b)]
    F.group_norm(leaves[0], 3, leaves[1], leaves[2]).backward(eager.tensor(g).to(dt))
    xd, gd = (a.astype(np.float64).reshape(3, 3, 2, 20) for a in (x, g))
    wd = w.astype(np.float64).reshape(1, 3, 2, 1)
    xhat = (xd - xd.mean((2, 3), keepdims=True)) / np.sqrt(xd.var((2, 3), keepdims=True) + 1e-5)
    gw = gd * wd
    rstd = 1 / np.sqrt(xd.var((2, 3), keepdims=True) + 1e-5)
    dx = rstd * (gw - gw.mean((2, 3), keepdims=True) -
                 xhat * (gw * xhat).mean((2, 3), keepdims=True))
    want = [dx.reshape(x.shape), (gd * xhat).sum((0, 3)).reshape(6), gd.sum((0, 3)).reshape(6)]
    tol = 1e-5 if dt is eager.float32 else 1e-12
    for leaf, ref in zip(leaves, want):
        np.testing.assert_allclose(leaf.grad.numpy(), ref, rtol=tol, atol=tol)


def test_group_norm_gradients_and_their_gradients_match_finite_differences():
    rng = np.random.default_rng(5)
    x, w, b = (eager.tensor(rng.standard_normal(s), requires_grad=True)
               for s in ((2, 6, 3, 2), (6,), (6,)))
    for fn, inputs in ((lambda x, w, b: F.group_norm(x, 3, w, b), [x, w, b]),
                       (lambda x: F.group_norm(x, 2), [x]),
                       (lambda x, b: F.group_norm(x, 6, None, b), [x, b])):
        assert gradcheck(fn, inputs, atol=1e-6, rtol=1e-4)
        assert gradgradcheck(fn, inputs, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("dt", [eager.float32, eager.bfloat16], ids=str)
def test_a_compiled_group_norm_training_step_is_eagers(dt):
    x, w, b, _ = _data((2, 6, 5, 3), 2)
    leaves = [eager.tensor(a).to(dt).requires_grad_() for a in (x, w, b)]

    def step(x, w, b):
        out = F.group_norm(x, 3, w, b)
        (out * out).sum().backward()
        return out
    compiled = compiler.compile(step)
    for _ in range(2):
        for leaf in leaves:
            leaf.grad = None
        got = compiled(*leaves)
        compiler.wait_for_kernels(60)
    got = [got.detach()] + [leaf.grad for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    want = [step(*leaves).detach()] + [leaf.grad for leaf in leaves]
    for k, e in zip(got, want):
        assert k.dtype is dt
        if dt is eager.bfloat16:  # one rounding of float32 values summed alike
            np.testing.assert_array_equal(k.float().numpy(), e.float().numpy())
        else:  # float32 sums in the compiled kernels' order
            np.testing.assert_allclose(k.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_float32_parameters_beside_a_16_bit_input_keep_the_inputs_type(dt):
    """PyTorch's mixed kernel: the statistics in float32, the result in x's type (kiln
    promoted it to float32 before)."""
    rng = np.random.default_rng(0)
    x = eager.tensor(rng.standard_normal((4, 6, 5)).astype(np.float32)).to(getattr(eager, dt))
    w = eager.tensor(np.linspace(0.5, 2, 6, dtype=np.float32))
    b = eager.tensor(np.linspace(-1, 1, 6, dtype=np.float32))
    y = eager.nn.functional.group_norm(x, 2, w, b)
    assert y.dtype is x.dtype
    xs = x.float().numpy().astype(np.float64).reshape(4, 2, -1)
    want = ((xs - xs.mean(-1, keepdims=True)) / np.sqrt(xs.var(-1, keepdims=True) + 1e-5))
    want = want.reshape(4, 6, 5) * w.numpy()[:, None] + b.numpy()[:, None]
    np.testing.assert_allclose(y.float().numpy(), want, rtol=1e-2, atol=1e-2)


def test_float32_parameters_beside_a_16_bit_input_give_pytorchs_values():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6, 5)).astype(np.float32)
    g = rng.standard_normal((4, 6, 5)).astype(np.float32)
    results = []
    for m in (torch, eager):
        xs = m.tensor(x).bfloat16().requires_grad_()
        w = m.tensor(np.linspace(0.5, 2, 6, dtype=np.float32)).requires_grad_()
        y = m.nn.functional.group_norm(xs, 2, w)
        y.backward(m.tensor(g).bfloat16())
        results.append((y.detach().float().numpy(), xs.grad.float().numpy(),
                        w.grad.numpy()))
    (ty, tx, tw), (ky, kx, kw) = results
    np.testing.assert_array_equal(ky, ty)
    np.testing.assert_array_equal(kx, tx)
    np.testing.assert_allclose(kw, tw, rtol=1e-6)  # float32 sums in another order


@pytest.mark.parametrize("x_dt, p_dt, message", [
    ("float32", "float64", "expect parameter to have scalar type of Float"),
    ("float32", "bfloat16", "expect parameter to have scalar type of Float"),
    ("bfloat16", "float16", "expect parameter to have scalar type of Float"),
    ("float64", "float32", "all inputs must share same datatype"),
])
def test_other_mixed_types_are_pytorchs_error(x_dt, p_dt, message):
    x = eager.ones(2, 4, 3, dtype=getattr(eager, x_dt))
    with pytest.raises(RuntimeError, match=message):
        eager.nn.functional.group_norm(x, 2, eager.ones(4, dtype=getattr(eager, p_dt)))
