"""What a first compile costs, counted rather than timed: no heavy import on its path, and
no IR built for kernels the disk cache holds."""
import os
import subprocess
import sys

FIRST_COMPILE = """
import sys
import numpy as np
import compiler, eager
x = eager.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
w = eager.tensor(np.ones((6, 5), dtype=np.float32))
def f(x, w):
    return eager.softmax((x @ w).relu() * 2, -1).sum() + x.tanh().mean()
cf = compiler.compile(f, backend="native")
cf(x, w)
assert cf.entries, "nothing was compiled"
print(sorted(m for m in ("networkx",) if m in sys.modules))
"""


def test_import_compiler_and_a_first_compile_do_not_import_networkx(tmp_path):
    out = subprocess.run([sys.executable, "-c", FIRST_COMPILE], capture_output=True,
                         text=True, env=dict(os.environ, KILN_CACHE_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_gemm_kernel_compiles_each_entry_when_first_used(monkeypatch):
    """The packed entry is built only for a product that needs it, and only the variant
    it needs (A read in place, deep K blocks: one micro-kernel of the full entry's four)."""
    import numpy as np

    from runtime.cpu.gemm import kernels
    from runtime.cpu.gemm.api import gemm
    from runtime.cpu.gemm.emit.kernel import EpilogueSpec
    monkeypatch.setattr(kernels, "_kernels", {})
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((9, 7)), rng.standard_normal((7, 11))
    np.testing.assert_allclose(gemm(a, b, threads=1, specialise=False), a @ b)
    kernel = kernels.kernel(np.float64, EpilogueSpec())
    assert kernel.compiled == ("direct",)
    a, b = rng.standard_normal((301, 203)), rng.standard_normal((203, 157))
    np.testing.assert_allclose(gemm(a, b, threads=1, specialise=False), a @ b)
    assert kernel.compiled == ("direct", "packed_a_in_place_deep")


SIX_OPS = """
import sys
import numpy as np
import eager
x, y = (eager.tensor(np.ones(8, dtype=np.float32)) for _ in range(2))
eager.compile(lambda x, y: (x * y + 1.0).tanh() * x - y.abs())(x, y)
print(sorted(m for m in ("importlib.metadata", "argparse", "tomllib", "networkx",
                         "runtime.cpu.gemm.api") if m in sys.modules))
"""


def test_a_first_pointwise_compile_imports_no_metadata_command_line_or_gemm(tmp_path):
    out = subprocess.run([sys.executable, "-c", SIX_OPS], capture_output=True, text=True,
                         env=dict(os.environ, KILN_CACHE_DIR=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


WARM_SIX_OPS = """
import sys
import numpy as np
import eager
x, y = (eager.tensor(np.linspace(-2, 2, 8, dtype=np.float32) + i) for i in range(2))
out = eager.compile(lambda x, y: (x * y + 1.0).tanh() * x - y.abs())(x, y).numpy()
a, b = x.numpy().astype(np.float64), y.numpy().astype(np.float64)
np.testing.assert_allclose(out, np.tanh(a * b + 1.0) * a - np.abs(b), rtol=1e-5, atol=1e-6)
from runtime.llvm import jit
print(jit.compile_clock().compiled, *sorted(m for m in sys.modules if m.startswith(
    ("llvmlite.binding", "llvmlite.ir", "runtime.cpu.kernel_ir", "runtime.pool"))))
"""


def test_a_first_call_served_by_the_disk_cache_loads_no_llvm_or_code_generator(tmp_path):
    """The second process finds its kernel and the target's facts on disk: it compiles
    nothing and imports neither llvmlite (its binding loads LLVM, its IR layer costs ~4
    ms) nor the code generators nor the thread pool, yet computes the same."""
    runs = [subprocess.run([sys.executable, "-c", WARM_SIX_OPS], capture_output=True,
                           text=True, env=dict(os.environ, KILN_CACHE_DIR=str(tmp_path)))
            for _ in range(2)]
    assert all(run.returncode == 0 for run in runs), runs[-1].stderr
    cold, warm = (run.stdout.split() for run in runs)
    assert cold[0] == "1" and {"llvmlite.binding", "llvmlite.ir"} <= set(cold)
    assert warm == ["0"]


def test_gemm_entries_compiled_in_parallel_threads_are_the_serial_ones_byte_for_byte(
        tmp_path):
    """Each way fills a disk cache of its own: the entries' object code is the same, and
    the calling thread's CompileClock counts both compiles either way."""
    from runtime.cpu.gemm.emit.kernel import EpilogueSpec
    from runtime.cpu.gemm.kernels import CompiledGemm, default_tile
    from runtime.llvm.cache import KernelCache
    from runtime.llvm.jit import HostJit, compile_clock, vector_width
    tile, entries = default_tile("float32", vector_width()), ["packed_a_in_place_shallow",
                                                            "pack_b"]
    cached = []
    for way in ("serial", "parallel"):
        kernel = CompiledGemm(tile, EpilogueSpec(activation="gelu"),
                              HostJit(KernelCache(tmp_path / way)))
        before = compile_clock()
        if way == "parallel":
            kernel.items.compile(entries)
        else:
            [kernel.items[entry] for entry in entries]
        assert (compile_clock() - before).compiled == 2 and set(kernel.compiled) == set(entries)
        cached.append({path.name: path.read_bytes() for path in (tmp_path / way).iterdir()})
    assert cached[0] == cached[1] and len(cached[0]) == 2


def _pipelines_and_a_jit(tmp_path, monkeypatch) -> tuple:
    """(the speed level of every LLVM pipeline run from now on, a HostJit caching in
    tmp_path)."""
    from runtime.llvm import compile, jit
    from runtime.llvm.cache import KernelCache
    levels, run_pipeline = [], jit.run_pipeline

    def spy(module, machine, speed_level):
        levels.append(speed_level)
        run_pipeline(module, machine, speed_level)

    monkeypatch.setattr(compile, "run_pipeline", spy)  # compiling
    monkeypatch.setattr(jit, "run_pipeline", spy)      # optimised IR and assembly, to read
    return levels, jit.HostJit(KernelCache(tmp_path))


def test_gemm_kernels_compile_with_their_measured_pipeline(tmp_path, monkeypatch):
    from runtime.cpu.gemm import config, small
    from runtime.cpu.gemm.emit.kernel import EpilogueSpec
    from runtime.cpu.gemm.kernels import CompiledGemm, default_tile
    from runtime.llvm import jit
    levels, host = _pipelines_and_a_jit(tmp_path, monkeypatch)
    CompiledGemm(default_tile("float64", jit.vector_width()), EpilogueSpec(), host
                 ).items["direct"]
    monkeypatch.setattr(jit, "host_jit", lambda: host)
    small._compile(small.SmallKey("float32", 5, 7, 3, (3, 1), (7, 1), 7))
    assert levels == [config.SPEED_LEVEL] * 2


def test_a_graphs_pointwise_kernels_compile_and_dump_with_their_measured_pipeline(
        tmp_path, monkeypatch):
    import numpy as np

    import compiler
    import eager
    from compiler.backends.native import pointwise
    from runtime.llvm import jit
    levels, host = _pipelines_and_a_jit(tmp_path, monkeypatch)
    monkeypatch.setattr(jit, "host_jit", lambda: host)
    x = eager.tensor(np.arange(11, dtype=np.float32))
    lowered = compiler.lower(lambda t: (t * 3.0 + 1.0).tanh(), x)
    (kernel,) = lowered.kernels
    assert kernel.name in kernel.optimised_ir and kernel.name in kernel.assembly
    assert levels == [pointwise.SPEED_LEVEL] * 3  # compiled, optimised IR, assembly
    assert pointwise.SPEED_LEVEL != 3


COUNT_COMPILES = """
import numpy as np
import eager
from runtime.llvm import jit
from runtime.llvm.jit import compile_clock
modules = []  # every IR module a kernel is built into
new_module = jit.HostJit.new_module
jit.HostJit.new_module = lambda self, name: modules.append(name) or new_module(self, name)
x = eager.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
w = eager.tensor(np.ones((4, 5), dtype=np.float32))
cf = eager.compile(lambda x, w: ((x @ w).relu() * 2).softmax(-1) + 1)
cf(x, w)
entry = next(iter(cf.entries.values()))
clock = compile_clock()
assert "kernels: " + entry.codegen.describe() in cf.explain()
print(clock.compiled, clock.from_disk, len(modules))
"""


def test_a_second_process_finds_every_kernel_in_the_disk_cache_and_builds_no_ir(tmp_path):
    def run() -> list[int]:
        out = subprocess.run([sys.executable, "-c", COUNT_COMPILES], capture_output=True,
                             text=True, env=dict(os.environ, KILN_CACHE_DIR=str(tmp_path)))
        assert out.returncode == 0, out.stderr
        return [int(n) for n in out.stdout.split()]
    compiled, from_disk, built = run()
    assert compiled > 0 and from_disk == 0 and built == compiled
    assert run() == [0, compiled, 0]
