"""The CPU the host JIT generates code for: this machine's, or the one named by
`KILN_CPU` and `KILN_CPU_FEATURES`, so that one machine can generate and run the code a
narrower one would get:

    KILN_CPU=haswell python -m pytest tests/compiler/test_vmath.py    # AVX2: 8 lanes
    KILN_CPU_FEATURES=-avx512f python -m benchmarks --quick           # this CPU, no AVX-512

`KILN_CPU` is an LLVM CPU name (haswell, skylake-avx512, znver3, x86-64-v3, ...; an
unknown one is an error naming it). `KILN_CPU_FEATURES` is a comma-separated list of LLVM
features to add (`+name`) or remove (`-name`), applied after the CPU's own: to the named
CPU, or to this machine's when `KILN_CPU` is unset. Both are read once, when the target is
first needed (the engine built for it lives as long as the process). A forced target must
run here: one needing a feature this CPU lacks is refused, naming the features.

llvmlite has no query for the features an LLVM CPU name implies, but LLVM's inliner knows
them: it inlines a callee into a caller only when the callee's features are a subset of
the caller's. So a callee compiled with `+f` is inlined into a caller of the target
exactly when the target already has `f` (`_enabled_features`). The features the X86
inliner ignores (64bit, cx16, sahf) read as present for every target.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm
import llvmlite.ir as ir

from runtime.llvm_ir import I32, VOID, define, i32
from runtime.llvm_passes import run_pipeline


class CpuTargetError(ValueError):
    """KILN_CPU / KILN_CPU_FEATURES name something LLVM does not know, or a target this
    machine cannot run."""


@dataclass(frozen=True)
class CpuTarget:
    """What the host JIT compiles for: LLVM's CPU name, the feature string given to LLVM
    with it, the features that leaves enabled, and the features forced on top of the CPU
    ('' when none: part of the target's name)."""
    cpu: str
    features: str
    enabled: frozenset[str]
    forced: str = ""

    @property
    def name(self) -> str:
        """'znver4', 'haswell', 'znver4,-avx512f': the CPU and any forced features."""
        return ",".join(part for part in (self.cpu, self.forced) if part)

    @property
    def vector_width(self) -> int:
        """float32 lanes of the widest vector register worth using: 16 with AVX-512, 8 with
        AVX2 (or AVX), 4 otherwise."""
        if "avx512f" in self.enabled:
            return 16
        if "avx2" in self.enabled or "avx" in self.enabled:
            return 8
        return 4

    def machine(self) -> llvm.TargetMachine:
        """A new TargetMachine for this target at opt level 3. Position-independent objects
        (the disk cache loads them back) with the small code model: with the default
        (large) one, constants are reached through GOT entries, and a module that itself
        calls a library function (memset) shifted every later module's constant addresses
        by 8 bytes."""
        return llvm.Target.from_default_triple().create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, reloc="pic", codemodel="small")


def _initialise() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()  # inline assembly (runtime.pool's syscalls)


@functools.cache
def host() -> CpuTarget:
    """This machine's CPU with every feature it has."""
    _initialise()
    features = llvm.get_host_cpu_features()
    return CpuTarget(llvm.get_host_cpu_name(), features.flatten(),
                     frozenset(name for name, on in features.items() if on))


@functools.cache
def named(cpu: str | None, forced: str = "") -> CpuTarget:
    """The target for LLVM CPU `cpu` (this machine's when None) with `forced` features
    (`+name`/`-name`, comma-separated) on top; CpuTargetError for a name LLVM does not
    know. Whether this machine can run it is `require_runnable`'s question."""
    _initialise()
    forced = ",".join(part.strip() for part in forced.split(",") if part.strip())
    for part in filter(None, forced.split(",")):
        if part[0] not in "+-" or len(part) == 1:
            raise CpuTargetError(f"KILN_CPU_FEATURES item {part!r} must be +name or -name")
    base = host() if cpu is None else CpuTarget(cpu, "", frozenset())
    features = ",".join(part for part in (base.features, forced) if part)
    target = CpuTarget(base.cpu, features, frozenset(), forced)
    with _stderr_of_llvm() as warnings:
        machine = target.machine()
    _refuse_unknown_names("".join(warnings), cpu, forced)
    return CpuTarget(target.cpu, features, _enabled_features(machine, features), forced)


def require_runnable(target: CpuTarget, here: CpuTarget) -> None:
    """CpuTargetError naming the features `target` needs that the machine `here` lacks."""
    missing = sorted(target.enabled - here.enabled)
    if missing:
        removal = ",".join("-" + name for name in missing)
        raise CpuTargetError(
            f"this CPU ({here.cpu}) cannot run code for {target.name}: it lacks "
            f"{', '.join(missing)}; remove them with KILN_CPU_FEATURES={removal} or name "
            f"an older CPU in KILN_CPU")


@functools.cache
def selected() -> CpuTarget:
    """The target KILN_CPU and KILN_CPU_FEATURES ask for (checked to run here), or this
    machine's when both are unset or empty. Read once per process."""
    cpu = os.environ.get("KILN_CPU", "").strip() or None
    forced = os.environ.get("KILN_CPU_FEATURES", "").strip()
    if cpu is None and not forced:
        return host()
    target = named(cpu, forced)
    require_runnable(target, host())
    return target


_UNKNOWN = re.compile(r"'([^']*)' is not a recognized (processor|feature) for this target")


def _refuse_unknown_names(warnings: str, cpu: str | None, forced: str) -> None:
    """LLVM only warns about an unknown CPU or feature and carries on with a generic one
    (whose code generation can then abort the process): raise instead."""
    for name, kind in _UNKNOWN.findall(warnings):
        if kind == "processor":
            raise CpuTargetError(f"KILN_CPU={cpu}: LLVM knows no CPU named {name!r} "
                                 f"(this machine's is {host().cpu!r})")
        raise CpuTargetError(f"KILN_CPU_FEATURES={forced}: LLVM knows no feature "
                             f"named {name[1:]!r}")


_moving_stderr = threading.Lock()  # one thread at a time points file descriptor 2 elsewhere


@contextlib.contextmanager
def _stderr_of_llvm():
    """Yields a list that receives what is written to file descriptor 2 inside the block
    (LLVM's warnings go there, not to sys.stderr); anything but LLVM's warnings about
    unknown names is passed on to stderr."""
    sys.stderr.flush()
    captured: list[str] = []
    with _moving_stderr, tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))
    lines = captured[0].splitlines(keepends=True)
    sys.stderr.write("".join(line for line in lines if not _UNKNOWN.search(line)))


def _enabled_features(machine: llvm.TargetMachine, features: str) -> frozenset[str]:
    """The features of this machine's LLVM feature list that `machine` (compiling with
    `features`) has, read through the inliner (see the module's docstring)."""
    universe = sorted(llvm.get_host_cpu_features())
    module = ir.Module("kiln.target_probe")
    module.triple = llvm.get_process_triple()
    sink = ir.GlobalVariable(module, I32, "kiln.target_probe.sink")
    sink.initializer = i32(0)
    void = ir.FunctionType(VOID, [])
    for index in range(len(universe)):
        callee, b = define(module, f"kiln.has.{index}", void, linkage="internal",
                           attributes=())
        b.store(i32(index), sink)  # a side effect: the call stays
        b.ret_void()
        caller, b = define(module, f"kiln.probe.{index}", void, attributes=())
        b.call(callee, [])
        b.ret_void()
    text = str(module)
    for index, feature in enumerate(universe):
        # llvmlite's FunctionAttributes cannot hold a "key"="value" attribute
        wanted = ",".join(part for part in (features, "+" + feature) if part)
        head = f'define internal void @"kiln.has.{index}"()\n'
        text = text.replace(head, f'{head[:-1]} "target-features"="{wanted}"\n')
    parsed = llvm.parse_assembly(text)
    run_pipeline(parsed, machine, speed_level=1)
    return frozenset(feature for index, feature in enumerate(universe)
                     if "call" not in str(parsed.get_function(f"kiln.probe.{index}")))
