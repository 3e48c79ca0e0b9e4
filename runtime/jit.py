"""The host JIT: one long-lived llvmlite MCJIT engine that compiles LLVM modules for
this CPU and hands back the addresses of their functions.

MCJIT never frees code and owns its TargetMachine, so there is one engine per process
(`host_jit()`), modules are added to it, and it lives as long as the process: any ctypes
pointer into its code stays valid. Every module is verified before it is optimised,
because bad IR can abort the whole process instead of raising.

Importing this module imports llvmlite; the eager runtime never does.
"""
from __future__ import annotations

import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir


def _initialise() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def host_cpu_name() -> str:
    """LLVM's name for this CPU, e.g. 'znver4' or 'skylake-avx512'."""
    _initialise()
    return llvm.get_host_cpu_name()


def host_features() -> list[str]:
    """The CPU features LLVM sees as enabled here, sorted ('avx2', 'avx512f', 'fma', ...)."""
    _initialise()
    return sorted(name for name, enabled in llvm.get_host_cpu_features().items() if enabled)


def vector_width() -> int:
    """float32 lanes of the widest vector register worth using: 16 with AVX-512, 8 with
    AVX2 (or AVX), 4 otherwise."""
    features = set(host_features())
    if "avx512f" in features:
        return 16
    if "avx2" in features or "avx" in features:
        return 8
    return 4


class HostJit:
    """One MCJIT engine for the host CPU at opt level 3. Use `host_jit()` to get it."""

    def __init__(self):
        _initialise()
        target = llvm.Target.from_default_triple()
        self.target_machine = target.create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
            opt=3)
        self.triple = llvm.get_process_triple()
        self.engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.target_machine)
        self._lock = threading.Lock()
        self._modules: list = []  # the engine refers to them; keep them alive with it

    def new_module(self, name: str) -> ir.Module:
        """An empty IR module with this host's triple and data layout."""
        module = ir.Module(name=name)
        module.triple = self.triple
        module.data_layout = str(self.target_machine.target_data)
        return module

    def add(self, module: ir.Module | str) -> llvm.ModuleRef:
        """Verify, optimise (O3) and compile `module` into the engine; returns the
        optimised module (str() of it is the IR after optimisation). Function names
        are global to the engine: adding one twice is an error."""
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
        for fn in parsed.functions:
            if not fn.is_declaration and self.engine.get_function_address(fn.name):
                raise ValueError(f"the host JIT already has a function named {fn.name!r}")
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        builder = llvm.create_pass_builder(self.target_machine, tuning)
        builder.getModulePassManager().run(parsed, builder)
        with self._lock:
            self.engine.add_module(parsed)
            self.engine.finalize_object()
            self._modules.append(parsed)
        return parsed

    def address(self, name: str) -> int:
        """Address of a compiled function; raises KeyError if no added module defines it."""
        address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(f"no function named {name!r} has been compiled by the host JIT")
        return address

    def assembly(self, module: llvm.ModuleRef) -> str:
        """Machine assembly of an (optimised) module, for debugging dumps."""
        return self.target_machine.emit_assembly(module)


_host: HostJit | None = None
_host_lock = threading.Lock()


def host_jit() -> HostJit:
    """The process's one host JIT engine, created on first use."""
    global _host
    with _host_lock:
        if _host is None:
            _host = HostJit()
        return _host
