"""16-bit gradients with PyTorch's values: the backward of tanh, sigmoid and silu are one
kernel each in PyTorch (float32, rounded once; float16's sigmoid_backward in float16,
each step rounded), pow's and div's are PyTorch's formulas in its order, each op rounded.
Against numpy models of those rules and against PyTorch where installed."""
import numpy as np
import pytest

import eager
from ir import dtypes


def _data(n=4096, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32) * 2,
            rng.standard_normal(n).astype(np.float32))


def _rounded(a, dt):
    return dtypes.cast(np.asarray(a, np.float32), dt).astype(np.float32)


def _grad(fn, x, g, dt):
    """(result, gradient of x) of fn in dtype dt, as float32 arrays."""
    t = eager.tensor(x).to(getattr(eager, dt.name)).requires_grad_()
    y = fn(t)
    y.backward(eager.tensor(g).to(t.dtype))
    return y.detach().float().numpy(), t.grad.float().numpy()


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
def test_tanh_sigmoid_and_silu_gradients_are_pytorchs_kernels(dt):
    x, g = _data()
    gs = _rounded(g, dt)
    r, got = _grad(eager.tanh, x, g, dt)
    np.testing.assert_array_equal(got, _rounded(gs * (1 - r * r), dt))
    r, got = _grad(eager.sigmoid, x, g, dt)
    if dt is dtypes.float16:  # PyTorch's float16 kernel: each step in float16
        want = _rounded(_rounded(gs * _rounded(1 - r, dt), dt) * r, dt)
    else:
        want = _rounded(gs * (1 - r) * r, dt)
    np.testing.assert_array_equal(got, want)
    xs = _rounded(x, dt)
    s = (1 / (1 + np.exp(-xs.astype(np.float64)))).astype(np.float32)
    _, got = _grad(eager.nn.functional.silu, x, g, dt)
    want = _rounded(gs * s * (1 + xs * (1 - s)), dt)
    # (kiln's float32 sigmoid and numpy's exp can differ by a float32 unit: a 16-bit tie)
    assert (got != want).sum() <= 4
    stepwise = _rounded(_rounded(_rounded(gs * _rounded(1 - r * r, dt), dt), dt), dt)
    assert ((_rounded(gs * (1 - r * r), dt)) != stepwise).any()  # the rules differ


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["tanh", "sigmoid", "silu", "cube", "pow", "div_other",
                                  "div_self", "mul", "exp", "log_softmax", "softmax",
                                  "layer_norm", "rms_norm", "mish", "elu", "mean"])
def test_16_bit_gradients_are_pytorchs_bit_for_bit(name, dt):
    torch = pytest.importorskip("torch")
    fns = {
        "tanh": lambda m, x, y: m.tanh(x), "sigmoid": lambda m, x, y: m.sigmoid(x),
        "silu": lambda m, x, y: m.nn.functional.silu(x), "cube": lambda m, x, y: x ** 3,
        "pow": lambda m, x, y: x.abs() ** 1.7, "div_other": lambda m, x, y: y / x,
        "div_self": lambda m, x, y: x / (y.abs() + 1), "mul": lambda m, x, y: x * y,
        "exp": lambda m, x, y: m.exp(x * 0.3), "log_softmax": lambda m, x, y: m.log_softmax(x, -1),
        "softmax": lambda m, x, y: m.softmax(x, -1),
        "layer_norm": lambda m, x, y: m.nn.functional.layer_norm(x, (128,)),
        "rms_norm": lambda m, x, y: m.nn.functional.rms_norm(x, (128,)),
        "mish": lambda m, x, y: m.nn.functional.mish(x), "elu": lambda m, x, y: m.nn.functional.elu(x),
        "mean": lambda m, x, y: x.mean(-1, keepdim=True).expand(32, 128),
    }
    rng = np.random.default_rng(1)
    x, y, g = (rng.standard_normal((32, 128)).astype(np.float32) * 2 for _ in range(3))
    grads = []
    for m in (torch, eager):
        xs = m.tensor(x).to(getattr(m, dt)).requires_grad_()
        out = fns[name](m, xs, m.tensor(y).to(getattr(m, dt)))
        out.backward(m.tensor(g).to(getattr(m, dt)))
        grads.append(xs.grad.float().numpy())
    apart = int((grads[0] != grads[1]).sum())
    # a few 16-bit ties, where float32 sums in another order or PyTorch's vectorised exp
    # land a float32 unit away (seen: 1-3 of 4096); the others are equal
    allowed = 3 if name in ("mish", "rms_norm", "softmax", "layer_norm", "elu") else 0
    assert apart <= allowed, f"{name} {dt}: {apart} of {g.size} apart"
