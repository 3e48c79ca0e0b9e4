"""compiler.lower(fn, *args): what the native backend makes of a function, to read: the
captured graphs, the graphs after the passes, and for every kernel its LLVM IR (before
and after optimisation) and assembly, or the reason it runs interpreted."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Lowered:
    graphs: list = field(default_factory=list)      # as captured
    optimized: list = field(default_factory=list)   # after the passes
    kernels: list = field(default_factory=list)     # KernelArtifact, in order
    interpreted: dict = field(default_factory=dict)  # fused node -> why not native

    @property
    def llvm_ir(self) -> str:
        return "\n".join(k.llvm_ir for k in self.kernels)

    @property
    def assembly(self) -> str:
        return "\n".join(f"; {k.name}\n{k.assembly}" for k in self.kernels)

    def __str__(self) -> str:
        parts = []
        for g, o in zip(self.graphs, self.optimized):
            parts += ["# captured", str(g), "# after passes", str(o)]
        for k in self.kernels:
            parts += [f"# kernel {k.name}: LLVM IR", k.llvm_ir]
        for node, why in self.interpreted.items():
            parts.append(f"# {node} runs interpreted: {why}")
        return "\n".join(parts)


def lower(fn, *args, **kwargs) -> Lowered:
    """Compile `fn` with the native backend, run it once on `args`, and collect what was
    generated."""
    from compiler.api import CompiledFunction
    cf = fn if isinstance(fn, CompiledFunction) else CompiledFunction(fn, backend="native")
    cf(*args, **kwargs)
    out = Lowered()
    for run in cf.region_cache.values():
        graph = getattr(run, "graph", None)
        if graph is None:
            continue
        out.optimized.append(graph)
        out.graphs.append(getattr(run, "source", graph))
        for kernel in run.kernels.values():
            out.kernels.extend(kernel.artifacts)
        out.interpreted.update(run.native_reasons)
    return out
