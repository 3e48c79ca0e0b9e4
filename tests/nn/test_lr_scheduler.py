"""The learning-rate schedules: StepLR and CosineAnnealingLR against their closed forms,
and every schedule against PyTorch's for 30 steps (OneCycleLR's momentum and
ReduceLROnPlateau's reductions too).

PyTorch's CosineAnnealingLR updates the rate recursively from the previous epoch's rate;
the two forms agree to rounding (within 5e-15 relative here, asserted at 1e-6)."""
import math

import numpy as np
import pytest

import eager
from eager.optim import lr_scheduler

EPOCHS = 30
BASE_LRS = [0.1, 0.03]

SCHEDULES = {  # id: (make(lr_scheduler module, optimizer), closed form of epoch and base lr)
    "step": (lambda m, opt: m.StepLR(opt, step_size=7),
             lambda e, base: base * 0.1 ** (e // 7)),
    "step-gamma": (lambda m, opt: m.StepLR(opt, step_size=3, gamma=0.5),
                   lambda e, base: base * 0.5 ** (e // 3)),
    "cosine": (lambda m, opt: m.CosineAnnealingLR(opt, T_max=10),
               lambda e, base: base * (1 + math.cos(math.pi * e / 10)) / 2),
    "cosine-eta-min": (lambda m, opt: m.CosineAnnealingLR(opt, T_max=12, eta_min=0.01),
                       lambda e, base: 0.01 + (base - 0.01) * (1 + math.cos(math.pi * e / 12)) / 2),
}


def _optimizer(lib):
    groups = [{"params": [lib.zeros(1, requires_grad=True)], "lr": lr} for lr in BASE_LRS]
    return lib.optim.SGD(groups, lr=1.0)


def _lr_sequence(lib, make):
    opt = _optimizer(lib)
    scheduler = make(lib.optim.lr_scheduler, opt)
    lrs = []
    for _ in range(EPOCHS):
        lrs.append([g["lr"] for g in opt.param_groups])
        assert scheduler.get_last_lr() == lrs[-1]
        opt.step()
        scheduler.step()
    return np.array(lrs)


@pytest.mark.parametrize("name", SCHEDULES)
def test_lr_follows_the_closed_form(name):
    make, form = SCHEDULES[name]
    expected = [[form(e, base) for base in BASE_LRS] for e in range(EPOCHS)]
    np.testing.assert_allclose(_lr_sequence(eager, make), expected, rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", SCHEDULES)
def test_lr_matches_torch_for_30_epochs(name):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    make, _ = SCHEDULES[name]
    np.testing.assert_allclose(_lr_sequence(eager, make), _lr_sequence(torch, make),
                               rtol=1e-6, atol=1e-12)


def test_state_dict_resumes_the_schedule():
    opt = _optimizer(eager)
    scheduler = lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    for _ in range(4):
        scheduler.step()
    state = scheduler.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 4
    fresh_opt = _optimizer(eager)
    resumed = lr_scheduler.CosineAnnealingLR(fresh_opt, T_max=10)
    resumed.load_state_dict(state)
    scheduler.step()
    resumed.step()
    assert [g["lr"] for g in fresh_opt.param_groups] == [g["lr"] for g in opt.param_groups]
    assert resumed.get_last_lr() == scheduler.get_last_lr() != BASE_LRS


def test_initial_lr_is_recorded_and_required_to_resume():
    opt = _optimizer(eager)
    lr_scheduler.StepLR(opt, step_size=2)
    assert [g["initial_lr"] for g in opt.param_groups] == BASE_LRS
    with pytest.raises(KeyError, match="initial_lr.*param_groups\\[0\\]"):
        lr_scheduler.StepLR(_optimizer(eager), step_size=2, last_epoch=5)


def test_resuming_at_an_epoch_continues_from_there():
    opt = _optimizer(eager)
    for g in opt.param_groups:
        g["initial_lr"] = g["lr"]
    scheduler = lr_scheduler.StepLR(opt, step_size=2, gamma=0.5, last_epoch=4)
    assert scheduler.last_epoch == 5
    np.testing.assert_allclose(scheduler.get_last_lr(), [lr * 0.25 for lr in BASE_LRS])


MORE = {  # id: make(lr_scheduler module, optimizer); compared with PyTorch's values
    "lambda": lambda m, opt: m.LambdaLR(opt, lambda e: 0.95 ** e + 0.01 * e),
    "lambda-per-group": lambda m, opt: m.LambdaLR(opt, [lambda e: 1 / (e + 1), lambda e: 2.0]),
    "multiplicative": lambda m, opt: m.MultiplicativeLR(opt, lambda e: 0.9 if e % 2 else 1.05),
    "multistep": lambda m, opt: m.MultiStepLR(opt, milestones=[12, 4, 20], gamma=0.3),
    "exponential": lambda m, opt: m.ExponentialLR(opt, gamma=0.9),
    "constant": lambda m, opt: m.ConstantLR(opt, factor=0.5, total_iters=4),
    "linear": lambda m, opt: m.LinearLR(opt, start_factor=0.1, total_iters=8),
    "linear-down": lambda m, opt: m.LinearLR(opt, start_factor=1.0, end_factor=0.2,
                                             total_iters=10),
    "polynomial": lambda m, opt: m.PolynomialLR(opt, total_iters=20, power=2.0),
    "one-cycle": lambda m, opt: m.OneCycleLR(opt, max_lr=[0.5, 0.2], total_steps=30),
    "one-cycle-linear-3-phase": lambda m, opt: m.OneCycleLR(
        opt, max_lr=0.4, epochs=3, steps_per_epoch=10, pct_start=0.25,
        anneal_strategy="linear", three_phase=True, div_factor=10.0),
    "warmup-then-cosine": lambda m, opt: m.SequentialLR(
        opt, [m.LinearLR(opt, start_factor=0.01, total_iters=5),
              m.CosineAnnealingLR(opt, T_max=25)], milestones=[5]),
    "three-stages": lambda m, opt: m.SequentialLR(
        opt, [m.ConstantLR(opt, factor=0.2, total_iters=100), m.ExponentialLR(opt, 0.8),
              m.StepLR(opt, 4)], milestones=[3, 11]),
}


@pytest.mark.parametrize("name", MORE)
def test_more_schedules_match_torch_for_30_steps(name):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    ours, theirs = _lr_sequence(eager, MORE[name]), _lr_sequence(torch, MORE[name])
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-15)
    assert np.ptp(ours) > 0  # the schedule moved


@pytest.mark.parametrize("optimizer, key", [("SGD", "momentum"), ("Adam", "betas")])
def test_one_cycle_cycles_momentum_or_beta1_as_torch_does(optimizer, key):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    seen = []
    for lib in (eager, torch):
        kwargs = dict(momentum=0.9) if optimizer == "SGD" else {}
        opt = getattr(lib.optim, optimizer)([lib.zeros(1, requires_grad=True)], lr=0.1, **kwargs)
        scheduler = lib.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=12)
        values = []
        for _ in range(12):
            value = opt.param_groups[0][key]
            values.append(value[0] if key == "betas" else value)
            opt.step()
            scheduler.step()
        seen.append(values)
    np.testing.assert_allclose(seen[0], seen[1], rtol=1e-12)
    assert seen[0][0] == 0.95 and 0.85 <= min(seen[0]) < 0.86  # down toward base_momentum


def test_one_cycle_refuses_stepping_past_its_end_and_optimisers_without_momentum():
    opt = _optimizer(eager)
    scheduler = lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=3)
    for _ in range(3):
        scheduler.step()
    with pytest.raises(ValueError, match="Tried to step 4 times. The specified number of total "
                                         "steps is 3"):
        scheduler.step()
    with pytest.raises(ValueError, match="optimizer must support momentum or beta1"):
        lr_scheduler.OneCycleLR(eager.optim.Adagrad([eager.zeros(1, requires_grad=True)]),
                                max_lr=0.1, total_steps=3)


METRICS = [1.0, 0.9, 0.95, 0.96, 0.97, 0.89, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.81, 0.82,
           0.83, 0.84, 0.85, 0.86]


@pytest.mark.parametrize("options", [dict(patience=2), dict(patience=1, cooldown=2, factor=0.5),
                                     dict(mode="max", patience=0, threshold=0.05,
                                          threshold_mode="abs", min_lr=[0.02, 0.0])])
def test_reduce_on_plateau_lowers_rates_when_the_metric_stalls_as_torch_does(options):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    sequences = []
    for lib in (eager, torch):
        opt = _optimizer(lib)
        scheduler = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **options)
        lrs = []
        for metric in METRICS:
            scheduler.step(metric)
            lrs.append(scheduler.get_last_lr())
        sequences.append(lrs)
    np.testing.assert_allclose(sequences[0], sequences[1], rtol=1e-12)
    assert sequences[0][-1] != sequences[0][0]


def test_reduce_on_plateau_waits_out_its_patience():
    opt = _optimizer(eager)
    scheduler = lr_scheduler.ReduceLROnPlateau(opt, patience=2)
    for metric in (1.0, 1.0, 1.0):
        scheduler.step(metric)
    assert scheduler.get_last_lr() == BASE_LRS  # two bad epochs: still patient
    scheduler.step(1.0)
    np.testing.assert_allclose(scheduler.get_last_lr(), [lr * 0.1 for lr in BASE_LRS])
