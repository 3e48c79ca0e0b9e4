"""Device backends beyond the CPU, plugged in lazily through the public registration API.

The CUDA backend registers itself the first time a CUDA tensor is asked for. Until it
exists and a driver and GPU are present, asking raises a clear error: nothing silently
runs on the CPU.
"""
from __future__ import annotations

from eager.device import device


def backend_for(dev: device):
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
