"""torch.nn.utils: gradient clipping and parameters as one flat vector; `fusion` folds
batch norms into the layers before them."""
from __future__ import annotations

import math

from eager import _missing
from eager import factories, functional
from eager.autograd.grad_mode import no_grad
from eager.nn.utils import fusion as fusion
from eager.derived_math import norm
from eager.tensor import Tensor


def _listed(parameters) -> list[Tensor]:
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _norm(t: Tensor, norm_type: float) -> Tensor:
    """The p-norm of all of t (derived_math.norm), 0 for an empty t's largest magnitude."""
    if norm_type == math.inf and not t.numel():
        return factories.zeros((), dtype=t.dtype)
    return norm(t, norm_type)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """Scale the gradients in place so that their norm together (as one vector's, of
    order `norm_type`; inf: the largest magnitude) is at most `max_norm`; returns that
    total norm before scaling. Parameters without a gradient are skipped."""
    norm_type = float(norm_type)
    if norm_type <= 0 and norm_type != math.inf:
        raise ValueError(f"clip_grad_norm_: norm_type must be positive or inf, got {norm_type}")
    grads = [p.grad for p in _listed(parameters) if p.grad is not None]
    if not grads:
        return factories.tensor(0.0)
    with no_grad():
        norms = functional.stack([_norm(g, norm_type) for g in grads])
        total = _norm(norms, norm_type)
        if error_if_nonfinite and not math.isfinite(total.item()):
            raise RuntimeError(
                f"The total norm of order {norm_type} for gradients from `parameters` is "
                f"non-finite, so it cannot be clipped. To disable this error and scale the "
                f"gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
        scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale.to(g.dtype))
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient to [-clip_value, clip_value] in place."""
    clip_value = float(clip_value)
    with no_grad():
        for p in _listed(parameters):
            if p.grad is not None:
                p.grad.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters) -> Tensor:
    """The parameters flattened and joined into one 1-D tensor (a copy)."""
    listed = _listed(parameters)
    _one_device(listed, "parameters_to_vector")
    return functional.cat([p.reshape(-1) for p in listed])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Each parameter's values from the next numel() elements of `vec`."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    listed = _listed(parameters)
    _one_device(listed + [vec], "vector_to_parameters")
    needed = sum(p.numel() for p in listed)
    if vec.dim() != 1 or vec.numel() != needed:
        raise RuntimeError(f"vector_to_parameters: the vector has shape {list(vec.shape)}; "
                           f"the parameters need a 1-D vector of {needed} elements")
    start = 0
    for p in listed:
        p.data = vec[start:start + p.numel()].view_as(p).data
        start += p.numel()


def _one_device(tensors: list[Tensor], fn: str) -> None:
    devices = {str(t.device) for t in tensors}
    if len(devices) > 1:
        raise TypeError(f"{fn}: found tensors on different devices: {sorted(devices)}")

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.nn.utils", "eager.nn.utils")
