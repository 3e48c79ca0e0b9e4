"""Optimizers against torch.optim: the same float32 parameters and hand-set gradients on
both sides, ten steps, and the parameters and optimizer state agree after every step to
float32 rounding.

"Float32 rounding" is 1e-6 relative to the tensor's largest element, not to each element:
a moving average like 0.9 m + 0.1 g can cancel to a small number whose last bits depend on
whether the backend fuses the multiply-add (PyTorch's CPU kernels do), so an element-wise
bound would test the order of rounding rather than the algorithm."""
import numpy as np
import pytest

import eager

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

STEPS = 10
SHAPES = [(3, 4), (5,), ()]

CONFIGS = [  # (optimizer name, keyword arguments)
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.3)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True)),
    ("SGD", dict(lr=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.5, weight_decay=0.1, maximize=True)),
    ("Adam", dict()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-3)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("Adam", dict(lr=0.01, amsgrad=True, weight_decay=0.1, maximize=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.5, amsgrad=True)),
    ("AdamW", dict(lr=0.01, betas=(0.5, 0.9), weight_decay=0.2, maximize=True)),
]
NEW_CONFIGS = [  # per-tensor optimisers: compared in float64 (see test_..._in_float64)
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.8, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.01, centered=True, momentum=0.5, maximize=True)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.1, initial_accumulator_value=0.5)),
    ("Adagrad", dict(lr=0.1, eps=1e-3, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1, maximize=True)),
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
]
NEW = ["RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam"]


def _config_id(config):
    name, kwargs = config
    return name + "".join(f"-{k}={v}" for k, v in kwargs.items())


def _problem(seed, dtype=np.float32):
    """Initial parameters and STEPS rounds of gradients, as arrays of `dtype`."""
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(STEPS)]
    return params, grads


def _trajectory(lib, make, params, grads):
    """The parameters and the optimizer's state after each step."""
    leaves = [lib.tensor(p, requires_grad=True) for p in params]
    opt = make(lib.optim, leaves)
    for step_grads in grads:
        for p, g in zip(leaves, step_grads):
            p.grad = lib.tensor(g)
        opt.step()
        state = [{k: np.asarray(v.numpy() if hasattr(v, "numpy") else v, np.float64)
                  for k, v in opt.state[p].items()} for p in leaves]
        yield [p.detach().numpy().copy() for p in leaves], state


def _assert_close(ours, ref, what, rtol):
    scale = np.abs(ref).max(initial=0.0)
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * scale, err_msg=what)


def _assert_same_trajectory(make, seed=0, dtype=np.float32):
    params, grads = _problem(seed, dtype)
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    ours, theirs = _trajectory(eager, make, params, grads), _trajectory(torch, make, params, grads)
    for step, ((our_params, our_state), (ref_params, ref_state)) in enumerate(zip(ours, theirs)):
        for i, (p, ref) in enumerate(zip(our_params, ref_params)):
            _assert_close(p, ref, f"parameter {i} after step {step + 1}", rtol)
        for i, (s, ref) in enumerate(zip(our_state, ref_state)):
            assert sorted(s) == sorted(ref), f"state keys of parameter {i}"
            for key in s:
                _assert_close(s[key], ref[key], f"{key} of parameter {i} after step {step + 1}",
                              rtol)


@pytest.mark.parametrize("config", CONFIGS, ids=_config_id)
def test_optimizer_matches_torch_for_ten_steps(config):
    name, kwargs = config
    _assert_same_trajectory(lambda optim, params: getattr(optim, name)(params, **kwargs))


@pytest.mark.parametrize("config", NEW_CONFIGS, ids=_config_id)
def test_per_tensor_optimizer_matches_torch_for_ten_steps_in_float64(config, request):
    """float64: in float32 a zero-dim parameter's moving averages cancel to values whose
    last bits follow each library's order of rounding (1e-5 relative here). PyTorch keeps
    an optimiser's step counts and products (NAdam's mu) in its default dtype, so that is
    float64 here too."""
    name, kwargs = config
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    request.addfinalizer(lambda: torch.set_default_dtype(default))
    _assert_same_trajectory(lambda optim, params: getattr(optim, name)(params, **kwargs),
                            dtype=np.float64)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"] + NEW)
def test_default_hyperparameters_match_torch(name):
    ours = getattr(eager.optim, name)([eager.zeros(1, requires_grad=True)]).defaults
    theirs = getattr(torch.optim, name)([torch.zeros(1, requires_grad=True)]).defaults
    assert {k: ours[k] for k in ours} == {k: theirs[k] for k in ours}


@pytest.mark.parametrize("name, extra", [("SGD", dict(momentum=0.9)), ("Adam", {}),
                                         ("AdamW", dict(amsgrad=True)), ("RMSprop", {}),
                                         ("NAdam", {})])
def test_param_groups_with_their_own_lr_match_torch(name, extra):
    def make(optim, params):
        return getattr(optim, name)([{"params": params[:1], "lr": 0.2},
                                     {"params": params[1:], "weight_decay": 0.05}],
                                    lr=0.01, **extra)
    _assert_same_trajectory(make, seed=1)


@pytest.mark.parametrize("config", CONFIGS[:2] + CONFIGS[-3:] + NEW_CONFIGS, ids=_config_id)
def test_state_dict_layout_matches_torch(config):
    name, kwargs = config
    dicts = []
    for lib in (eager, torch):
        params = [lib.zeros(2, requires_grad=True), lib.zeros(3, requires_grad=True)]
        opt = getattr(lib.optim, name)(params, **kwargs)
        params[1].grad = lib.ones(3)
        opt.step()
        dicts.append(opt.state_dict())
    ours, theirs = dicts
    assert {i: sorted(s) for i, s in ours["state"].items()} == \
        {i: sorted(s) for i, s in theirs["state"].items()}
    for group, ref in zip(ours["param_groups"], theirs["param_groups"]):
        assert group == {k: ref[k] for k in group}
