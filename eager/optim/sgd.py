"""SGD with momentum, dampening, Nesterov and weight decay, as torch.optim.SGD."""
from __future__ import annotations

from eager import factories
from eager.optim.optimizer import Optimizer


class SGD(Optimizer):
    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach))

    def _fused_step(self, group, params):
        momentum = group["momentum"]

        def spec(dtype):
            return dict(algorithm="sgd", dtype=dtype, maximize=group["maximize"],
                              weight_decay=group["weight_decay"] != 0,
                              momentum=momentum != 0, nesterov=group["nesterov"])

        def prepare(p, state):
            if momentum == 0:
                return (), (0.0, 0.0)
            if state.get("momentum_buffer") is None:  # the first step copies d_p in
                state["momentum_buffer"] = factories.zeros_like(p)
                return (state["momentum_buffer"],), (0.0, 1.0)
            return (state["momentum_buffer"],), (momentum, 1.0 - group["dampening"])

        return self._run_fused(spec, group, params, prepare)

    def _group_scalars(self, group):
        return (-group["lr"], group["weight_decay"], group["momentum"])

    def _update(self, p, grad, group, state):
        d_p = -grad if group["maximize"] else grad
        if group["weight_decay"] != 0:
            d_p = d_p.add(p, alpha=group["weight_decay"])
        momentum = group["momentum"]
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d_p.clone().detach()
            else:
                buf.mul_(momentum).add_(d_p, alpha=1 - group["dampening"])
            d_p = d_p.add(buf, alpha=momentum) if group["nesterov"] else buf
        p.add_(d_p, alpha=-group["lr"])
