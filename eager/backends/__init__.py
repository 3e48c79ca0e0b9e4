"""Device backends beyond the CPU, plugged in lazily through the public registration API.

A backend turns host data into a tensor on its device (`from_host`). Meta is the
trivial one: it keeps the shape and dtype and drops the data. The CUDA backend
(eager/backends/cuda) is loaded the first time a CUDA tensor is asked for, once the
driver finds a GPU: it registers its kernels under DispatchKey.CUDA then. Without a
driver or GPU, asking raises "CUDA backend is not available: <reason>": nothing
silently runs on the CPU.

It is torch.backends too: `mps` says there is no Metal backend, as libraries ask.
"""
from __future__ import annotations

import numpy as np

from eager.device import device
from eager.tensor import meta_empty
from ir import dtypes

from eager.backends import mps  # noqa: E402,F401 - torch.backends.mps


class _MetaBackend:
    """Shapes and dtypes only: what the compiler needs to type every node."""

    @staticmethod
    def from_host(a: np.ndarray, dev: device):
        return meta_empty(a.shape, dtypes.from_numpy(a.dtype))


def backend_for(dev: device):
    if dev.type == "meta":
        return _MetaBackend
    if dev.type == "cuda":
        return _cuda_backend()
    raise RuntimeError(f"no backend for device {dev}")


def _cuda_backend():
    from runtime.cuda.current import driver
    from runtime.cuda.driver import CudaUnavailable
    try:
        driver()
    except CudaUnavailable as e:
        raise RuntimeError(f"CUDA backend is not available: {e}") from None
    from eager.backends.cuda import load
    return load()


def cuda_is_available() -> bool:
    """Whether CUDA tensors can be made: a driver sees a GPU and the backend loads."""
    try:
        _cuda_backend()
    except RuntimeError:
        return False
    return True
