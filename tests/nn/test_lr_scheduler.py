"""StepLR and CosineAnnealingLR: kiln computes each epoch's rate in closed form; the
sequences are checked against that form and, for 30 epochs, against PyTorch's schedulers.

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
