"""batch_norm over 16-bit floats as PyTorch's CPU kernel computes it: the channel's mean
and invstd kept in the parameters' 16-bit type (bfloat16's invstd from its sum of squares
rounded, over the count rounded), alpha and beta in float32 and the output one FMA,
rounded once; against a numpy model of that rule, against PyTorch where installed, its
gradients against float64, compiled against eager."""
import numpy as np
import pytest

import compiler
import eager
from ir import dtypes

F = eager.nn.functional
C = 24


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((5, C, 6, 3)).astype(np.float32) * 2 + 0.5
    w = rng.uniform(0.5, 1.5, C).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    rm = rng.standard_normal(C).astype(np.float32) * 0.1
    rv = rng.uniform(0.5, 2, C).astype(np.float32)
    return x, w, b, rm, rv


def _rounded(a, dt):
    return dtypes.cast(np.asarray(a, np.float32), dt).astype(np.float32)


def _model(x, w, b, rm, rv, dt, training, eps=1e-5):
    """The output, float32, of 16-bit-valued float32 arrays."""
    shape = (1, C, 1, 1)
    if training:
        n = x.size // C
        xd = x.astype(np.float64)
        var = xd.var((0, 2, 3))
        if dt is dtypes.bfloat16:
            var = _rounded(_rounded(var * n, dt) / n, dt)
        mean = _rounded(xd.mean((0, 2, 3)), dt)
        invstd = _rounded(1 / np.sqrt(var.astype(np.float32) + np.float32(eps)), dt)
    else:
        mean, invstd = rm, (np.float32(1) / np.sqrt(rv + np.float32(eps))).astype(np.float32)
    alpha = (w * invstd).astype(np.float32)
    beta = (b - mean * alpha).astype(np.float32)
    fma = x.astype(np.float64) * alpha.reshape(shape) + beta.reshape(shape)  # one rounding
    return _rounded(fma.astype(np.float32), dt)


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_16_bit_batch_norm_keeps_its_statistics_in_16_bits_and_rounds_the_output_once(
        dt, training):
    arrays = [_rounded(a, dt) for a in _data()]
    x, w, b, rm, rv = (eager.tensor(a).to(getattr(eager, dt.name)) for a in arrays)
    got = F.batch_norm(x, rm, rv, w, b, training=training).float().numpy()
    want = _model(*arrays, dt, training)
    np.testing.assert_array_equal(got, want)
    # the test can fail: in training rounding only the exact (float64) result is another
    # answer, in eval (where that is PyTorch's too) the composite in 16-bit ops kiln had
    xd, wd, bd, md, vd = (a.astype(np.float64) for a in arrays)
    if training:
        md, vd = xd.mean((0, 2, 3)), xd.var((0, 2, 3))
    shape = (1, C, 1, 1)
    exact = (xd - md.reshape(shape)) / np.sqrt(vd.reshape(shape) + 1e-5)
    exact = _rounded(exact * wd.reshape(shape) + bd.reshape(shape), dt)
    stepwise = (x - rm.reshape(shape)) * eager.rsqrt(rv.reshape(shape) + 1e-5)
    stepwise = (stepwise * w.reshape(shape) + b.reshape(shape)).float().numpy()
    assert ((exact if training else stepwise) != want).sum() > 0


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("params", ["same", "float32"])
def test_16_bit_batch_norm_and_its_running_statistics_are_pytorchs(dt, params):
    torch = pytest.importorskip("torch")
    pdt = dt if params == "same" else "float32"
    for seed in range(2):
        x, w, b, rm, rv = _data(seed)
        for training in (False, True):
            t_stats = [torch.tensor(a).to(getattr(torch, pdt)) for a in (rm, rv)]
            k_stats = [eager.tensor(a).to(getattr(eager, pdt)) for a in (rm, rv)]
            want = torch.nn.functional.batch_norm(
                torch.tensor(x).to(getattr(torch, dt)), *t_stats,
                torch.tensor(w).to(getattr(torch, pdt)), torch.tensor(b).to(getattr(torch, pdt)),
                training=training).float().numpy()
            got = F.batch_norm(eager.tensor(x).to(getattr(eager, dt)), *k_stats,
                               eager.tensor(w).to(getattr(eager, pdt)),
                               eager.tensor(b).to(getattr(eager, pdt)),
                               training=training).float().numpy()
            # float16 with float32 parameters: a few outputs a unit apart (4 of 2160 seen)
            allowed = 8 if (dt, params) == ("float16", "float32") else 0
            assert (got != want).sum() <= allowed, (dt, params, training, (got != want).sum())
            for name, k, t in zip(("running_mean", "running_var"), k_stats, t_stats):
                k, t = k.float().numpy(), t.float().numpy()
                if (name, pdt) == ("running_var", "bfloat16") or pdt == "float32":
                    # bfloat16's variance update rounds somewhere PyTorch's source says
                    # and we did not find; float32's sums in another order: within a unit
                    unit = 2.0 ** -7 if pdt == "bfloat16" else 2.0 ** -22
                    np.testing.assert_allclose(k, t, rtol=unit, atol=0, err_msg=name)
                else:
                    np.testing.assert_array_equal(k, t, err_msg=name)


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
def test_16_bit_batch_norm_gradients_follow_float64(dt):
    x, w, b, rm, rv = (_rounded(a, dt) for a in _data(2))
    xs, ws, bs = (eager.tensor(a).to(getattr(eager, dt.name)).requires_grad_()
                  for a in (x, w, b))
    out = F.batch_norm(xs, eager.tensor(rm).to(xs.dtype), eager.tensor(rv).to(xs.dtype),
                       ws, bs, training=True)
    g = np.random.default_rng(3).standard_normal(out.shape).astype(np.float32)
    out.backward(eager.tensor(g).to(xs.dtype))
    ref = [eager.tensor(a).double().requires_grad_() for a in (x, w, b)]
    F.batch_norm(ref[0], None, None, ref[1], ref[2], training=True).backward(
        eager.tensor(g).to(xs.dtype).double())
    for got, want in zip((xs.grad, ws.grad, bs.grad), ref):
        want = want.grad.numpy()
        scale = np.abs(want).max()
        np.testing.assert_allclose(got.float().numpy(), want, atol=0.03 * scale, rtol=0.03)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_a_compiled_16_bit_batch_norm_is_eagers(training):
    arrays = _data(4)
    x, w, b = (eager.tensor(a).bfloat16() for a in arrays[:3])

    def run(x, w, b):
        rm, rv = (eager.tensor(a).bfloat16() for a in arrays[3:])
        return F.batch_norm(x, rm, rv, w, b, training=training) * 2.0
    f = compiler.compile(run)
    f(x, w, b)
    compiler.wait_for_kernels(60)
    np.testing.assert_array_equal(f(x, w, b).float().numpy(), run(x, w, b).float().numpy())
