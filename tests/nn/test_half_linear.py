"""F.linear with a bias is one addmm for 1-d inputs and contiguous inputs of any rank, as
aten's linear folds them into rows: a 16-bit product and its bias round once (a 1-d or
4-d input was a product rounded, then the bias added and rounded again: 9 of 32 and 97
of 384 bfloat16 outputs apart from PyTorch's)."""
import numpy as np
import pytest

import eager
from ir import dtypes

SHAPES = [(64,), (3, 64), (2, 3, 64), (2, 2, 3, 64), (2, 1, 2, 3, 64)]


def _data(shape):
    rng = np.random.default_rng(len(shape))
    return (rng.standard_normal(shape).astype(np.float32),
            rng.standard_normal((32, 64)).astype(np.float32),
            rng.standard_normal(32).astype(np.float32))


def _r(a, dt):
    return dtypes.cast(np.asarray(a, np.float32), dt).astype(np.float32)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_the_bias_is_added_before_the_product_rounds(shape, dt):
    x, w, b = _data(shape)
    t = eager.tensor(x).to(getattr(eager, dt)).requires_grad_()
    y = eager.nn.functional.linear(t, *(eager.tensor(a).to(t.dtype) for a in (w, b)))
    assert y.shape == shape[:-1] + (32,)
    assert y.grad_fn.name() == ("AddmmBackward0" if len(shape) == 2 else "ViewBackward0")
    d = getattr(dtypes, dt)
    exact = _r(x, d).astype(np.float64) @ _r(w, d).astype(np.float64).T + _r(b, d)
    once, twice = _r(exact, d), _r(_r(exact - _r(b, d), d) + _r(b, d), d)
    got = y.detach().float().numpy()
    assert (got != once).sum() <= got.size // 100  # float32 sums of 64 terms: ties
    assert (got != twice).sum() > got.size // 20  # the rules differ


def test_a_non_contiguous_input_is_a_product_then_the_bias():
    x, w, b = _data((2, 3, 64))
    t = eager.tensor(np.ascontiguousarray(x.transpose(1, 0, 2))).transpose(0, 1)
    y = eager.nn.functional.linear(t, eager.tensor(w), eager.tensor(b))
    np.testing.assert_allclose(y.numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_are_pytorchs(shape, dt):
    torch = pytest.importorskip("torch")
    outs = []
    for m in (torch, eager):
        x, w, b = (m.tensor(a).to(getattr(m, dt)) for a in _data(shape))
        outs.append(m.nn.functional.linear(x, w, b).float().numpy())
    assert int((outs[0] != outs[1]).sum()) == 0
