"""The CUDA driver API through ctypes: just enough to tell whether a GPU is usable."""
from __future__ import annotations

import ctypes
import ctypes.util


class CudaUnavailable(RuntimeError):
    pass


_driver = None
_failure: str | None = None


def driver() -> ctypes.CDLL:
    """The initialised driver library, or CudaUnavailable saying why not."""
    global _driver, _failure
    if _driver is not None:
        return _driver
    if _failure is None:
        _failure = _load()
    if _failure:
        raise CudaUnavailable(_failure)
    return _driver


def _load() -> str:
    global _driver
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return "the CUDA driver library (libcuda.so) was not found; is an NVIDIA driver installed?"
    status = lib.cuInit(0)
    if status != 0:
        return f"cuInit failed with CUDA error {status}"
    count = ctypes.c_int(0)
    status = lib.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return "no CUDA device was found"
    _driver = lib
    return ""


def device_count() -> int:
    try:
        lib = driver()
    except CudaUnavailable:
        return 0
    count = ctypes.c_int(0)
    lib.cuDeviceGetCount(ctypes.byref(count))
    return count.value
