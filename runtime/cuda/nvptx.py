"""LLVM IR to PTX through llvmlite's NVPTX backend, and ptxas's report on the result.

    TRIPLE          nvptx64-nvidia-cuda, the triple a CUDA kernel module carries
    new_module      an ir.Module for NVPTX (triple and data layout set)
    kernel          define a kernel: ptx_kernel calling convention, optional launch bound
    compile_ptx     module (ir.Module or IR text) -> PTX text, after LLVM's O3 for `arch`
    cached_ptx      the same through the kernel cache (runtime/llvm/cache.py): from memory, from
                    disk (keyed by the IR text, the architecture, kiln's, llvmlite's and
                    LLVM's versions), else compiled and written there
    ptx_cache       the process's PTX cache (its stats count compiles as misses)
    ptxas_report    what `ptxas -arch=<arch> -v` says of the PTX (registers, spills,
                    shared memory), or PtxasMissing naming why it cannot be asked;
                    remembered per text
    record_sources  from now on, compile_ptx remembers the ir.Module behind each PTX
    remember_source that `ptx` came from `module` (where sources are recorded)
    source_of       the ir.Module a PTX text was compiled from, or None

No CUDA toolkit is needed at run time: llvmlite emits PTX and the driver assembles it
(runtime/cuda/driver.py). ptxas is used only to check and report, where it is installed.
PTX cannot run on the host, so the emulated device (runtime/cuda/emulated.py) runs the
IR a PTX text came from: compile_ptx remembers it (the newest 1024 ir.Modules; a module
given as IR text is not remembered) once an emulated driver was made, or whenever
KILN_CUDA=emulate is set; otherwise nothing is kept, so a process with a GPU holds no
modules alive.
Facts this module follows (shared/NOTES-codegen.md): llvm.exp/log on f32 abort NVPTX
("no libcall available"), so kernels use kiln's own polynomials; FMA needs `contract`.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass

import llvmlite
import llvmlite.binding as llvm
import llvmlite.ir as ir

from runtime.llvm.cache import Entry, KernelCache, kernel_key, kiln_version
from runtime.llvm.cache_trust import PTX_ENTRY, ptx_problem
from runtime.llvm.passes import run_pipeline

TRIPLE = "nvptx64-nvidia-cuda"
DATA_LAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
DEFAULT_ARCH = "sm_90"
PTX_FORMAT = "kiln-ptx-1"  # the kernel cache's name for what a PTX entry holds
_PTX_FEATURE = {"sm_70": "+ptx60", "sm_75": "+ptx63", "sm_80": "+ptx70", "sm_86": "+ptx71",
                "sm_89": "+ptx78", "sm_90": "+ptx80"}
_lock = threading.Lock()
_SOURCES_KEPT = 1024
_sources: OrderedDict = OrderedDict()  # PTX text -> ir.Module, least recently used first
_recording = False


class PtxasMissing(RuntimeError):
    """ptxas cannot be run here (not installed); the message says so."""


class PtxasError(RuntimeError):
    """ptxas refused the PTX; the message holds its output."""


def new_module(name: str = "kiln_cuda") -> ir.Module:
    """An empty module for NVPTX."""
    module = ir.Module(name=name)
    module.triple = TRIPLE
    module.data_layout = DATA_LAYOUT
    return module


def kernel(module: ir.Module, name: str, arg_types: list, arg_names=(),
           max_threads: int | None = None) -> tuple:
    """(function, builder at its entry) for a kernel `name`(arg_types) returning void;
    `max_threads` becomes the nvvm.maxntid launch bound when given."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), arg_types), name)
    fn.calling_convention = "ptx_kernel"
    for arg, arg_name in zip(fn.args, arg_names):
        arg.name = arg_name
    if max_threads is not None:  # LLVM upgrades the annotation to nvvm.maxntid
        module.add_named_metadata("nvvm.annotations",
                                  [fn, "maxntidx", ir.IntType(32)(int(max_threads))])
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def arch_feature(arch: str) -> str:
    """The PTX ISA feature LLVM needs for `arch` (sm_80 -> +ptx70); ValueError for an
    architecture kiln does not target."""
    try:
        return _PTX_FEATURE[arch]
    except KeyError:
        raise ValueError(f"kiln does not generate code for CUDA architecture {arch!r}; "
                         f"it knows {', '.join(sorted(_PTX_FEATURE))}") from None


def arch_for(capability: tuple) -> str:
    """The architecture to generate for a GPU of compute `capability` (major, minor): the
    newest kiln targets that the GPU runs (the driver's JIT runs older PTX on newer
    GPUs: sm_90 code on sm_100). ValueError for a GPU older than every target."""
    major, minor = capability
    number = major * 10 + minor
    fitting = sorted((int(arch[3:]), arch) for arch in _PTX_FEATURE if int(arch[3:]) <= number)
    if not fitting:
        raise ValueError(f"kiln generates CUDA code for {min(_PTX_FEATURE)} and newer; this "
                         f"GPU has compute capability {major}.{minor}")
    return fitting[-1][1]





@functools.cache
def _machine(arch: str) -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=arch_feature(arch), opt=3)


def compile_ptx(module, arch: str = DEFAULT_ARCH) -> str:
    """The PTX for `module` (an ir.Module or its text), optimised at O3 for `arch`.
    The module is verified first: a malformed kernel is a RuntimeError naming LLVM's
    complaint, never a crash in the backend."""
    text = str(module)
    with _lock:
        machine = _machine(arch)
        try:
            parsed = llvm.parse_assembly(text)
            parsed.verify()
        except RuntimeError as error:
            raise RuntimeError(f"the CUDA kernel module is not valid LLVM IR: {error}") \
                from None
        parsed.triple = TRIPLE
        parsed.data_layout = str(machine.target_data)
        run_pipeline(parsed, machine, 3)
        ptx = machine.emit_assembly(parsed)
        _remember(ptx, module)
        return ptx


def _remember(ptx: str, module) -> None:
    """Keep `module` as the source of `ptx` where sources are recorded (call under
    _lock); a module given as IR text is not kept."""
    if isinstance(module, ir.Module) and (
            _recording or os.environ.get("KILN_CUDA") == "emulate"):
        _sources[ptx] = module
        _sources.move_to_end(ptx)
        if len(_sources) > _SOURCES_KEPT:
            _sources.popitem(last=False)


def record_sources() -> None:
    """Remember the ir.Module behind each PTX compile_ptx makes from now on (the
    emulated driver calls this when it is made)."""
    global _recording
    _recording = True


def source_of(ptx) -> ir.Module | None:
    """The ir.Module that `ptx` (text or bytes) was compiled from, if remembered."""
    text = ptx.decode(errors="replace") if isinstance(ptx, (bytes, bytearray)) else ptx
    with _lock:
        module = _sources.get(text.rstrip("\0"))
        if module is not None:
            _sources.move_to_end(text.rstrip("\0"))
        return module


@functools.cache
def ptx_cache() -> KernelCache:
    """The process's PTX cache: under $KILN_CACHE_DIR with the CPU kernels, each entry
    checked as PTX (cache_trust.ptx_problem) before it is used."""
    return KernelCache(check=ptx_problem)


def ptx_key(module, arch: str = DEFAULT_ARCH) -> str:
    """The kernel cache's key for the PTX of `module` (an ir.Module or its text)."""
    return kernel_key(str(module), triple=TRIPLE, cpu=arch, features=arch_feature(arch),
                      version=kiln_version(), kind=PTX_FORMAT,
                      llvm_version=f"llvmlite {llvmlite.__version__}, LLVM "
                                   + ".".join(map(str, llvm.llvm_version_info)))


def cached_ptx(module, arch: str = DEFAULT_ARCH, cache: KernelCache | None = None) -> str:
    """compile_ptx(module, arch) through `cache` (the process's when None): a module
    seen before, in this process or in one that wrote the same cache directory, is not
    compiled again. An ir.Module is remembered as its PTX's source (source_of) on a
    hit as on a compile."""
    cache = cache if cache is not None else ptx_cache()

    def build() -> Entry:
        ptx = compile_ptx(module, arch)
        return Entry(tuple(PTX_ENTRY.findall(ptx)), ptx.encode("ascii"))

    ptx = cache.get_or_build(ptx_key(module, arch), build,
                             lambda entry: entry.object_code.decode("ascii"))
    remember_source(ptx, module)
    return ptx


def remember_source(ptx: str, module) -> None:
    """Keep `module` as the source of `ptx` where sources are recorded: callers that keep
    a kernel's PTX themselves (CudaKernel) call it at each use, so a kernel whose PTX was
    made before an emulated driver existed still loads on one."""
    with _lock:
        _remember(ptx, module)


@dataclass(frozen=True)
class KernelReport:
    """ptxas's figures for one kernel."""
    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    stack_bytes: int


def ptxas_path() -> str | None:
    """ptxas on PATH or in the usual CUDA folders; None when there is none."""
    found = shutil.which("ptxas")
    if found:
        return found
    for folder in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        candidate = os.path.join(folder, "bin", "ptxas")
        if folder and os.access(candidate, os.X_OK):
            return candidate
    return None


_FUNCTION = re.compile(r"Compiling entry function '([^']+)'")
_REGISTERS = re.compile(r"Used (\d+) registers")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_STACK = re.compile(r"(\d+) bytes stack frame")
_SHARED = re.compile(r"(\d+) bytes smem")


def ptxas_report(ptx: str, arch: str = DEFAULT_ARCH) -> dict[str, KernelReport]:
    """Each kernel's registers, spills, shared memory and stack as `ptxas -v` reports
    them, by kernel name. PtxasMissing where ptxas is not installed, PtxasError (with
    ptxas's output) where it refuses the PTX. A text asked about before is answered from
    memory (a refusal is asked again)."""
    return dict(_ptxas_report(ptx, arch))


@functools.lru_cache(maxsize=1024)
def _ptxas_report(ptx: str, arch: str) -> dict[str, KernelReport]:
    tool = ptxas_path()
    if tool is None:
        raise PtxasMissing("ptxas was not found (install the CUDA toolkit or set "
                           "CUDA_HOME) so the PTX cannot be assembled here")
    with tempfile.TemporaryDirectory(prefix="kiln-ptxas-") as folder:
        source = os.path.join(folder, "kernel.ptx")
        with open(source, "w") as handle:
            handle.write(ptx)
        done = subprocess.run([tool, f"-arch={arch}", "-v", source, "-o",
                               os.path.join(folder, "kernel.cubin")],
                              capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise PtxasError(f"ptxas -arch={arch} refused the PTX:\n{output.strip()}")
    return _parse_report(output)


def _parse_report(output: str) -> dict[str, KernelReport]:
    reports, name, figures = {}, None, {}

    def close():
        if name is not None:
            reports[name] = KernelReport(name, figures.get("registers", 0),
                                         figures.get("spill_stores", 0),
                                         figures.get("spill_loads", 0),
                                         figures.get("shared", 0), figures.get("stack", 0))

    for line in output.splitlines():
        if (match := _FUNCTION.search(line)):
            close()
            name, figures = match.group(1), {}
        if (match := _REGISTERS.search(line)):
            figures["registers"] = int(match.group(1))
        if (match := _SHARED.search(line)):
            figures["shared"] = int(match.group(1))
        if (match := _SPILLS.search(line)):
            figures["spill_stores"], figures["spill_loads"] = map(int, match.groups())
        if (match := _STACK.search(line)):
            figures["stack"] = int(match.group(1))
    close()
    return reports
