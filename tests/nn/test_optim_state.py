"""Optimizer bookkeeping that needs no reference library: state_dict round trips (in
memory and through eager.save / eager.load) that continue exactly like an uninterrupted
run, zero_grad, closures, parameter groups and the errors for bad arguments."""
import math

import numpy as np
import pytest

import eager
from eager import optim

MAKERS = {
    "sgd-nesterov": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "adam-amsgrad": lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True, weight_decay=0.1),
    "adamw-groups": lambda ps: optim.AdamW([{"params": ps[:1], "lr": 0.1}, {"params": ps[1:]}],
                                           lr=0.01, betas=(0.8, 0.9)),
    "rmsprop-centered": lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
    "adagrad-decay": lambda ps: optim.Adagrad(ps, lr=0.1, lr_decay=0.01,
                                              initial_accumulator_value=0.1),
    "adadelta": lambda ps: optim.Adadelta(ps, lr=0.5),
    "adamax": lambda ps: optim.Adamax(ps, lr=0.01),
    "nadam": lambda ps: optim.NAdam(ps, lr=0.01, weight_decay=0.1),
}

INITIAL = [np.arange(6, dtype=np.float32).reshape(2, 3) / 7, np.array([0.5, -1.5], np.float32)]
GRADS = [[np.random.default_rng(i).standard_normal(p.shape).astype(np.float32) for p in INITIAL]
         for i in range(8)]


def _params(values=INITIAL):
    return [eager.tensor(v, requires_grad=True) for v in values]


def _steps(opt, params, grads):
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = eager.tensor(g)
        opt.step()
    return [p.detach().numpy().copy() for p in params]


def _resume(maker, through):
    """Four steps, hand the state over by `through`, four more in a fresh optimizer."""
    params = _params()
    opt = maker(params)
    _steps(opt, params, GRADS[:4])
    state = through(opt.state_dict())
    fresh = _params([p.detach().numpy() for p in params])
    resumed = maker(fresh)
    resumed.load_state_dict(state)
    return _steps(resumed, fresh, GRADS[4:])


@pytest.mark.parametrize("maker", MAKERS.values(), ids=MAKERS.keys())
@pytest.mark.parametrize("through", ["memory", "file"])
def test_state_dict_round_trip_continues_like_an_uninterrupted_run(maker, through, tmp_path):
    def via_file(state):
        eager.save(state, tmp_path / "opt.kiln")
        return eager.load(tmp_path / "opt.kiln")

    params = _params()
    expected = _steps(maker(params), params, GRADS)
    resumed = _resume(maker, (lambda s: s) if through == "memory" else via_file)
    for ours, ref in zip(resumed, expected):
        np.testing.assert_array_equal(ours, ref)


def test_state_dict_round_trip_is_not_the_identity():
    """The resume test can fail: dropping the state changes the result."""
    maker = MAKERS["adam-amsgrad"]
    params = _params()
    expected = _steps(maker(params), params, GRADS)
    resumed = _resume(maker, lambda s: {"state": {}, "param_groups": s["param_groups"]})
    assert not np.array_equal(resumed[0], expected[0])


def test_state_dict_is_a_snapshot():
    params = _params()
    opt = MAKERS["sgd-nesterov"](params)
    _steps(opt, params, GRADS[:2])
    state = opt.state_dict()
    before = state["state"][0]["momentum_buffer"].numpy().copy()
    _steps(opt, params, GRADS[2:4])
    np.testing.assert_array_equal(state["state"][0]["momentum_buffer"].numpy(), before)
    assert state["param_groups"][0]["params"] == [0, 1]
    assert state["param_groups"][0]["lr"] == 0.1 and state["param_groups"][0]["nesterov"]


def test_loaded_hyperparameters_replace_the_fresh_ones():
    source = optim.SGD(_params(), lr=0.5, momentum=0.3)
    target = optim.SGD(_params(), lr=0.1)
    target.load_state_dict(source.state_dict())
    assert target.param_groups[0]["lr"] == 0.5 and target.param_groups[0]["momentum"] == 0.3


@pytest.mark.parametrize("groups, match", [
    (lambda ps: [{"params": ps[:1]}, {"params": ps[1:]}], "number of parameter groups"),
    (lambda ps: ps[:1], "size of optimizer's group"),
])
def test_load_state_dict_rejects_a_different_layout(groups, match):
    state = optim.Adam(_params()).state_dict()
    with pytest.raises(ValueError, match=match):
        optim.Adam(groups(_params())).load_state_dict(state)


def test_param_groups_keep_their_own_lr_and_take_defaults():
    a, b = _params()
    opt = optim.SGD([{"params": [a], "lr": 1.0}, {"params": b}], lr=0.1, momentum=0.5)
    assert [g["lr"] for g in opt.param_groups] == [1.0, 0.1]
    assert [g["momentum"] for g in opt.param_groups] == [0.5, 0.5]
    a.grad, b.grad = eager.ones(2, 3), eager.ones(2)
    opt.step()
    np.testing.assert_allclose(a.detach().numpy(), INITIAL[0] - 1.0, rtol=1e-6)
    np.testing.assert_allclose(b.detach().numpy(), INITIAL[1] - 0.1, rtol=1e-6)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    params = _params()
    opt = optim.SGD(params, lr=0.1)
    sum(p.sum() for p in params).backward()
    opt.zero_grad(set_to_none=set_to_none)
    for p in params:
        if set_to_none:
            assert p.grad is None
        else:
            assert p.grad.shape == p.shape and not p.grad.numpy().any()


def test_parameters_without_gradients_are_left_alone():
    a, b = _params()
    opt = optim.Adam([a, b], lr=0.1)
    a.grad = eager.ones(2, 3)
    opt.step()
    np.testing.assert_array_equal(b.detach().numpy(), INITIAL[1])
    assert not np.array_equal(a.detach().numpy(), INITIAL[0])
    assert b not in opt.state


def test_step_runs_the_closure_with_grad_enabled_and_returns_its_loss():
    (p,) = _params(INITIAL[1:])
    opt = optim.SGD([p], lr=0.5)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with eager.no_grad():
        loss = opt.step(closure)
    assert loss.item() == pytest.approx(2.5)
    np.testing.assert_allclose(p.detach().numpy(), INITIAL[1] * 0.0, atol=1e-7)  # p - 0.5 * 2p


@pytest.mark.parametrize("make, match", [
    (lambda ps: optim.SGD(ps, lr=-0.1), "learning rate"),
    (lambda ps: optim.SGD(ps, lr=math.nan), "learning rate"),
    (lambda ps: optim.SGD(ps, momentum=-0.5), "momentum"),
    (lambda ps: optim.SGD(ps, weight_decay=-1.0), "weight_decay"),
    (lambda ps: optim.SGD(ps, nesterov=True), "Nesterov"),
    (lambda ps: optim.SGD(ps, momentum=0.9, dampening=0.1, nesterov=True), "Nesterov"),
    (lambda ps: optim.Adam(ps, lr=-1.0), "learning rate"),
    (lambda ps: optim.Adam(ps, eps=-1e-8), "epsilon"),
    (lambda ps: optim.Adam(ps, betas=(1.0, 0.999)), "beta parameter at index 0"),
    (lambda ps: optim.Adam(ps, betas=(0.9, -0.1)), "beta parameter at index 1"),
    (lambda ps: optim.Adam(ps, betas=(0.9, math.nan)), "beta parameter at index 1"),
    (lambda ps: optim.AdamW(ps, weight_decay=-0.1), "weight_decay"),
    (lambda ps: optim.SGD([], lr=0.1), "empty parameter list"),
    (lambda ps: optim.SGD([ps[0] * 2]), "non-leaf"),
    (lambda ps: optim.SGD([{"params": ps}, {"params": ps[:1]}]), "more than one"),
], ids=lambda x: x.replace(" ", "-") if isinstance(x, str) else "bad")
def test_bad_arguments_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make(_params())


@pytest.mark.parametrize("params", [lambda ps: ps[0], lambda ps: [ps[0], 1.0]],
                         ids=["bare-tensor", "not-a-tensor"])
def test_params_must_be_an_iterable_of_tensors(params):
    with pytest.raises(TypeError, match="Tensor"):
        optim.Adam(params(_params()))
