"""torch.cpu: the CPU as a device module, as torch.cuda is for GPUs (amp, is_available,
device_count, synchronize ...), for code written against either."""
from __future__ import annotations

import platform

from eager import _missing
from eager.amp import cpu_amp as amp  # noqa: F401 - torch.cpu.amp


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def set_device(device) -> None:
    """Nothing to choose: there is one CPU device."""


def synchronize(device=None) -> None:
    """kiln's CPU kernels have finished when they return."""


def get_device_name(device=None) -> str:
    return platform.processor() or platform.machine()


# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.cpu", "eager.cpu")
