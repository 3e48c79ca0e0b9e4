"""The CPU the host JIT generates code for: this machine's, or the one named by
`KILN_CPU` and `KILN_CPU_FEATURES`, so that one machine can generate and run the code a
narrower one would get:

    KILN_CPU=haswell python -m pytest tests/runtime/cpu/test_vmath.py    # AVX2: 8 lanes
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
import hashlib
import importlib.util
import json
import os
import platform
import re
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import llvmlite  # its package only (~0.2 ms): llvmlite.binding is what loads LLVM

from runtime.llvm.passes import run_pipeline

if TYPE_CHECKING:
    import llvmlite.binding as llvm


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
        import llvmlite.binding as llvm
        _initialise()
        return llvm.Target.from_default_triple().create_target_machine(
            cpu=self.cpu, features=self.features, opt=3, reloc="pic", codemodel="small")


@functools.cache
def _initialise() -> None:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()  # inline assembly (runtime.pool's syscalls)


@functools.cache
def host() -> CpuTarget:
    """This machine's CPU with every feature it has."""
    import llvmlite.binding as llvm
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
    machine's when both are unset or empty. Read once per process, and remembered on
    disk for the next (see `_remembered`)."""
    target = _facts()["target"]
    return CpuTarget(target["cpu"], target["features"], frozenset(target["enabled"]),
                     target["forced"])


@functools.cache
def llvm_identity() -> tuple[str, str]:
    """(LLVM's process triple, LLVM's version 'major.minor.patch'), remembered on disk as
    `selected` is."""
    facts = _facts()
    return facts["triple"], facts["llvm_version"]


@functools.cache
def _facts() -> dict:
    """`_remembered()`, read once per process."""
    return _remembered()


def _select() -> CpuTarget:
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
    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    from runtime.llvm.toolkit import I32, VOID, define, i32
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


# Remembering the target ---------------------------------------------------------------
# Asking LLVM for the host CPU and its features means loading LLVM (~15 ms) and probing
# it (_enabled_features); a process whose kernels all come from the disk cache needs
# neither. So what `_measure` finds is kept in the kernel cache's directory, under the
# same trust rules (runtime/llvm/cache_trust.py), keyed by everything it follows from that
# can be read without LLVM (`_fingerprint`): the platform, KILN_CPU and
# KILN_CPU_FEATURES, the CPUs as /proc/cpuinfo describes them (vendor, family, model,
# stepping, flags), llvmlite's version and its LLVM library file (path, size, mtime),
# and this file's source. Any change there measures again.

REMEMBERED = "kiln-cpu-target-1"
CPUINFO_FIELDS = frozenset({"vendor_id", "cpu family", "model", "model name", "stepping",
                            "flags"})


def _remembered() -> dict:
    """{'target': CpuTarget's fields, 'triple': ..., 'llvm_version': ...}: from the disk
    cache when a process with the same fingerprint measured them, else measured now
    (and written for the next process)."""
    from runtime.llvm.cache import Entry, KernelCache
    key = remembered_key()
    if key is None:
        return _measure()
    cache = KernelCache(check=_facts_problem)
    entry = cache.read(key)
    if entry is not None:
        return json.loads(entry.object_code)
    facts = _measure()
    cache.write(key, Entry((), json.dumps(facts).encode()))
    return facts


def remembered_key() -> str | None:
    """The disk cache's key for this process's target facts (None where they are not
    remembered)."""
    from runtime.llvm.cache import kernel_key
    fingerprint = _fingerprint()
    if fingerprint is None:
        return None
    with open(__file__, "rb") as f:
        source = hashlib.sha256(f.read()).hexdigest()
    return kernel_key(fingerprint, triple="", cpu="", features="", version=source,
                      kind=REMEMBERED)


def _measure() -> dict:
    """What `_remembered` keeps, asked of LLVM."""
    import llvmlite.binding as llvm
    target = _select()
    return {"target": {**asdict(target), "enabled": sorted(target.enabled)},
            "triple": llvm.get_process_triple(),
            "llvm_version": ".".join(map(str, llvm.llvm_version_info))}


def _fingerprint() -> str | None:
    """Text naming everything `_measure`'s answer follows from (see above), or None where
    /proc/cpuinfo cannot be read (then LLVM is asked every time)."""
    try:
        with open("/proc/cpuinfo") as f:
            blocks = f.read().split("\n\n")
    except OSError:
        return None
    cpus = sorted({tuple(line for line in block.splitlines()
                         if line.split(":")[0].strip() in CPUINFO_FIELDS)
                   for block in blocks if block.strip()})
    binding = Path(importlib.util.find_spec("llvmlite").submodule_search_locations[0]) \
        / "binding"
    libraries = sorted((path.name, path.stat().st_size, path.stat().st_mtime_ns)
                       for path in binding.glob("*llvmlite*") if path.suffix != ".py")
    return json.dumps([sys.platform, platform.machine(), os.environ.get("KILN_CPU", ""),
                       os.environ.get("KILN_CPU_FEATURES", ""), llvmlite.__version__,
                       str(binding), libraries, cpus])


def _facts_problem(data: bytes) -> str | None:
    """Why `data` is not what `_measure` writes, or None."""
    try:
        facts = json.loads(data)
        target = facts["target"]
        strings = [target["cpu"], target["features"], target["forced"], facts["triple"],
                   facts["llvm_version"], *target["enabled"]]
    except (ValueError, KeyError, TypeError) as error:
        return f"unreadable target facts: {error!r}"
    if not all(isinstance(s, str) for s in strings) or not isinstance(target["enabled"], list):
        return "target facts of the wrong types"
    return None
