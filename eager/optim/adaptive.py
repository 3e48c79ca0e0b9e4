"""RMSprop, Adagrad, Adadelta, Adamax and NAdam, as torch.optim has them (the same
defaults, update order and state names). Each updates one parameter at a time with
tensor ops, so it runs on any device; none has a fused kernel (foreach is accepted and
changes nothing)."""
from __future__ import annotations

from eager import factories
from eager.optim.optimizer import Optimizer
from eager.tensor import ops


def _check(**values) -> None:
    for name, value in values.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {name.replace('_', ' ')} value: {value}")


def _betas(betas) -> tuple:
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    return tuple(betas)


def _lerp_(average, value, weight: float):
    """average += weight (value - average), in place: PyTorch's lerp_ for weight < 0.5,
    the form these optimisers use for their moving averages."""
    return average.add_(value - average, alpha=weight)


def _gradient(p, grad, group):
    """The gradient with maximize's sign and (coupled) weight decay applied."""
    grad = -grad if group["maximize"] else grad
    return grad.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else grad


class RMSprop(Optimizer):
    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False,
                 *, maximize: bool = False, foreach: bool | None = None):
        _check(learning_rate=lr, epsilon=eps, momentum=momentum, weight_decay=weight_decay,
               alpha=alpha)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered, maximize=maximize,
                                      foreach=foreach))

    def _update(self, p, grad, group, state):
        if not state:
            state["step"] = 0
            state["square_avg"] = factories.zeros_like(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = factories.zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = factories.zeros_like(p)
        state["step"] += 1
        grad, alpha = _gradient(p, grad, group), group["alpha"]
        square_avg = state["square_avg"].mul_(alpha).add_(grad * grad, alpha=1 - alpha)
        if group["centered"]:
            grad_avg = _lerp_(state["grad_avg"], grad, 1 - alpha)
            avg = (square_avg - grad_avg * grad_avg).sqrt() + group["eps"]
        else:
            avg = square_avg.sqrt() + group["eps"]
        if group["momentum"] > 0:
            buf = state["momentum_buffer"].mul_(group["momentum"]).add_(grad / avg)
            p.add_(buf, alpha=-group["lr"])
        else:
            p.add_(grad / avg, alpha=-group["lr"])


class Adagrad(Optimizer):
    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False):
        _check(learning_rate=lr, lr_decay=lr_decay, weight_decay=weight_decay,
               initial_accumulator_value=initial_accumulator_value, epsilon=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      foreach=foreach, maximize=maximize))
        for group in self.param_groups:  # as PyTorch, the state exists from the start
            for p in group["params"]:
                self.state[p] = {"step": 0, "sum": factories.full_like(
                    p, group["initial_accumulator_value"])}

    def _update(self, p, grad, group, state):
        state["step"] += 1
        grad = _gradient(p, grad, group)
        lr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        total = state["sum"].add_(grad * grad)
        p.add_(grad / (total.sqrt() + group["eps"]), alpha=-lr)


class Adadelta(Optimizer):
    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False):
        _check(learning_rate=lr, epsilon=eps, weight_decay=weight_decay)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize))

    def _update(self, p, grad, group, state):
        if not state:
            state["step"] = 0
            state["square_avg"] = factories.zeros_like(p)
            state["acc_delta"] = factories.zeros_like(p)
        state["step"] += 1
        grad, rho, eps = _gradient(p, grad, group), group["rho"], group["eps"]
        square_avg = state["square_avg"].mul_(rho).add_(grad * grad, alpha=1 - rho)
        delta = (state["acc_delta"] + eps).sqrt() / (square_avg + eps).sqrt() * grad
        state["acc_delta"].mul_(rho).add_(delta * delta, alpha=1 - rho)
        p.add_(delta, alpha=-group["lr"])


class Adamax(Optimizer):
    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False):
        _check(learning_rate=lr, epsilon=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=_betas(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize))

    def _update(self, p, grad, group, state):
        if not state:
            state["step"] = 0
            state["exp_avg"] = factories.zeros_like(p)
            state["exp_inf"] = factories.zeros_like(p)
        state["step"] += 1
        grad, (beta1, beta2) = _gradient(p, grad, group), group["betas"]
        exp_avg = _lerp_(state["exp_avg"], grad, 1 - beta1)
        exp_inf = state["exp_inf"]
        exp_inf.copy_(ops.maximum(exp_inf * beta2, grad.abs() + group["eps"]))
        p.add_(exp_avg / exp_inf, alpha=-group["lr"] / (1 - beta1 ** state["step"]))


class NAdam(Optimizer):
    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False):
        _check(learning_rate=lr, epsilon=eps, weight_decay=weight_decay,
               momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=_betas(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      foreach=foreach, maximize=maximize))

    def _update(self, p, grad, group, state):
        if not state:
            state["step"] = 0
            state["mu_product"] = 1.0
            state["exp_avg"] = factories.zeros_like(p)
            state["exp_avg_sq"] = factories.zeros_like(p)
        state["step"] += 1
        step, lr, wd = state["step"], group["lr"], group["weight_decay"]
        (beta1, beta2), decay = group["betas"], group["momentum_decay"]
        grad = -grad if group["maximize"] else grad
        if wd and group["decoupled_weight_decay"]:
            p.mul_(1 - lr * wd)
        elif wd:
            grad = grad.add(p, alpha=wd)
        mu = beta1 * (1 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1 - 0.5 * 0.96 ** ((step + 1) * decay))
        state["mu_product"] *= mu
        mu_product = state["mu_product"]
        exp_avg = _lerp_(state["exp_avg"], grad, 1 - beta1)
        exp_avg_sq = state["exp_avg_sq"].mul_(beta2).add_(grad * grad, alpha=1 - beta2)
        denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt() + group["eps"]
        p.add_(grad / denom, alpha=-lr * (1 - mu) / (1 - mu_product))
        p.add_(exp_avg / denom, alpha=-lr * mu_next / (1 - mu_product * mu_next))


__all__ = ["RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam"]
