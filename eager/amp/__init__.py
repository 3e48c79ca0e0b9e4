"""torch.amp: autocast (eager/amp/autocast_mode.py) and GradScaler (grad_scaler.py)."""
from __future__ import annotations

import functools

from eager.amp import autocast_mode as _mode
from eager.amp.grad_scaler import GradScaler
from ir.dtypes import DType

__all__ = ["autocast", "GradScaler", "is_autocast_available", "custom_fwd", "custom_bwd"]


def _device_type(device_type) -> str:
    name = getattr(device_type, "type", device_type)
    if name not in _mode.AUTOCAST_KEY:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{name}'")
    return name


class autocast:  # noqa: N801 - PyTorch's name
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None): a
    context manager, or a decorator, running the ops PyTorch lists in `dtype` (bfloat16
    on the CPU, float16 on CUDA by default) while it is open."""

    def __init__(self, device_type: str, dtype: DType | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        self.device = _device_type(device_type)
        self.fast_dtype = dtype or _mode.DEFAULT_DTYPE[self.device]
        if not isinstance(self.fast_dtype, DType):
            raise TypeError(f"autocast: dtype must be an eager dtype, not "
                            f"{type(self.fast_dtype).__name__}")
        self._enabled = bool(enabled)
        if self._enabled and self.fast_dtype not in _mode.SUPPORTED_DTYPES[self.device]:
            import warnings
            names = ", ".join(f"torch.{d.name}" for d in _mode.SUPPORTED_DTYPES[self.device])
            warnings.warn(f"In {self.device.upper()} autocast, but the target dtype is not "
                          f"supported. Disabling autocast.\n{self.device.upper()} Autocast "
                          f"only supports dtypes of {names} currently.")
            self._enabled = False
        self._cache_enabled = True if cache_enabled is None else bool(cache_enabled)

    def __enter__(self):
        s = _mode.state
        self._prev = (_mode.is_enabled(self.device), s.dtype[self.device], s.cache_enabled)
        _mode.set_enabled(self.device, self._enabled)
        s.dtype[self.device] = self.fast_dtype
        s.cache_enabled = self._cache_enabled
        s.depth += 1
        return self

    def __exit__(self, *exc) -> bool:
        s = _mode.state
        s.depth -= 1
        if s.depth == 0:
            s.cache.clear()
        enabled, s.dtype[self.device], s.cache_enabled = self._prev
        _mode.set_enabled(self.device, enabled)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)
        return run


def is_autocast_available(device_type: str) -> bool:
    return device_type in _mode.AUTOCAST_KEY


def custom_fwd(fwd=None, *, device_type: str = "cuda", cast_inputs: DType | None = None):
    """torch.amp.custom_fwd: a custom Function's forward under autocast; with
    `cast_inputs`, its floating inputs cast to that type and autocast off inside."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)

    @functools.wraps(fwd)
    def forward(*args, **kwargs):
        if cast_inputs is None or not _mode.is_enabled(device_type):
            return fwd(*args, **kwargs)
        args = _mode._cast_all(args, cast_inputs)
        kwargs = {k: _mode._cast_all(v, cast_inputs) for k, v in kwargs.items()}
        with autocast(device_type, enabled=False):
            return fwd(*args, **kwargs)
    return forward


def custom_bwd(bwd=None, *, device_type: str = "cuda"):
    """torch.amp.custom_bwd: a custom Function's backward (kiln runs it as it is)."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    return bwd


def get_autocast_dtype(device_type: str) -> DType:
    return _mode.state.dtype[_device_type(device_type)]


def set_autocast_dtype(device_type: str, dtype: DType) -> None:
    _mode.state.dtype[_device_type(device_type)] = dtype


def is_autocast_enabled(device_type: str | None = None) -> bool:
    return _mode.is_enabled(_device_type(device_type or "cuda"))


def set_autocast_enabled(device_type, enabled=None) -> None:
    if enabled is None:  # the old form: set_autocast_enabled(enabled), for CUDA
        device_type, enabled = "cuda", device_type
    _mode.set_enabled(_device_type(device_type), bool(enabled))


def clear_autocast_cache() -> None:
    _mode.state.cache.clear()


class _DeviceAmp:
    """torch.cpu.amp and torch.cuda.amp: autocast and GradScaler for one device type,
    the device left out of their arguments (PyTorch's older spelling)."""

    def __init__(self, device_type: str):
        self._device = device_type

    def autocast(self, enabled: bool = True, dtype: DType | None = None,
                 cache_enabled: bool = True) -> autocast:
        return autocast(self._device, dtype, enabled, cache_enabled)

    def GradScaler(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,  # noqa: N802
                   backoff_factor: float = 0.5, growth_interval: int = 2000,
                   enabled: bool = True) -> GradScaler:
        return GradScaler(self._device, init_scale, growth_factor, backoff_factor,
                          growth_interval, enabled)

    def custom_fwd(self, fwd=None, *, cast_inputs: DType | None = None):
        return custom_fwd(fwd, device_type=self._device, cast_inputs=cast_inputs)

    def custom_bwd(self, bwd=None):
        return custom_bwd(bwd, device_type=self._device)


cpu_amp, cuda_amp = _DeviceAmp("cpu"), _DeviceAmp("cuda")


# PyTorch's older per-device spellings of the functions above
def get_autocast_cpu_dtype() -> DType:
    return get_autocast_dtype("cpu")


def get_autocast_gpu_dtype() -> DType:
    return get_autocast_dtype("cuda")


def set_autocast_cpu_dtype(dtype: DType) -> None:
    set_autocast_dtype("cpu", dtype)


def set_autocast_gpu_dtype(dtype: DType) -> None:
    set_autocast_dtype("cuda", dtype)


def is_autocast_cpu_enabled() -> bool:
    return is_autocast_enabled("cpu")


def set_autocast_cpu_enabled(enabled: bool) -> None:
    set_autocast_enabled("cpu", enabled)


def is_autocast_cache_enabled() -> bool:
    return _mode.state.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    _mode.state.cache_enabled = bool(enabled)


def autocast_increment_nesting() -> int:
    _mode.state.depth += 1
    return _mode.state.depth


def autocast_decrement_nesting() -> int:
    """One level out; leaving the outermost one empties the cast cache."""
    _mode.state.depth = max(_mode.state.depth - 1, 0)
    if _mode.state.depth == 0:
        _mode.state.cache.clear()
    return _mode.state.depth
