"""benchmarks/gpu_check.py's SGEMM check without a GPU: its copies, arguments and grid
through a driver whose launches run the kernel's IR on the emulator."""
import ctypes

import numpy as np
import pytest

from benchmarks import gpu_check
from compiler.codegen.cuda import gemm as cuda_gemm


class EmulatedDriver:
    """The Driver calls check_sgemm makes, over host buffers; a launch runs the loaded
    kernel on runtime/cuda_emulator.py, events time nothing (1 ms)."""

    def __init__(self):
        self.memory, self.next, self.modules, self.launches = {}, 4096, {}, 0

    def activate(self, ordinal=0):
        pass

    def compute_capability(self, ordinal):
        return (9, 0)

    def load_module(self, ptx):
        self.modules[len(self.modules) + 1] = ptx.split(".visible .entry ")[1].split("(")[0]
        return len(self.modules)

    def function(self, module, name):
        assert self.modules[module] == name
        return module

    def unload_module(self, module):
        del self.modules[module]

    def function_attribute(self, function, name):
        return 0

    def alloc(self, nbytes):
        pointer, self.next = self.next, self.next + nbytes + 4096
        self.memory[pointer] = np.zeros(nbytes, np.uint8)
        return pointer

    def free(self, pointer):
        del self.memory[pointer]

    def copy_to_device(self, device, host, nbytes):
        ctypes.memmove(self.memory[device].ctypes.data, host, nbytes)

    def copy_to_host(self, host, device, nbytes):
        ctypes.memmove(host, self.memory[device].ctypes.data, nbytes)

    def launch(self, function, grid, block, args):
        request = next(r for r in KERNELS if r.name == self.modules[function])
        assert block == (request.tiles.threads, 1, 1)
        dtype = np.dtype(request.dtype)
        values = [self.memory[arg.value].view(dtype) if isinstance(arg, ctypes.c_uint64)
                  else arg.value for arg in args]
        cuda_gemm.gemm_kernel(request).emulate(grid, values)
        self.launches += 1

    def event_create(self):
        return 0

    def event_record(self, event):
        pass

    def event_synchronize(self, event):
        pass

    def event_elapsed_ms(self, start, end):
        return 1.0

    def event_destroy(self, event):
        pass


KERNELS = []


@pytest.mark.slow
def test_the_sgemm_check_runs_its_kernels_and_checks_their_results(monkeypatch):
    def tracked(request):
        KERNELS.append(request)
        return cuda_gemm.gemm_kernel(request)

    monkeypatch.setattr(gpu_check, "gemm_kernel", tracked)
    driver = EmulatedDriver()
    result = gpu_check.check_sgemm(driver, size=32, repeats=1, edge_sizes=(37, 35, 19))
    assert driver.launches == 4 and not driver.memory and not driver.modules
    assert result["error_of_bound"] <= 1 and result["epilogue_error_of_bound"] <= 1
    assert result["kiln_gflops"] == 2 * 32 ** 3 / 1e-3 / 1e9
    assert result["passed"] == ("cublas" in result or result["of_cublas"] >= 0.7)
