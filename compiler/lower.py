"""compiler.lower(fn, *args): what a backend makes of a function, to read: the captured
graphs, the graphs after the passes, and for every kernel its code, or the reason it
has none. target="cpu" (the native backend): each kernel's LLVM IR (before and after
optimisation) and assembly; target="cuda": each fused node's CUDA kernel (LLVM IR, PTX
for the GPU's architecture or sm_90, ptxas's report where ptxas is installed) with its
launch configuration. Either way the function runs once, on the CPU."""
from __future__ import annotations

from dataclasses import dataclass, field

TARGETS = ("cpu", "cuda")


@dataclass
class Lowered:
    graphs: list = field(default_factory=list)      # as captured
    optimized: list = field(default_factory=list)   # after the passes
    kernels: list = field(default_factory=list)     # KernelArtifact, in order (cpu)
    interpreted: dict = field(default_factory=dict)  # fused node -> why not native (cpu)
    target: str = "cpu"
    arch: str = ""                                   # cuda: the PTX's architecture
    cuda_kernels: list = field(default_factory=list)  # CudaLaunch, in order (cuda)
    not_cuda: dict = field(default_factory=dict)     # fused node -> why no CUDA kernel
    ptxas: dict = field(default_factory=dict)        # kernel name -> nvptx.KernelReport
    ptxas_missing: str = ""                          # why there is no report, if so

    @property
    def llvm_ir(self) -> str:
        return "\n".join(k.llvm_ir for k in self.kernels + self.cuda_kernels)

    @property
    def assembly(self) -> str:
        return "\n".join(f"; {k.name}\n{k.assembly}" for k in self.kernels)

    @property
    def ptx(self) -> dict:
        """Each CUDA kernel's PTX for `arch`, by kernel name."""
        return {k.name: k.ptx(self.arch) for k in self.cuda_kernels}

    def __str__(self) -> str:
        parts = []
        for g, o in zip(self.graphs, self.optimized):
            parts += ["# captured", str(g), "# after passes", str(o)]
        for k in self.kernels:
            parts += [f"# kernel {k.name}: LLVM IR", k.llvm_ir]
        for node, why in self.interpreted.items():
            parts.append(f"# {node} runs interpreted: {why}")
        for k in self.cuda_kernels:
            parts.append(f"# CUDA kernel {k.name} for {k.node}: grid {k.grid}, block "
                         f"{k.block}, {self.arch}")
            if k.name in self.ptxas:
                r = self.ptxas[k.name]
                parts.append(f"# ptxas: {r.registers} registers, {r.spill_stores}/"
                             f"{r.spill_loads} bytes spilled (stores/loads), "
                             f"{r.shared_bytes} bytes shared")
            parts.append(k.llvm_ir)
        for node, why in self.not_cuda.items():
            parts.append(f"# {node} has no CUDA kernel: {why}")
        return "\n".join(parts)


def lower(fn, *args, target: str = "cpu", **kwargs) -> Lowered:
    """Compile `fn` for `target` ("cpu": the native backend; "cuda": CUDA kernels, made
    without a GPU), run it once on `args` (CPU tensors), and collect what was
    generated."""
    from compiler.api import CompiledFunction
    from runtime.llvm.jit import compiling_here
    if target not in TARGETS:
        raise ValueError(f"unknown lowering target {target!r}; choose one of {TARGETS}")
    if target == "cuda":
        from compiler.backends import cuda
        cf = CompiledFunction(getattr(fn, "fn", fn), backend=cuda.LoweringBackend())
    else:
        cf = fn if isinstance(fn, CompiledFunction) else CompiledFunction(fn, backend="native")
    with compiling_here():  # the kernels themselves, not background workers' promises
        cf(*args, **kwargs)
    out = Lowered(target=target)
    for run in {id(run): run for run in cf.region_cache.values()}.values():  # each once:
        graph = getattr(run, "graph", None)  # a symbolic graph's run serves several texts
        if graph is None:
            continue
        out.optimized.append(graph)
        out.graphs.append(getattr(run, "source", graph))
        if target == "cuda":
            out.cuda_kernels.extend(run.cuda.launches.values())
            out.not_cuda.update(run.cuda.refused)
            continue
        for kernel in run.kernels.values():
            out.kernels.extend(kernel.artifacts)
        out.interpreted.update(run.native_reasons)
    if target == "cuda":
        _read_ptx(out)
    return out


def _read_ptx(out: Lowered) -> None:
    """The architecture, and ptxas's report on each kernel where ptxas is installed."""
    from runtime.cuda.current import device_arch
    from runtime.cuda import nvptx
    out.arch = device_arch()
    for k in out.cuda_kernels:
        try:
            out.ptxas[k.name] = k.report(out.arch)
        except nvptx.PtxasMissing as missing:
            out.ptxas_missing = str(missing)
            return
