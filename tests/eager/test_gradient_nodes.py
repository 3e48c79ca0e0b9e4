"""glu, logsigmoid, std and the vector norm are one op each, as PyTorch's (GluBackward0,
LogSigmoidBackward0, StdBackward0, LinalgVectorNormBackward0), with PyTorch's backward
formulas in its order: so 16-bit gradients round where PyTorch's do (glu keeps the
sigmoid in the input's type, logsigmoid reads e^-|x| rounded to it, std and the norm run
op by op). Checked against numpy models of those rules (float32 arithmetic, each
rounding), PyTorch bit for bit where installed, float64 finite differences, the numpy
kernels against the generated ones, and compiled functions against eager."""
import math

import numpy as np
import pytest

import compiler
import eager
import eager.nn.functional as F
from ir import dtypes
from tests.eager.native.narrow_cases import numpy_kernels

HALF = ("bfloat16", "float16")
ORDS = (2, 1, 3, 1.5, 0.5, math.inf, -math.inf, 0)


def _data(shape=(32, 128), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32) * 2
    x[0, :5] = 0  # zeros: the norms' and logsigmoid's special cases
    return x


def _r(a, dt):
    """a rounded to 16-bit type dt (a name), read back as float32."""
    return dtypes.cast(np.asarray(a, np.float32), getattr(dtypes, dt)).astype(np.float32)


def _grad(fn, x, g, dt):
    t = eager.tensor(x).to(getattr(eager, dt)).requires_grad_()
    y = fn(t)
    y.backward(eager.tensor(g).to(y.dtype))
    return y, t.grad.float().numpy()


CASES = {
    "glu": (lambda m, x: m.nn.functional.glu(x, -1), "GluBackward0", (32, 64)),
    "logsigmoid": (lambda m, x: m.nn.functional.logsigmoid(x), "LogSigmoidBackward0",
                   (32, 128)),
    "std": (lambda m, x: x.std(-1, keepdim=True), "StdBackward0", (32, 1)),
    "std_all": (lambda m, x: x.std(), "StdBackward0", ()),
    "std_biased": (lambda m, x: x.std(0, correction=0), "StdBackward0", (128,)),
    "var": (lambda m, x: x.var(-1), "VarBackward0", (32,)),
    "std_mean": (lambda m, x: m.std_mean(x, -1, keepdim=True)[0], "StdMeanBackward0",
                 (32, 1)),
    "var_mean": (lambda m, x: m.var_mean(x, 1)[0], "VarMeanBackward0", (32,)),
    "normalize": (lambda m, x: m.nn.functional.normalize(x, dim=-1), "DivBackward0",
                  (32, 128)),
    **{f"norm_{p}": ((lambda p: lambda m, x: x.norm(p, -1, keepdim=True))(p),
                     "LinalgVectorNormBackward0", (32, 1)) for p in ORDS},
    "norm_all": (lambda m, x: x.norm(), "LinalgVectorNormBackward0", ()),
}


@pytest.mark.parametrize("name", CASES)
def test_the_node_is_pytorchs_and_the_gradient_is_right_in_float64(name):
    fn, node, _ = CASES[name]
    x = eager.tensor(np.random.default_rng(1).standard_normal((4, 6))).requires_grad_()
    assert fn(eager, x).grad_fn.name() == node
    if name != "norm_0":  # (zero almost everywhere; its gradient is 0, checked below)
        assert eager.autograd.gradcheck(lambda t: fn(eager, t), (x,))


def test_the_zero_norm_has_no_gradient():
    x = eager.tensor(_data((4, 6))).requires_grad_()
    (x.norm(0) + x.sum()).backward()
    assert (x.grad.numpy() == 1).all()
    y = eager.tensor(_data((4, 6))).requires_grad_()
    y.norm(0).backward()
    assert y.grad is None  # as PyTorch's


@pytest.mark.parametrize("dt", HALF)
def test_16_bit_glu_gradient_multiplies_by_the_rounded_sigmoid(dt):
    x, g = _data((32, 128)), _data((32, 64), 2)
    _, got = _grad(lambda t: F.glu(t, -1), x, g, dt)
    a, b, gs = _r(x[:, :64], dt), _r(x[:, 64:], dt), _r(g, dt)
    s = _r(1 / (1 + np.exp(-b.astype(np.float64))), dt)
    np.testing.assert_array_equal(got[:, :64], _r(s * gs, dt))
    np.testing.assert_array_equal(got[:, 64:], _r((1 - s) * s * a * gs, dt))
    unrounded = (1 / (1 + np.exp(-b.astype(np.float64)))).astype(np.float32)
    assert (_r(unrounded * gs, dt) != got[:, :64]).any()  # the rules differ


@pytest.mark.parametrize("dt", HALF)
def test_16_bit_logsigmoid_gradient_reads_the_rounded_exponential(dt):
    x, g = _data(), _data(seed=2)
    for kernels in (numpy_kernels, None):
        with kernels() if kernels else _nothing():
            _, got = _grad(F.logsigmoid, x, g, dt)
        xs, gs = _r(x, dt), _r(g, dt)
        b = _r(np.exp(-np.abs(xs)), dt)
        below = xs < 0
        want = _r((np.where(below, 1.0, 0.0) - np.where(below, 1.0, -1.0) * (b / (1 + b)))
                  .astype(np.float32) * gs, dt)
        np.testing.assert_array_equal(got, want)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("dt", HALF)
def test_16_bit_std_and_norm_gradients_run_op_by_op(dt):
    x, g = _data(), _data((32, 1), 2)
    xs, gs = _r(x, dt), _r(g, dt)
    y, got = _grad(lambda t: t.std(-1, keepdim=True), x, g, dt)
    std = y.detach().float().numpy()
    grad_var = _r(gs / _r(std * 2, dt), dt)
    centred = _r(xs - _r(xs.mean(-1, keepdims=True), dt), dt)
    np.testing.assert_array_equal(got, _r(_r(grad_var * np.float32(2 / 127), dt) * centred,
                                          dt))
    y, got = _grad(lambda t: t.norm(2, -1, keepdim=True), x, g, dt)
    norm = y.detach().float().numpy()
    np.testing.assert_array_equal(got, _r(gs * _r(xs / norm, dt), dt))
    assert (got != _r(xs * _r(gs / norm, dt), dt)).any()  # the order matters


@pytest.mark.parametrize("dt", ["float32", *HALF])
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_are_pytorchs_bit_for_bit(name, dt):
    torch = pytest.importorskip("torch")
    fn, node, gshape = CASES[name]
    x = _data((32, 128))
    g = np.random.default_rng(3).standard_normal(gshape).astype(np.float32)
    results = []
    for m in (torch, eager):
        t = m.tensor(x).to(getattr(m, dt)).requires_grad_()
        y = fn(m, t)
        y.backward(m.tensor(g).to(y.dtype))
        name_of = type(y.grad_fn).__name__ if m is torch else y.grad_fn.name()
        grad = t.grad.float().numpy() if t.grad is not None else np.zeros(x.shape, np.float32)
        results.append((y.detach().float().numpy(), grad, name_of))
    (ty, tg, tn), (ky, kg, kn) = results
    assert kn == tn
    if dt == "float32":  # float32 sums in other orders: a few units
        np.testing.assert_allclose(ky, ty, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(kg, tg, rtol=1e-4, atol=1e-5)
        return
    assert int((ky != ty).sum()) == 0, f"values {int((ky != ty).sum())} apart"
    apart = int(((kg != tg) & ~(np.isnan(kg) & np.isnan(tg))).sum())
    assert apart == 0, f"{apart} of {kg.size} gradients apart"


@pytest.mark.parametrize("dt", ["float32", "bfloat16"])
def test_compiled_functions_give_eagers_values_and_gradients(dt):
    def f(x):
        return (F.glu(x, -1) * F.logsigmoid(x[:, :64])).sum() + x.std(1).sum() + \
            F.normalize(x, dim=1).sum() + x.norm(3, 0).sum()
    x = eager.tensor(_data((16, 128))).to(getattr(eager, dt))
    results = []
    for fn in (f, compiler.compile(f)):
        t = x.clone().requires_grad_()
        y = fn(t)
        y.backward()
        results.append((y.float().item(), t.grad.float().numpy()))
    (ey, eg), (cy, cg) = results
    assert cy == pytest.approx(ey, rel=1e-5 if dt == "float32" else 1e-2)
    np.testing.assert_allclose(cg, eg, rtol=1e-5 if dt == "float32" else 1e-2, atol=1e-5)


def test_errors_name_the_problem():
    with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension "
                                           "1 is size 3"):
        F.glu(eager.ones(4, 3))
    with pytest.raises(RuntimeError, match="glu does not support scalars"):
        F.glu(eager.tensor(1.0))
    with pytest.raises(NotImplementedError, match="\"glu_cpu\" not implemented for 'Long'"):
        F.glu(eager.ones(4, dtype=eager.int64))
    with pytest.raises(RuntimeError, match="cannot compute the inf norm on an empty tensor"):
        eager.ones(0).norm(math.inf)
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as "
                                           "input. Got Long"):
        eager.ones(3, dtype=eager.int64).norm()
    with pytest.raises(RuntimeError, match="std and var only support floating point"):
        eager.ones(3, dtype=eager.int64).std()
    assert F.glu(eager.ones(4, 0), 1).shape == (4, 0)
    assert eager.ones(0).norm().item() == 0.0
