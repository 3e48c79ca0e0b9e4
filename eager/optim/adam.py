"""Adam and AdamW, with PyTorch's update order (bias corrections, eps outside the sqrt,
AdamW's decoupled decay applied to the parameter before the step)."""
from __future__ import annotations

import math

import numpy as np

from eager import factories
from eager.optim.optimizer import Optimizer


_FAST_DTYPES = ("float32", "float64")


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach))

    def _fused_step(self, group, params):
        beta1, beta2 = group["betas"]

        def spec(dtype):
            return dict(algorithm="adam", dtype=dtype, maximize=group["maximize"],
                              weight_decay=group["weight_decay"] != 0,
                              decoupled=self._decoupled, amsgrad=group["amsgrad"])

        def prepare(p, state):
            state["step"] += 1
            step = state["step"]
            names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
            return (tuple(state[n] for n in names),
                    (-(group["lr"] / (1 - beta1 ** step)), math.sqrt(1 - beta2 ** step)))

        for p in params:  # made now, so that the fused step checks their layouts too
            _init_state(p, group, self.state[p])
        return self._run_fused(spec, group, params, prepare)

    def _group_scalars(self, group):
        beta1, beta2 = group["betas"]
        wd = group["weight_decay"]
        return (wd, 1 - group["lr"] * wd, beta1, 1 - beta1, beta2, 1 - beta2, group["eps"])

    def _update(self, p, grad, group, state):
        _init_state(p, group, state)
        if self._numpy_update(p, grad, group, state):
            return
        beta1, beta2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        grad = -grad if group["maximize"] else grad
        if wd != 0:
            if self._decoupled:
                p.mul_(1 - lr * wd)
            else:
                grad = grad.add(p, alpha=wd)
        state["step"] += 1
        step = state["step"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        second = exp_avg_sq
        if group["amsgrad"]:
            state["max_exp_avg_sq"].copy_(state["max_exp_avg_sq"].maximum(exp_avg_sq))
            second = state["max_exp_avg_sq"]
        step_size = lr / (1 - beta1 ** step)
        denom = (second.sqrt() / math.sqrt(1 - beta2 ** step)).add_(group["eps"])
        p.add_(exp_avg / denom, alpha=-step_size)

    def _numpy_update(self, p, grad, group, state) -> bool:
        """The same arithmetic, in the same order, as numpy ops on the CPU tensors' own
        memory: no dispatch and fewer temporaries (PyTorch's foreach / fused paths play
        this part). Returns False where it does not apply (amsgrad, float16, other
        devices): the op-by-op update runs instead."""
        if group["amsgrad"] or p.device.type != "cpu" or p.dtype.name not in _FAST_DTYPES \
                or grad.dtype is not p.dtype or grad.shape != p.shape or not state:
            return False
        x, g = p._np(), grad._np()
        beta1, beta2 = group["betas"]
        lr, wd = group["lr"], group["weight_decay"]
        if group["maximize"]:
            g = -g
        if wd != 0:
            if self._decoupled:
                x *= 1 - lr * wd
            else:
                g = g + x * wd
        state["step"] += 1
        step = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        a, b = m._np(), v._np()
        a *= beta1
        a += g * (1 - beta1)
        b *= beta2
        b += (g * g) * (1 - beta2)
        denom = np.sqrt(b) / math.sqrt(1 - beta2 ** step)
        denom += group["eps"]
        x += (a / denom) * -(lr / (1 - beta1 ** step))
        for t in (p, m, v):
            t._bump()
        return True


def _init_state(p, group: dict, state: dict) -> None:
    if not state:
        state["step"] = 0
        state["exp_avg"] = factories.zeros_like(p)
        state["exp_avg_sq"] = factories.zeros_like(p)
        if group["amsgrad"]:
            state["max_exp_avg_sq"] = factories.zeros_like(p)


class AdamW(Adam):
    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         foreach=foreach)
