"""What the CUDA backend makes of a graph's fused nodes: a CudaLaunch per node it has a
kernel for, in a CudaPlan with the reasons for the others (CannotLower)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtime.cuda.codegen import CudaKernel
from runtime.cuda import nvptx

if TYPE_CHECKING:
    from compiler.backends.cuda.gemm_node import GemmCall


@dataclass
class CudaLaunch:
    """A fused node's kernel and how to launch it: `grid` blocks of the kernel's block
    (0 blocks: the node has no elements, nothing to launch); `checked`: the kernel takes
    a status word after its operands (an i64 the host zeroes and reads after the launch:
    1 when a gather met an index out of range). A gemm node's kernel (kind "gemm")
    takes the arguments `gemm.arguments` makes; the others one pointer per operand."""
    node: str
    kind: str
    kernel: CudaKernel
    grid: tuple
    checked: bool = False
    gemm: GemmCall | None = None  # a gemm node's: its sizes and arguments

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def block(self) -> tuple:
        return self.kernel.block

    @property
    def llvm_ir(self) -> str:
        return self.kernel.llvm_ir

    def ptx(self, arch: str = nvptx.DEFAULT_ARCH) -> str:
        return self.kernel.ptx(arch)

    def report(self, arch: str = nvptx.DEFAULT_ARCH) -> nvptx.KernelReport:
        """ptxas's figures for the kernel (PtxasMissing where ptxas is not installed)."""
        return nvptx.ptxas_report(self.ptx(arch), arch)[self.name]


@dataclass
class CudaPlan:
    launches: dict = field(default_factory=dict)  # node index -> CudaLaunch
    refused: dict = field(default_factory=dict)   # fused node -> why no CUDA kernel
