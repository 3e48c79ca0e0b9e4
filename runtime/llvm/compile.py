"""LLVM IR text -> object code, as the host JIT and the background compile workers both
make it, and the clock of where each thread's compiles went."""
from __future__ import annotations

import importlib
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from runtime.llvm.cache import Entry
from runtime.llvm.passes import run_pipeline
from runtime.llvm.target import CpuTarget

if TYPE_CHECKING:
    import llvmlite.binding as llvm

_clocks = threading.local()


@dataclass
class CompileClock:
    """Where one thread's kernel compiles went: seconds building IR in Python (and
    printing it as text), in LLVM parsing and verifying it, optimising, emitting machine
    code, in the kernel cache (lookups, disk reads and writes) and linking into the
    engine; and how many kernels were compiled, read from the disk cache or found in
    memory."""
    ir: float = 0.0
    parse: float = 0.0
    optimise: float = 0.0
    machine_code: float = 0.0
    cache: float = 0.0
    link: float = 0.0
    compiled: int = 0
    from_disk: int = 0
    from_memory: int = 0
    deferred: int = 0  # handed to a background worker (runtime/llvm/compile_service.py)

    @property
    def seconds(self) -> float:
        return self.ir + self.parse + self.optimise + self.machine_code + self.cache + \
            self.link

    def __sub__(self, earlier: "CompileClock") -> "CompileClock":
        return CompileClock(*(getattr(self, f.name) - getattr(earlier, f.name)
                              for f in fields(self)))

    def __add__(self, other: "CompileClock") -> "CompileClock":
        return CompileClock(*(getattr(self, f.name) + getattr(other, f.name)
                              for f in fields(self)))

    def describe(self) -> str:
        """One line, e.g. '2 compiled, 1 from disk, 0 in memory: IR 4.1 ms, ...'."""
        counts = (f"{self.compiled} compiled, {self.from_disk} from the disk cache, "
                  f"{self.from_memory} in memory")
        if self.deferred:
            counts += f", {self.deferred} handed to background compile workers"
        phases = ", ".join(f"{name.replace('_', ' ')} {getattr(self, name) * 1e3:.1f} ms"
                           for name in ("ir", "parse", "optimise", "machine_code", "cache",
                                        "link"))
        return f"{counts}: {phases}"


def compile_clock() -> CompileClock:
    """A copy of this thread's CompileClock (subtract two to time a span)."""
    return replace(_thread_clock())


def _thread_clock() -> CompileClock:
    clock = getattr(_clocks, "clock", None)
    if clock is None:
        clock = _clocks.clock = CompileClock()
    return clock


@contextmanager
def timing(phase: str):
    """Add the time the block takes to this thread's CompileClock under `phase` (the
    code generators time their IR building with it)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        clock = _thread_clock()
        setattr(clock, phase, getattr(clock, phase) + time.perf_counter() - start)


def compile_object(text: str, speed_level: int, machine: llvm.TargetMachine) -> Entry:
    """Object code for LLVM IR `text`: parsed into an LLVM context of its own, verified,
    optimised at `speed_level` and emitted by `machine` (this process's kernels, and the
    background workers' of runtime/llvm/compile_worker.py)."""
    import llvmlite.binding as llvm
    context = llvm.create_context()
    try:
        with timing("parse"):
            parsed = llvm.parse_assembly(text, context=context)
            parsed.verify()
        try:
            with timing("optimise"):
                run_pipeline(parsed, machine, speed_level=speed_level)
            with timing("machine_code"):
                return Entry(_defined_functions(parsed), machine.emit_object(parsed))
        finally:
            parsed.close()  # now, not whenever the garbage collector gets to it
    finally:
        context.close()


def _defined_functions(module: llvm.ModuleRef) -> tuple[str, ...]:
    """Names of the functions `module` defines and exports."""
    import llvmlite.binding as llvm
    return tuple(fn.name for fn in module.functions
                 if not fn.is_declaration and fn.linkage == llvm.Linkage.external)


def compile_job(job, machines: dict) -> Entry:
    """`job`'s object code, compiled with the TargetMachine for its target in `machines`
    (made there on first use; a TargetMachine is for one thread at a time)."""
    machine = machines.get((job.cpu, job.features))
    if machine is None:
        target = CpuTarget(job.cpu, job.features, frozenset())
        machine = machines[(job.cpu, job.features)] = target.machine()
    return compile_object(_text(job, machine), job.speed_level, machine)


def _text(job, machine) -> str:
    """The job's LLVM IR: its text, or built here into a module of its name, triple and
    data layout (`machine`'s where the job names none), as the host JIT's new_module
    makes."""
    if isinstance(job.source, str):
        return job.source
    import llvmlite.ir as ir
    name, build = job.source
    for setup in job.setup:
        importlib.import_module(setup)
    with timing("ir"):
        module = ir.Module(name=name)
        module.triple = job.triple
        module.data_layout = job.data_layout or str(machine.target_data)
        build(module)
        return str(module)
