"""CUDA kernels' PTX in the kernel cache (runtime/cuda/nvptx.py cached_ptx, runtime/llvm/cache.py
with cache_trust.ptx_problem): a fresh cache over the same directory, or another
process, gets the PTX from disk without compiling; entries follow the CPU entries'
trust rules, and an entry that is damaged, is not PTX, or is not this user's alone is
compiled again, never used. Compiles are counted by wrapping nvptx.compile_ptx."""
import json
import os
import subprocess
import sys
from pathlib import Path

import llvmlite
import pytest

from runtime.cuda.codegen import CudaKernel
from runtime.llvm import cache
from runtime.cuda import nvptx
from runtime.llvm.cache_trust import ptx_problem
from runtime.llvm.toolkit import I64, Target, at, for_range

ROOT = Path(__file__).parents[2]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "kiln-cache"
    directory.mkdir(mode=0o700)
    monkeypatch.setenv("KILN_CACHE_DIR", str(directory))
    return directory


@pytest.fixture
def compiles(monkeypatch):
    """The number of PTX compiles since the test began (a one-element list)."""
    count, compile_ptx = [0], nvptx.compile_ptx

    def counted(module, arch=nvptx.DEFAULT_ARCH):
        count[0] += 1
        return compile_ptx(module, arch)

    monkeypatch.setattr(nvptx, "compile_ptx", counted)
    return count


def _module(name="kiln_test_double"):
    """out[i] = 2 * x[i] for i < n, as a grid-stride kernel."""
    import llvmlite.ir as ir
    module = nvptx.new_module(name)
    pointer = ir.PointerType(ir.FloatType(), 1)
    fn, b = nvptx.kernel(module, name, [pointer, pointer, I64], ["x", "out", "n"])
    x, out, n = fn.args
    start, step = Target.of(module).grid_stride(b)
    with for_range(b, start, n, step) as i:
        value = b.load(at(b, x, i))
        b.store(b.fadd(value, value), at(b, out, i))
    b.ret_void()
    return module


def _ptx_cache(directory):
    return cache.KernelCache(directory, check=ptx_problem)


def _entry(directory, module, arch="sm_90"):
    return directory / (nvptx.ptx_key(module, arch) + cache.SUFFIX)


def test_a_fresh_cache_over_the_same_directory_reads_the_ptx_without_compiling(
        cache_dir, compiles):
    module = _module()
    first = nvptx.cached_ptx(module, "sm_90", _ptx_cache(cache_dir))
    assert compiles[0] == 1 and ".entry kiln_test_double" in first
    fresh = _ptx_cache(cache_dir)
    assert nvptx.cached_ptx(module, "sm_90", fresh) == first
    assert compiles[0] == 1 and fresh.stats.disk_hits == 1 and fresh.stats.misses == 0
    assert nvptx.cached_ptx(str(module), "sm_90", fresh) == first  # IR text, same key
    assert fresh.stats.memory_hits == 1


def test_another_process_reads_the_ptx_from_disk_without_compiling(cache_dir, tmp_path):
    module = _module()
    ptx = nvptx.cached_ptx(module, "sm_80", _ptx_cache(cache_dir))
    (tmp_path / "kernel.ll").write_text(str(module))
    script = ("import json, sys\nfrom runtime.cuda import nvptx\n"
              "ptx = nvptx.cached_ptx(open(sys.argv[1]).read(), 'sm_80')\n"
              "stats = nvptx.ptx_cache().stats\n"
              "print(json.dumps([stats.misses, stats.disk_hits, ptx]))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "kernel.ll")],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    misses, disk_hits, read = json.loads(done.stdout)
    assert (misses, disk_hits) == (0, 1) and read == ptx


def test_cuda_kernels_take_their_ptx_through_the_cache(cache_dir, compiles):
    module = _module("kiln_test_through_kernel")
    ptx = CudaKernel(module, "kiln_test_through_kernel", (32, 1, 1)).ptx("sm_86")
    again = CudaKernel(_module("kiln_test_through_kernel"), "kiln_test_through_kernel",
                       (32, 1, 1))
    assert again.ptx("sm_86") == ptx and compiles[0] == 1
    assert _entry(cache_dir, module, "sm_86").exists()


def test_the_key_holds_the_architecture_and_llvmlites_version(monkeypatch):
    text = str(_module())
    assert nvptx.ptx_key(text, "sm_80") != nvptx.ptx_key(text, "sm_90")
    before = nvptx.ptx_key(text)
    monkeypatch.setattr(llvmlite, "__version__", "0.0.0")
    assert nvptx.ptx_key(text) != before


def _spoil_byte(path):
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x20  # one byte of the PTX near its end
    path.write_bytes(bytes(data))


def _forge(path, key, payload: bytes):
    """An entry for `key` with a valid header and hash over `payload`."""
    path.write_bytes(cache.encode(key, cache.Entry(("kiln_test_double",), payload)))
    os.chmod(path, 0o600)


@pytest.mark.parametrize("tamper", ["a changed byte", "valid hash, not PTX",
                                    "valid hash, no kernel", "valid hash, binary"])
def test_a_tampered_entry_is_compiled_again_and_rewritten_never_used(cache_dir, compiles,
                                                                      tamper):
    module = _module()
    good = nvptx.cached_ptx(module, "sm_90", _ptx_cache(cache_dir))
    path, key = _entry(cache_dir, module), nvptx.ptx_key(module)
    if tamper == "a changed byte":
        _spoil_byte(path)
    elif tamper == "valid hash, not PTX":
        _forge(path, key, b"rm -rf ~\n")
    elif tamper == "valid hash, no kernel":
        _forge(path, key, good.replace(".entry", ".func").encode())
    else:
        _forge(path, key, b"\x7fELF\x02\x01\x01" + bytes(range(256)))
    fresh = _ptx_cache(cache_dir)
    assert nvptx.cached_ptx(module, "sm_90", fresh) == good
    assert compiles[0] == 2 and fresh.stats.rebuilt_corrupt == 1
    assert cache.decode(key, path.read_bytes(), ptx_problem).object_code == good.encode()


def test_an_entry_others_can_write_is_refused_and_compiled_again(cache_dir, compiles):
    module = _module()
    good = nvptx.cached_ptx(module, "sm_90", _ptx_cache(cache_dir))
    os.chmod(_entry(cache_dir, module), 0o666)
    fresh = _ptx_cache(cache_dir)
    with pytest.warns(RuntimeWarning, match="writable by group or others"):
        assert nvptx.cached_ptx(module, "sm_90", fresh) == good
    assert compiles[0] == 2 and fresh.stats.refused == 1


def test_a_directory_others_can_write_is_neither_read_nor_written(tmp_path, compiles):
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, 0o777)
    with pytest.warns(RuntimeWarning, match="in memory only"):
        nvptx.cached_ptx(_module(), "sm_90", _ptx_cache(directory))
    assert list(directory.iterdir()) == []


def test_ptx_and_cpu_entries_refuse_each_other():
    ptx = nvptx.compile_ptx(_module()).encode()
    assert ptx_problem(ptx) is None
    with pytest.raises(cache.CorruptEntry, match="not ELF"):
        cache.decode("k", cache.encode("k", cache.Entry(("f",), ptx)))
    assert "defines no kernel" in ptx_problem(ptx.replace(b".entry", b".func"))
    assert "NUL" in ptx_problem(ptx + b"\0")
    assert "not ASCII" in ptx_problem("// é\n".encode() + ptx)


def test_ptx_read_from_disk_still_names_its_module_for_the_emulated_device(
        cache_dir, compiles, monkeypatch):
    monkeypatch.setattr(nvptx, "_recording", True)
    monkeypatch.setattr(nvptx, "_sources", type(nvptx._sources)())
    nvptx.cached_ptx(_module(), "sm_90", _ptx_cache(cache_dir))
    module = _module()
    ptx = nvptx.cached_ptx(module, "sm_90", _ptx_cache(cache_dir))
    assert compiles[0] == 1 and nvptx.source_of(ptx) is module
