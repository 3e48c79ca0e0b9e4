"""Device backends beyond the CPU, plugged in lazily through the public registration API.

A backend turns host data into a tensor on its device (`from_host`). Meta is the
trivial one: it keeps the shape and dtype and drops the data. The CUDA backend would
register itself the first time a CUDA tensor is asked for; until it exists and a driver
and GPU are present, asking raises a clear error: nothing silently runs on the CPU.
"""
from __future__ import annotations

import numpy as np

from eager.device import device
from eager.tensor import meta_empty
from ir import dtypes


class _MetaBackend:
    """Shapes and dtypes only: what the compiler needs to type every node."""

    @staticmethod
    def from_host(a: np.ndarray, dev: device):
        return meta_empty(a.shape, dtypes.from_numpy(a.dtype))


def backend_for(dev: device):
    if dev.type == "meta":
        return _MetaBackend
    if dev.type == "cuda":
        from runtime.cuda import CudaUnavailable, driver
        try:
            driver()
        except CudaUnavailable as e:
            raise RuntimeError(f"CUDA backend is not available: {e}") from None
        raise RuntimeError("CUDA backend is not available: a CUDA driver and GPU were found, but "
                           "kiln's CUDA kernels are not built yet (see the compiler's PTX backend)")
    raise RuntimeError(f"no backend for device {dev}")


def cuda_is_available() -> bool:
    """False until kiln registers CUDA kernels: no CUDA tensor can be made before then."""
    return False
