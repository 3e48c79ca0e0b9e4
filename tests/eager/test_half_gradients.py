"""16-bit gradients with PyTorch's values: the backward of tanh, sigmoid and silu are one
kernel each in PyTorch (float32, rounded once; float16's sigmoid_backward in float16,
each step rounded), pow's and div's are PyTorch's formulas in its order, each op rounded.
gelu and its gradient are PyTorch's float32 formulas rounded once, with an accurate erf
and tanh where PyTorch's approximate (pinned: where they differ, kiln is nearer float64).
Against numpy models of those rules and against PyTorch where installed."""
import contextlib
import math

import numpy as np
import pytest

import eager
from eager.backends.native import pointwise as eager_pointwise
from ir import dtypes
from tests.eager.native.narrow_cases import numpy_kernels


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


def _gelu_model(x, g, approximate):
    """(gelu, its gradient) of 16-bit-valued float32 arrays as kiln computes them: PyTorch's
    float32 formulas (x 0.5 (1 + erf(x / sqrt 2)), or with tanh; the gradient
    g (cdf + x pdf)), tanh, erf and exp rounded from float64, each rounded to 16 bits once."""
    f32, x64 = np.float32, x.astype(np.float64)

    def rounded_from_float64(fn, v):
        return fn(v.astype(np.float64)).astype(np.float32)
    if approximate == "tanh":
        k, kappa = f32(np.sqrt(2 / np.pi)), f32(0.044715)
        t = rounded_from_float64(np.tanh, k * (x + kappa * (x * x * x)))
        y = f32(0.5) * x * (f32(1) + t)
        d_inner = (x * x * f32(3 * 0.044715) + f32(1)) * k
        return y, g * ((t + f32(1)) * f32(0.5) + x * f32(0.5) * (f32(1) - t * t) * d_inner)
    erf = np.vectorize(math.erf)(x64 * f32(np.sqrt(0.5))).astype(np.float32)
    pdf = rounded_from_float64(np.exp, x * x * f32(-0.5)) * f32(1 / np.sqrt(2 * np.pi))
    return f32(0.5) * x * (f32(1) + erf), g * ((erf + f32(1)) * f32(0.5) + x * pdf)


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("path", ["numpy", "native"])
def test_16_bit_gelu_and_its_gradient_are_the_float32_formula_rounded_once(dt, approximate,
                                                                          path):
    """On numpy's path (numpy's own float32 tanh was a unit off in a third of its results:
    18/47 of these 4096 bfloat16/float16 gelus were off the model) and on the generated
    kernels' alike."""
    x, g = _data()
    xs, gs = _rounded(x, dt), _rounded(g, dt)
    calls = eager_pointwise.calls
    with contextlib.ExitStack() as stack:
        if path == "numpy":
            stack.enter_context(numpy_kernels())
        y, grad = _grad(lambda t: eager.nn.functional.gelu(t, approximate=approximate),
                        x, g, dt)
    assert (eager_pointwise.calls > calls) == (path == "native")
    want_y, want_grad = _gelu_model(xs, gs, approximate)
    np.testing.assert_array_equal(y, _rounded(want_y, dt))
    np.testing.assert_array_equal(grad, _rounded(want_grad, dt))
    if approximate == "tanh":  # the test can fail: numpy's float32 tanh gives others
        k = np.float32(np.sqrt(2 / np.pi))
        t = np.tanh(k * (xs + np.float32(0.044715) * (xs * xs * xs)))
        assert (_rounded(np.float32(0.5) * xs * (1 + t), dt) != y).sum() > 0


# (kiln's, PyTorch's) 16-bit gelus and gradients of these inputs that differ from the
# other's, each nearer float64 than the other's there (counted with torch 2.13 on AVX-512)
_GELU_APART = {("bfloat16", "none"): ((36, 0), (17, 4)),
               ("float16", "none"): ((75, 19), (10, 1)),
               ("bfloat16", "tanh"): ((3, 0), (4, 0)),
               ("float16", "tanh"): ((2, 0), (3, 5))}


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_16_bit_gelu_differs_from_pytorch_only_where_pytorchs_erf_or_tanh_approximates(
        dt, approximate):
    """PyTorch's erf is an approximation: its float16 gelu is Abramowitz and Stegun 7.1.26
    (Vectorized<float>::erf, absolute error 1.5e-7), its bfloat16 gelu oneDNN's float32
    one rounded; kiln keeps an accurate erf, nearer float64 where they differ (over every
    16-bit input in (-10, 10): bfloat16 forward 532 apart, kiln nearer in all; float16
    182 to 35). Its tanh is Sleef's, a float32 unit from the rounded one at a few 16-bit
    ties, where 1 + tanh cancels. Pinned: where the two differ and which is nearer."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((32, 128)) * 2).astype(np.float32)
    g = rng.standard_normal((32, 128)).astype(np.float32)
    xs, gs = _rounded(x, getattr(dtypes, dt)), _rounded(g, getattr(dtypes, dt))
    got = {}
    for m in (torch, eager):
        t = m.tensor(xs).to(getattr(m, dt)).requires_grad_()
        y = m.nn.functional.gelu(t, approximate=approximate)
        y.backward(m.tensor(gs).to(getattr(m, dt)))
        got[m] = y.detach().float().numpy(), t.grad.float().numpy()
    x64, g64 = xs.astype(np.float64), gs.astype(np.float64)
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        u = k * (x64 + 0.044715 * x64 ** 3)
        t = np.tanh(u)
        one_plus_t = 2 / (1 + np.exp(-2 * u))  # 1 + tanh(u), no cancellation
        exact = (0.5 * x64 * one_plus_t, g64 * (0.5 * one_plus_t + 0.5 * x64 * (1 - t * t)
                                                 * k * (1 + 3 * 0.044715 * x64 * x64)))
    else:
        erfc = np.vectorize(math.erfc)(-x64 / math.sqrt(2))  # 1 + erf, no cancellation
        exact = (0.5 * x64 * erfc, g64 * (0.5 * erfc + x64 * np.exp(-0.5 * x64 * x64)
                                          / math.sqrt(2 * math.pi)))
    for i, (kiln_nearer, torch_nearer) in enumerate(_GELU_APART[dt, approximate]):
        ours, theirs, e = got[eager][i], got[torch][i], exact[i]
        apart = ours != theirs
        assert (apart & (np.abs(ours - e) < np.abs(theirs - e))).sum() == kiln_nearer
        assert (apart & (np.abs(theirs - e) < np.abs(ours - e))).sum() == torch_nearer
        assert apart.sum() == kiln_nearer + torch_nearer
