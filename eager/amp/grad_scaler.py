"""torch.amp.GradScaler: dynamic loss scaling for 16-bit training. The loss is multiplied
by a scale before backward, so small gradients survive a 16-bit type; before the step the
gradients are divided by it again, and a step whose gradients hold an inf or NaN is
skipped while the scale shrinks (backoff); after `growth_interval` clean steps it grows.
"""
from __future__ import annotations

import warnings

import numpy as np

from eager.autograd.grad_mode import no_grad
from eager.device import as_device
from eager.factories import tensor
from eager.tensor import Tensor
from ir import dtypes

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        self._device = as_device(device).type
        if enabled and self._device == "cuda":
            from eager import cuda
            if not cuda.is_available():
                warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not "
                              "available.  Disabling.")
                enabled = False
        if growth_factor <= 1.0:
            raise AssertionError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise AssertionError("The backoff factor must be < 1.0.")
        self._enabled = enabled
        self._init_scale, self._growth_factor = float(init_scale), float(growth_factor)
        self._backoff_factor, self._growth_interval = float(backoff_factor), int(growth_interval)
        self._scale: Tensor | None = None
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    # the loss ---------------------------------------------------------------------------
    def scale(self, outputs):
        """`outputs` (a tensor, or lists and tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if self._scale is None:
                self._scale = tensor(self._init_scale, dtype=dtypes.float32,
                                     device=outputs.device)
            return outputs * self._scale.to(outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    # the gradients ----------------------------------------------------------------------
    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY,
                                                              "found_inf": False})

    def unscale_(self, optimizer) -> None:
        """Divide `optimizer`'s gradients by the scale, in place, noting any inf or NaN."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if state["stage"] is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        if self._scale is None:
            raise AssertionError("Attempted unscale_ but _scale is None.  This may indicate "
                                 "your script did not use scaler.scale(loss or outputs) "
                                 "earlier in the iteration.")
        inverse = float(np.float32(1.0 / self._scale.item()))  # float64's, as PyTorch's
        found = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    if p.grad.dtype is dtypes.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    p.grad.mul_(inverse)
                    found = found or not bool(p.grad.isfinite().all())
        state["found_inf"], state["stage"] = found, _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless unscale_ was called), then `optimizer.step()` unless a gradient
        holds an inf or NaN. Returns what the step returns (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        state = self._state(optimizer)
        if state["stage"] is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """The next scale: `new_scale` if given; else backed off after a skipped step,
        grown after growth_interval steps without one."""
        if not self._enabled:
            return
        if new_scale is not None:
            value = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
        else:
            found = [s["found_inf"] for s in self._per_optimizer.values()]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            value = float(self._scale.item())
            if any(found):
                value *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = float(np.float32(value * self._growth_factor))
                    if grown != float("inf"):
                        value = grown
                    self._growth_tracker = 0
        self._scale = tensor(value, dtype=dtypes.float32, device=self._scale.device
                             if self._scale is not None else self._device)
        self._per_optimizer.clear()

    # settings and state -----------------------------------------------------------------
    def get_scale(self) -> float:
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was "
                               "saved from a disabled instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        if self._scale is not None:
            self._scale = tensor(self._init_scale, dtype=dtypes.float32,
                                 device=self._scale.device)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
