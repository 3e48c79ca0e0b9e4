"""A CUDA driver for eager's CUDA tests on machines without a GPU: tests/runtime/
fake_cuda.py's memory, copies, streams and events, with launches run by the CUDA
emulator (runtime/cuda_emulator.py) over that memory. The kernel's IR is the one the
backend launched (compiler.eager_cuda.device.registered, found by the entry name in the
PTX the driver is given).

Interim: runtime/cuda_emulated.py (being written beside this) will be the emulated
driver for every test; `driver()` prefers it once it exists.
"""
from __future__ import annotations

import numpy as np
import llvmlite.ir as ir

from runtime import cuda, cuda_emulator
from tests.runtime.fake_cuda import FakeCuda

_NUMPY = {"float": np.float32, "double": np.float64, "i64": np.int64, "i32": np.int32,
          "i8": np.int8, "i1": np.bool_}


class EmulatedCuda(FakeCuda):
    def __init__(self):
        super().__init__(devices=1, memory=1 << 30)
        self.kernel_launches: list[str] = []

    def cuModuleGetFunction(self, ref, module, name):
        self.kernels.setdefault(name.decode(), [])
        return super().cuModuleGetFunction(ref, module, name)


class EmulatedDriver(cuda.Driver):
    """runtime.cuda.Driver whose launches run on the emulator."""

    def launch(self, function, grid, block, args, shared_bytes=0, stream=0):
        from compiler.eager_cuda.device import registered
        name = self._lib.kernels[function]
        self._lib.kernel_launches.append(name)
        kernel = registered[name].function
        cuda_emulator.launch(kernel, grid, block,
                             [self._argument(p.type, a) for p, a in zip(kernel.args, args)],
                             dynamic_shared_bytes=shared_bytes)

    def _argument(self, ty, value):
        if not isinstance(ty, ir.PointerType):
            return int(value.value) if isinstance(value.value, bool) else value.value
        dtype = np.dtype(_NUMPY[str(ty.pointee)])
        if value.value == 0:
            return np.zeros(0, dtype)
        buffer, at = self._lib._device(value.value, 0)
        whole = np.frombuffer(buffer, np.uint8)
        usable = len(whole) // dtype.itemsize * dtype.itemsize
        if at % dtype.itemsize:
            raise AssertionError(f"a misaligned {dtype} pointer 0x{value.value:x}")
        return whole[:usable].view(dtype), at // dtype.itemsize


def driver() -> cuda.Driver:
    return EmulatedDriver.open(EmulatedCuda())
