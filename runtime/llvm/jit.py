"""The host JIT: one long-lived llvmlite MCJIT engine that compiles LLVM modules for
this CPU (or the one KILN_CPU names: runtime/llvm/target.py) and hands back the addresses of
their functions.

MCJIT never frees code and owns its TargetMachine, so there is one engine per process
(`host_jit()`), object code is added to it, and it lives as long as the process: any
ctypes pointer into its code stays valid. Every module is verified before it is
optimised, because bad IR can abort the whole process instead of raising.

A module is optimised, emitted as object code by the engine's TargetMachine and freed;
only the object code goes into the engine (the path a disk-cache hit takes), so what a
compile leaves behind is close to its machine code. No IR or assembly text is kept.

`load` goes through the kernel cache (runtime/llvm/cache.py): a kernel compiled once, in this
process or an earlier one, is not optimised again, only its object code is linked in.
`load_spec` keys a kernel by its spec (text naming everything its IR depends on) and
`generator_version()` (a hash of the code generators' source) instead of by IR text, so
a cache hit builds no IR at all; a change to any generator's source misses.

Compiles may run in several threads (in_parallel): each parses into an LLVM context of
its own and optimises and emits with its thread's TargetMachine. They do not overlap,
though: llvmlite takes one process-wide lock around every call into LLVM
(llvmlite.binding.ffi._LLVMLock), so two threads' compiles queue on it (measured: the
char transformer's 47 kernels 1.33 s one after another and on 2 threads; 3.3x slower
beside a thread running Python, which must win the GIL back after each LLVM call).
Overlapping compiles would need another process.
The optimised IR and assembly of a cached kernel are not stored; `optimise` and
`assembly` recompute them from the IR on demand (LLVM is deterministic for one target),
which costs only when someone is debugging.

Object code goes into this process through runtime/llvm/elf_loader.py (Linux on x86-64), not
MCJIT, so a kernel read from the disk cache needs no LLVM: importing this module imports
no llvmlite.binding, and LLVM is loaded (with the target machine and, where the loader
cannot take an object just compiled, the MCJIT engine) only when a kernel is compiled. A
disk entry the loader refuses is compiled again, never given to MCJIT (`_link`).
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Callable, Iterable

from ir.records import declaring_modules
from runtime.llvm import elf_loader
from runtime.llvm.cache import FORMAT, CorruptEntry, Entry, KernelCache, kernel_key
from runtime.llvm.compile import (CompileClock, _defined_functions, _thread_clock,  # noqa: F401
                                  compile_clock, compile_object, timing)
from runtime.llvm.passes import run_pipeline
from runtime.llvm.target import CpuTarget, llvm_identity, selected

if TYPE_CHECKING:
    import llvmlite.binding as llvm
    import llvmlite.ir as ir


_local = threading.local()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATORS = ("runtime/cpu", "runtime/llvm", "compiler/backends/native", "eager/backends/native",
              "eager/kernels", "ir/dtypes.py", "ir/records.py", "runtime/pool.py",
              "runtime/fastcall.py", "runtime/fastcall_ir.py")
"""The source that decides what IR a kernel spec becomes and how it is compiled: the CPU
code generators and what they call (eager's op records carry the pointwise emitters),
the IR toolkit, the pass pipeline, the builtins' entries (fastcall: the words a GEMM's
entry reads are numbered there). CUDA's generators are left out: PTX is keyed by its
IR text."""


@functools.cache
def generator_version() -> str:
    """Hex SHA-256 of every .py file under GENERATORS (paths and contents), read once per
    process (~2 ms): the version that spec-keyed cache entries carry."""
    digest = hashlib.sha256()
    for relative in GENERATORS:
        path = os.path.join(ROOT, relative)
        if os.path.isdir(path):
            found = sorted(os.path.join(folder, name)
                           for folder, folders, names in os.walk(path)
                           if "cuda" not in os.path.relpath(folder, path).split(os.sep)
                           for name in names if name.endswith(".py"))
        else:
            found = [path]
        for source in found:
            digest.update(os.path.relpath(source, ROOT).encode() + b"\0")
            with open(source, "rb") as f:
                digest.update(f.read() + b"\0")
    return digest.hexdigest()


class KernelPending(Exception):
    """Raised by a load inside `deferring()` for a kernel a background worker is
    compiling: the caller runs its fallback this time and asks again at its next call."""


def deferring_allowed() -> bool:
    """Whether this thread is inside `deferring()` and not inside `compiling_here()`."""
    return getattr(_local, "deferring", False) and not getattr(_local, "here", False)


def compiling_here():
    """Inside the block (in this thread), every kernel compiles in this thread before it
    runs, `deferring()` or not: for callers that need the kernels themselves
    (compiler.lower)."""
    return _thread_setting("here", True)


def deferring(allowed: bool = True):
    """Inside the block (in this thread), `load_spec` of a kernel that is neither in
    memory nor on disk builds its IR, hands it to a background compile worker
    (runtime/llvm/compile_service.py) and raises KernelPending instead of compiling it; once
    the worker is done, a later load links its object code. Without workers
    (KILN_COMPILE_WORKERS=0) kernels compile here as outside the block.
    `deferring(False)` turns it off for a block inside one."""
    return _thread_setting("deferring", allowed)


def deferring_call(fn: Callable, arg):
    """`fn(arg)` inside `deferring()`, without a context manager's ~1 us (a GEMM node
    makes every call through it)."""
    before = getattr(_local, "deferring", False)
    _local.deferring = True
    try:
        return fn(arg)
    finally:
        _local.deferring = before


@contextmanager
def _thread_setting(name: str, value: bool):
    before = getattr(_local, name, False)
    setattr(_local, name, value)
    try:
        yield
    finally:
        setattr(_local, name, before)


def in_parallel(compiles: list[Callable[[], object]]) -> list:
    """The results of `compiles` (functions that compile kernels), run at once in a thread
    each, their CompileClocks added to this thread's (so its seconds are thread seconds,
    more than the wall time they took). One compile runs here, without a thread."""
    if len(compiles) < 2:
        return [compile() for compile in compiles]

    deferred = getattr(_local, "deferring", False)
    here = getattr(_local, "here", False)

    def run(compile: Callable[[], object]):
        before = compile_clock()
        _local.here = here
        try:
            with deferring(deferred):
                return compile(), compile_clock() - before
        except BaseException as error:
            return error, compile_clock() - before
    from concurrent.futures import ThreadPoolExecutor  # ~3 ms, paid by parallel compiles only
    with ThreadPoolExecutor(len(compiles), thread_name_prefix="kiln-compile") as pool:
        done = list(pool.map(run, compiles))
    clock = _thread_clock()
    for _, spent in done:
        for field in fields(clock):
            setattr(clock, field.name, getattr(clock, field.name) + getattr(spent, field.name))
    for result, _ in done:
        if isinstance(result, BaseException):
            raise result
    return [result for result, _ in done]


def load_seconds() -> float:
    """Time this thread has spent compiling and loading kernels, IR building included."""
    return _thread_clock().seconds


def vector_width() -> int:
    """float32 lanes of the widest vector register of the target: 16 with AVX-512, 8 with
    AVX2 (or AVX), 4 otherwise."""
    return selected().vector_width


class HostJit:
    """One MCJIT engine for `target` (default: the selected one) at opt level 3. Use
    `host_jit()` to get the process's engine.

    Code is position independent (reloc='pic') so that object code emitted in one process
    can be linked into another's engine wherever it lands."""

    def __init__(self, cache: KernelCache | None = None, target: CpuTarget | None = None):
        self.target = target if target is not None else selected()
        self.cpu_name = self.target.cpu
        self.features = self.target.features
        self.triple, self.llvm_version = llvm_identity()
        self.loader = elf_loader.Loader()
        self.cache: KernelCache[dict[str, int]] = cache if cache is not None else KernelCache()
        self._lock = threading.RLock()
        self._machines = threading.local()

    @functools.cached_property
    def target_machine(self) -> llvm.TargetMachine:
        """The TargetMachine for IR building (data layout) and dumps; made on first use,
        loading LLVM."""
        return self.target.machine()

    @functools.cached_property
    def engine(self) -> llvm.ExecutionEngine:
        """The MCJIT engine, made the first time an object reaches it: where the ELF
        loader is not supported, or an object just compiled that it does not take."""
        import llvmlite.binding as llvm
        return llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.target.machine())

    def new_module(self, name: str) -> ir.Module:
        """An empty IR module with this host's triple and data layout."""
        import llvmlite.ir as ir
        module = ir.Module(name=name)
        module.triple = self.triple
        module.data_layout = str(self.target_machine.target_data)
        return module

    def optimise(self, module: ir.Module | str, speed_level: int = 3) -> llvm.ModuleRef:
        """`module` verified and optimised (O3 unless told), not added to the engine:
        str() of the result is the IR after optimisation, `assembly` of it the machine
        code."""
        import llvmlite.binding as llvm
        with timing("parse"):
            parsed = llvm.parse_assembly(str(module))
            parsed.verify()
        with timing("optimise"):
            run_pipeline(parsed, self.target_machine, speed_level=speed_level)
        return parsed

    def add(self, module: ir.Module | str) -> llvm.ModuleRef:
        """Verify, optimise (O3) and compile `module` into the engine, bypassing the
        cache; returns the optimised module, which the engine does not keep (for
        `assembly`). Function names are global to the engine: adding one twice is an
        error."""
        optimised = self.optimise(module)
        self._link(Entry(_defined_functions(optimised),
                         self.target_machine.emit_object(optimised)))
        return optimised

    def load(self, module: ir.Module | str, names: Iterable[str] | None = None
             ) -> dict[str, int]:
        """Compile `module` through the kernel cache and return {name: address} for
        `names` (default: every function it defines). Loading the same IR again returns
        the same addresses; a different module defining a name already in the engine is
        an error."""
        with timing("ir"):
            text = str(module)
        return self._through_cache(self.cache_key(text), lambda: text, names)

    def load_spec(self, name: str, spec: str, build: Callable[[ir.Module], None],
                  names: Iterable[str] | None = None, speed_level: int = 3
                  ) -> dict[str, int]:
        """As `load` for the module that `build` fills (a new module called `name`), but
        keyed by `spec` instead of the IR: `spec` must name everything the IR depends on
        besides the code generators' source (generator_version) and the target. A hit,
        in memory or on disk, calls no `build`. `speed_level` picks LLVM's pipeline
        (O1-O3) for kernels measured to lose nothing by a cheaper one. Inside
        `deferring()`, a `build` that pickles (an instance of a module-level class) is
        sent to the background worker, which builds the IR itself; any other is called
        here and its IR text sent."""
        def text() -> str:
            module = self.new_module(name)
            with timing("ir"):
                build(module)
                return str(module)
        key = self.cache_key(f"O{speed_level} {spec}", kind="kiln-cpu-spec-1")
        return self._through_cache(key, text, names, speed_level, (name, build))

    def _through_cache(self, key: str, text: Callable[[], str],
                       names: Iterable[str] | None, speed_level: int = 3,
                       source: tuple | None = None) -> dict[str, int]:
        if isinstance(names, str):
            raise TypeError(f"names is a collection of names; pass [{names!r}]")
        clock = _thread_clock()
        start, before = time.perf_counter(), replace(clock)
        build = self._build_in_background if deferring_allowed() else self._build_here
        pending = False
        try:
            addresses = self.cache.get_or_build(
                key, lambda: build(key, text, speed_level, source), self._link)
        except KernelPending:
            pending = True
            raise
        finally:
            spent = clock - before
            clock.cache += time.perf_counter() - start - spent.seconds
            if not (spent.compiled or pending):
                if spent.link:
                    clock.from_disk += 1
                else:
                    clock.from_memory += 1
        if names is None:
            return dict(addresses)
        missing = [name for name in names if name not in addresses]
        if missing:
            raise KeyError(f"the module defines no function named {missing[0]!r}")
        return {name: addresses[name] for name in names}

    def cache_key(self, module: ir.Module | str, kind: str = FORMAT) -> str:
        """The kernel cache's key for `module` (or a spec's text, with its `kind`)
        compiled by this engine."""
        return kernel_key(str(module), triple=self.triple, cpu=self.cpu_name,
                          features=self.features, version=generator_version(),
                          llvm_version=self.llvm_version, kind=kind)

    def address(self, name: str) -> int:
        """Address of a compiled function; raises KeyError if no added module defines it."""
        address = self.loader.symbols.get(name)
        if not address and "engine" in self.__dict__:
            address = self.engine.get_function_address(name)
        if not address:
            raise KeyError(f"no function named {name!r} has been compiled by the host JIT")
        return address

    def assembly(self, module: llvm.ModuleRef | ir.Module | str, speed_level: int = 3
                 ) -> str:
        """Machine assembly of an optimised module, or of IR (optimised first, at the
        level it was compiled with: the way to see what a cached kernel runs), for
        debugging dumps."""
        import llvmlite.binding as llvm
        if not isinstance(module, llvm.ModuleRef):
            module = self.optimise(module, speed_level)
        return self.target_machine.emit_assembly(module)

    def _build_here(self, key: str, text: Callable[[], str], speed_level: int,
                    source: tuple | None) -> Entry:
        return self._build(text(), speed_level)

    def _build_in_background(self, key: str, text: Callable[[], str], speed_level: int,
                             source: tuple | None) -> Entry:
        """The object code a background worker made for `key`; if it has not made it
        yet, KernelPending (after submitting the job, the first time: `source`, (name,
        build), where it pickles, else the IR `text()`). Without a service, or where the
        worker failed, it is compiled here."""
        from runtime.llvm.compile_service import Job, service
        workers = service()
        if workers is None:
            return self._build(text(), speed_level)
        if workers.inline:  # compiled and linked now; the caller runs interpreted once
            entry = self._build(text(), speed_level)
            self.cache.get_or_build(key, lambda: entry, self._link)  # (its lock is ours)
            workers.submitted += 1
            _thread_clock().deferred += 1
            raise KernelPending(key)
        if not workers.has(key):
            # no data layout: the worker takes its TargetMachine's (this process need not
            # load LLVM to hand a kernel out, ~15 ms)
            directory = self.cache.directory
            job = Job(key, source, speed_level, self.cpu_name, self.features, self.triple,
                      None, str(directory) if directory is not None else None,
                      declaring_modules())
            message = job.message() or job.with_source(text()).message()
            workers.submit(message, lambda done: self._deliver(key, done))
            _thread_clock().deferred += 1
        done = workers.result(key)
        if done is None:
            raise KernelPending(key)
        # delivered ones are in memory already (this is a race lost to the reader), or
        # the worker failed: compile here, raising LLVM's error where it is real
        return self._build(text(), speed_level)

    def _deliver(self, key: str, done) -> None:
        """A worker's object code for `key` linked (in the service's reader thread), so
        that the next load finds it in memory; read back from the disk cache, where the
        worker wrote it, or written there if the worker could not."""
        self.cache.get_or_build(key, lambda: Entry(done.functions, done.object_code),
                                self._link)

    def _build(self, text: str, speed_level: int = 3) -> Entry:
        """Object code for `text`, compiled with this thread's TargetMachine (in an LLVM
        context of its own)."""
        try:
            return compile_object(text, speed_level, self._thread_machine())
        finally:
            _thread_clock().compiled += 1

    def _thread_machine(self) -> llvm.TargetMachine:
        """This thread's TargetMachine for optimising and emitting (the engine keeps its
        own, and a TargetMachine is not for two threads at once)."""
        machine = getattr(self._machines, "machine", None)
        if machine is None:
            machine = self._machines.machine = self.target.machine()
        return machine

    def _link(self, entry: Entry) -> dict[str, int]:
        """{name: address} of `entry`'s functions, its object code linked by the ELF
        loader (by MCJIT where the loader does not run). MCJIT also takes object code
        this process has just compiled that the loader does not; never an entry from the
        disk cache: MCJIT crashes the process on a damaged object rather than refusing
        it, so a disk entry the loader refuses, or that names a function it lacks or
        one already taken, raises CorruptEntry and the cache compiles it again."""
        with self._lock, timing("link"):
            try:
                return self._link_checked(entry)
            except elf_loader.UnsupportedObject as refusal:
                if entry.from_disk:
                    raise CorruptEntry(f"the ELF loader refuses it: {refusal}") from None
                return self._link_in_engine(entry)
            except ValueError as taken:
                if entry.from_disk:
                    raise CorruptEntry(str(taken)) from None
                raise

    def _link_checked(self, entry: Entry) -> dict[str, int]:
        for name in entry.functions:
            if self._has(name):
                raise ValueError(f"the host JIT already has a function named {name!r}")
        if not elf_loader.supported():
            return self._link_in_engine(entry)
        addresses = self.loader.load(entry.object_code, entry.functions)
        return {name: addresses[name] for name in entry.functions}

    def _link_in_engine(self, entry: Entry) -> dict[str, int]:
        import llvmlite.binding as llvm
        for name, address in self.loader.symbols.items():
            llvm.add_symbol(name, address)  # the loader's functions, for MCJIT's linking
        self.engine.add_object_file(llvm.ObjectFileRef.from_data(entry.object_code))
        self.engine.finalize_object()
        addresses = {name: self.address(name) for name in entry.functions}
        self.loader.symbols.update(addresses)  # for the loader's linking
        return addresses

    def _has(self, name: str) -> bool:
        try:
            return bool(self.address(name))
        except KeyError:
            return False


_host: HostJit | None = None
_host_lock = threading.Lock()


def host_jit() -> HostJit:
    """The process's one host JIT engine, created on first use."""
    global _host
    with _host_lock:
        if _host is None:
            _host = HostJit()
        return _host
