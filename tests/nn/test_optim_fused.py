"""Fused optimiser steps (eager/backends/native/optim.py): bit for bit the per-tensor steps
over 20 iterations for every option, mixed and odd sizes, empty parameters, parameters
without a gradient; the fused kernel is what ran; what it cannot take falls back."""
import numpy as np
import pytest

import eager
from eager.backends.native import optim as fused_optim
from eager import optim

SHAPES = [(3, 5), (7,), (0,), (33, 17), (1,), (70000,)]  # the last spans chunks

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, weight_decay=0.01, maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, weight_decay=0.1, maximize=True)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.05, amsgrad=True, maximize=True)),
]


def _train(name, kwargs, dtype, foreach, steps=20):
    """Parameters after `steps` steps on fixed random gradients; parameter 4 has no
    gradient every third step."""
    rng = np.random.default_rng(0)
    params = [eager.tensor(rng.standard_normal(s), dtype=dtype, requires_grad=True)
              for s in SHAPES]
    opt = getattr(optim, name)(params, foreach=foreach, **kwargs)
    for i in range(steps):
        for k, p in enumerate(params):
            p.grad = None if k == 4 and i % 3 == 0 else eager.tensor(
                rng.standard_normal(p.shape), dtype=dtype)
        opt.step()
    return [p.detach().numpy().copy() for p in params], opt


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name, kwargs", CONFIGS, ids=[f"{n}-{'-'.join(k)}" for n, k in CONFIGS])
def test_fused_steps_equal_per_tensor_steps(name, kwargs, dtype):
    before = fused_optim.runs["steps"]
    fused, fused_opt = _train(name, kwargs, dtype, foreach=True)
    assert fused_optim.runs["steps"] - before == 20  # one fused call per step
    single, single_opt = _train(name, kwargs, dtype, foreach=False)
    assert fused_optim.runs["steps"] - before == 20
    for a, b in zip(fused, single):
        np.testing.assert_array_equal(a, b)
    for mine, theirs in zip(fused_opt.state_dict()["state"].values(),
                            single_opt.state_dict()["state"].values()):
        assert sorted(mine) == sorted(theirs)
        for key, value in mine.items():
            expected = theirs[key]
            assert (value.numpy() == expected.numpy()).all() if isinstance(
                value, eager.Tensor) else value == expected


def test_the_default_step_is_fused_and_shows_in_the_profiler():
    p = eager.ones(5, requires_grad=True)
    opt = optim.Adam([p])
    p.grad = eager.ones(5)
    with eager.profiler.profile() as prof:
        opt.step()
    assert "kiln::fused_adam_step" in prof.key_averages().table()


def test_a_new_lr_and_step_reuse_the_kernel():
    p = eager.ones(4, requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.5)
    p.grad = eager.ones(4)
    opt.step()
    compiled = fused_optim.kernel.cache_info().misses
    opt.param_groups[0]["lr"] = 0.01
    opt.step()
    assert fused_optim.kernel.cache_info().misses == compiled
    np.testing.assert_allclose(p.detach().numpy(), 1 - 0.1 - 0.01 * 1.5, rtol=1e-6)


def test_what_the_kernel_cannot_take_runs_per_tensor():
    rng = np.random.default_rng(1)
    half = eager.tensor(rng.standard_normal(4), dtype=eager.float16, requires_grad=True)
    strided = eager.tensor(rng.standard_normal((6, 4))).t().detach().requires_grad_()
    plain = eager.tensor(rng.standard_normal(5), requires_grad=True)
    assert not strided.is_contiguous()
    fused = [half, strided, plain]
    single = [t.detach().clone().requires_grad_() for t in fused]
    grads = [eager.tensor(rng.standard_normal(t.shape), dtype=t.dtype) for t in fused]
    for params, foreach in ((fused, True), (single, False)):
        opt = optim.AdamW(params, lr=0.1, foreach=foreach)
        before = fused_optim.runs["steps"]
        for _ in range(3):
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
        assert fused_optim.runs["steps"] - before == (3 if foreach else 0)  # plain's
    for a, b in zip(fused, single):
        np.testing.assert_array_equal(a.detach().float().numpy(), b.detach().float().numpy())
