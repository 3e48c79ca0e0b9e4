"""eager.nn.utils: gradient clipping (against numpy in float64, and PyTorch where
installed) and parameters as one vector."""
import math

import numpy as np
import pytest

import eager
from eager.nn.utils import (clip_grad_norm_, clip_grad_value_, parameters_to_vector,
                            vector_to_parameters)

SHAPES = [(3, 4), (5,), (2, 1, 2)]


def _parameters(grads, dtype=eager.float64):
    params = []
    for g in grads:
        p = eager.nn.Parameter(eager.zeros(*g.shape, dtype=dtype))
        if g is not None:
            p.grad = eager.tensor(g, dtype=dtype)
        params.append(p)
    return params


def _grads(scale=1.0):
    rng = np.random.default_rng(0)
    return [scale * rng.standard_normal(s) for s in SHAPES]


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_scales_to_the_total_norm_as_numpy_computes_it(norm_type, max_norm):
    grads = _grads()
    flat = np.concatenate([g.ravel() for g in grads])
    total = np.abs(flat).max() if norm_type == math.inf else \
        (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    params = _parameters(grads)
    got = clip_grad_norm_(params, max_norm, norm_type)
    assert got.item() == pytest.approx(total, rel=1e-12)
    scale = min(1.0, max_norm / (total + 1e-6))
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad.numpy(), g * scale, rtol=1e-12)


def test_clip_grad_norm_agrees_with_torch_in_float32():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    grads = [g.astype(np.float32) for g in _grads(3.0)]
    ours = _parameters(grads, eager.float32)
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for t, g in zip(theirs, grads):
        t.grad = torch.tensor(g)
    a, b = clip_grad_norm_(ours, 1.0), torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert a.item() == pytest.approx(b.item(), rel=1e-6)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_clip_grad_norm_skips_missing_grads_and_can_refuse_a_nonfinite_norm():
    params = _parameters(_grads())
    params[1].grad = None
    assert clip_grad_norm_(params[1:2], 1.0).item() == 0.0
    clip_grad_norm_(params, 1.0)
    assert params[1].grad is None
    params[0].grad[0, 0] = math.inf
    with pytest.raises(RuntimeError, match="The total norm of order 2.0 .* is non-finite"):
        clip_grad_norm_(params, 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="norm_type must be positive"):
        clip_grad_norm_(params, 1.0, norm_type=0)


def test_clip_grad_value_clamps_every_gradient_in_place():
    grads = _grads(2.0)
    params = _parameters(grads)
    clip_grad_value_(params, 0.7)
    for p, g in zip(params, grads):
        np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -0.7, 0.7))


def test_parameters_round_trip_through_one_vector():
    model = eager.nn.Sequential(eager.nn.Linear(3, 4), eager.nn.Linear(4, 2))
    vector = parameters_to_vector(model.parameters())
    assert vector.shape == (3 * 4 + 4 + 4 * 2 + 2,)
    expected = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    np.testing.assert_array_equal(vector.detach().numpy(), expected)
    vector_to_parameters(vector * 2, model.parameters())
    np.testing.assert_array_equal(parameters_to_vector(model.parameters()).detach().numpy(),
                                  2 * expected)
    with pytest.raises(RuntimeError, match="need a 1-D vector of 26 elements"):
        vector_to_parameters(eager.zeros(29), model.parameters())
    with pytest.raises(TypeError, match="expected torch.Tensor"):
        vector_to_parameters([0.0] * 26, model.parameters())
