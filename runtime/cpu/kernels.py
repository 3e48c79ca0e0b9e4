"""A CPU pointwise or row kernel as something to compile: what builds its IR (it pickles,
so a background worker can build it) and, on request, its IR and assembly to read."""
from __future__ import annotations

from runtime.cpu import kernel_spec as K

# LLVM's O2 pipeline for these kernels (explicit vector IR): the first training step of
# the char transformer compiles its 28 in 0.60 instead of 0.80 s (optimise 210 instead of
# 280 ms, machine code 245 instead of 365), and elementwise, reductions and fusion
# --quick --threads 1 ran in the noise of O3 (19 cases, min of 3 alternated runs, O2/O3
# 0.76-1.02); O1 compiled no faster than O2.
SPEED_LEVEL = 2


class BuildKernel:
    """Builds a kernel's IR into a module: `BuildKernel(spec, width)(module)`. (A plain
    class: a dataclass costs ~0.4 ms to define, on every warm first call's path.)"""
    __slots__ = ("spec", "width")

    def __init__(self, spec: K.KernelSpec, width: int):
        self.spec, self.width = spec, width

    def __reduce__(self):
        return BuildKernel, (self.spec, self.width)

    def __call__(self, module) -> None:
        from runtime.cpu.kernel_ir import build_kernel  # llvmlite: only to build IR
        build_kernel(module, self.spec, self.width)


class KernelArtifact:
    """One generated kernel: its spec, and on request its LLVM IR, the IR after
    optimisation and the machine assembly. All are made again when asked (building IR and
    LLVM are deterministic), so a kernel keeps no text (its IR was ~30 KB)."""

    def __init__(self, spec: K.KernelSpec, width: int, jit):
        self.spec, self.width, self._jit = spec, width, jit

    @property
    def name(self) -> str:
        return self.spec.name

    def module(self):
        """A new IR module holding the kernel."""
        module = self._jit.new_module(self.name)
        self.fill(module)
        return module

    @property
    def fill(self) -> "BuildKernel":
        """What builds the kernel into a module (it pickles: a background compile worker
        can build it)."""
        return BuildKernel(self.spec, self.width)

    @property
    def llvm_ir(self) -> str:
        return str(self.module())

    @property
    def optimised_ir(self) -> str:
        return str(self._jit.optimise(self.llvm_ir, SPEED_LEVEL))

    @property
    def assembly(self) -> str:
        return self._jit.assembly(self.llvm_ir, SPEED_LEVEL)
