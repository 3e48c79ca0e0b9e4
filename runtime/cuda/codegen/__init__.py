"""CUDA kernels as LLVM IR for NVPTX (runtime/cuda/nvptx.py makes their PTX): the same
fused graphs and op records as the CPU kernels, written with runtime/llvm/toolkit.py for
the NVPTX target. Each kernel maker returns a CudaKernel; runtime/cuda/emulator/launch.py
runs its very IR on the host, so every kernel's results are tested on machines without a
GPU."""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.ir as ir

from runtime.cuda import nvptx

VECTOR_BYTES = 16  # the widest global load and store: ld.global.v4.f32, v2.f64


@dataclass(eq=False)
class CudaKernel:
    """One generated kernel: its module, its entry's name and its block shape (threads
    per block along x, y, z; the grid follows the sizes of each call)."""
    module: ir.Module
    name: str
    block: tuple
    _ptx: dict = field(default_factory=dict, repr=False)

    @property
    def function(self) -> ir.Function:
        return self.module.get_global(self.name)

    @property
    def llvm_ir(self) -> str:
        return str(self.module)

    def ptx(self, arch: str = nvptx.DEFAULT_ARCH) -> str:
        """The PTX for `arch`, made once: through the kernel cache, so from disk where
        another process made it before."""
        ptx = self._ptx.get(arch)
        if ptx is None:
            ptx = self._ptx[arch] = nvptx.cached_ptx(self.module, arch)
        else:
            nvptx.remember_source(ptx, self.module)
        return ptx

    def emulate(self, grid, args: list) -> None:
        """Run this kernel's IR on the host (runtime/cuda/emulator/launch.py) over numpy arrays."""
        from runtime.cuda.emulator import launch as cuda_emulator
        cuda_emulator.launch(self.function, grid, self.block, args)
