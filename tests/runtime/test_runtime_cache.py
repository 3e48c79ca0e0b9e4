"""The kernel cache: memory and disk tiers, damaged entries, racing writers, the size cap,
clear/info and the CLI, and what the key depends on. Every test has its own
KILN_CACHE_DIR. What the cache refuses to trust is tested in test_runtime_cache_trust.py."""
import json
import os
import pwd
import re
import subprocess
import sys
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from runtime.llvm import cache, target
from runtime.llvm.jit import HostJit
import runtime_cache_worker as worker
from runtime_kernels import ADD_ONE, add_one_module, object_code, unique_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "kiln-cache"
    monkeypatch.setenv("KILN_CACHE_DIR", str(directory))
    monkeypatch.delenv("KILN_CACHE_MAX_BYTES", raising=False)
    return directory


@pytest.fixture(scope="module")
def jit():
    return HostJit()


@pytest.fixture(scope="module")
def cached_object(jit):
    """Object code of a real kernel: the cache checks what it holds is an ELF object."""
    return object_code(jit, add_one_module(jit, "cached"))


def run_add_one(address: int) -> np.ndarray:
    x = np.zeros(32, np.float32)
    ADD_ONE(address)(x.ctypes.data, 4, 20)
    return x


def expected() -> np.ndarray:
    x = np.zeros(32, np.float32)
    x[4:20] = 1
    return x


def entry_files(directory: Path) -> list[Path]:
    """The kernel entries in `directory` (not the target facts runtime/llvm/target.py keeps)."""
    return sorted(path for path in directory.glob("*" + cache.SUFFIX)
                  if path.name != f"{target.remembered_key()}{cache.SUFFIX}")


def test_second_load_in_a_process_is_a_memory_hit(jit, cache_dir):
    name = unique_name()
    before = jit.cache.stats.as_dict()
    first = jit.load(add_one_module(jit, name))
    again = jit.load(add_one_module(jit, name), [name])
    after = jit.cache.stats.as_dict()
    assert first == again and list(first) == [name]
    assert after["misses"] - before["misses"] == 1
    assert after["memory_hits"] - before["memory_hits"] == 1
    assert jit.address(name) == first[name]
    np.testing.assert_array_equal(run_add_one(first[name]), expected())
    assert [p.name for p in entry_files(cache_dir)] == [jit.cache_key(add_one_module(jit, name))
                                                        + cache.SUFFIX]


def test_a_fresh_engine_links_the_disk_entry(jit, cache_dir):
    name = unique_name()
    jit.load(add_one_module(jit, name))
    fresh = HostJit()
    address = fresh.load(add_one_module(fresh, name))[name]
    assert fresh.cache.stats.as_dict() | {"disk_hits": 0} == cache.CacheStats().as_dict()
    assert fresh.cache.stats.disk_hits == 1
    np.testing.assert_array_equal(run_add_one(address), expected())


def test_a_second_process_hits_the_disk_and_runs_no_llvm_optimisation(cache_dir):
    name = unique_name()
    first = worker.finish(worker.start("load", name, cache_dir=cache_dir))
    assert (first["misses"], first["disk_hits"]) == (1, 0)
    second = worker.finish(worker.start("load", name, "--no-llvm", cache_dir=cache_dir))
    assert (second["misses"], second["disk_hits"], second["rebuilt_corrupt"]) == (0, 1, 0)


def flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0x40])


DAMAGE = {
    "flipped object byte": flip_last_byte,
    "flipped magic": lambda data: b"X" + data[1:],
    "flipped hash": lambda data: data[:30] + bytes([data[30] ^ 1]) + data[31:],
    "truncated": lambda data: data[: len(data) // 2],
    "header only": lambda data: data[: cache.HEADER.size],
    "short header": lambda data: data[:10],
    "empty": lambda data: b"",
    "trailing bytes": lambda data: data + b"\0",
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_entry_is_detected(cached_object, damage):
    data = cache.encode("k", cache.Entry(("f", "g"), cached_object))
    assert cache.decode("k", data) == cache.Entry(("f", "g"), cached_object)
    with pytest.raises(cache.CorruptEntry):
        cache.decode("k", damage(data))


def test_an_entry_filed_under_another_key_is_not_loaded():
    data = cache.encode("k", cache.Entry(("f",), b"code"))
    with pytest.raises(cache.CorruptEntry, match="holds key 'k'"):
        cache.decode("other", data)


@pytest.mark.parametrize("damage", [flip_last_byte, DAMAGE["truncated"]],
                         ids=["flipped", "truncated"])
def test_a_damaged_entry_is_rebuilt_not_loaded(jit, cache_dir, damage):
    name = unique_name()
    jit.load(add_one_module(jit, name))
    [path] = entry_files(cache_dir)
    path.write_bytes(damage(path.read_bytes()))
    fresh = HostJit()
    address = fresh.load(add_one_module(fresh, name))[name]
    stats = fresh.cache.stats
    assert (stats.rebuilt_corrupt, stats.misses, stats.disk_hits) == (1, 1, 0)
    np.testing.assert_array_equal(run_add_one(address), expected())
    key = fresh.cache_key(add_one_module(fresh, name))
    assert cache.decode(key, path.read_bytes()).functions == (name,)


def test_an_entry_naming_a_function_its_object_lacks_is_rebuilt_and_replaced(jit, cache_dir):
    """Its hash recomputed, so only the ELF loader can tell: before, every run raised
    KeyError until the entry was removed."""
    name = unique_name()
    jit.load(add_one_module(jit, name))
    [path] = entry_files(cache_dir)
    key = jit.cache_key(add_one_module(jit, name))
    good = cache.decode(key, path.read_bytes())
    path.write_bytes(cache.encode(key, cache.Entry((name, "missing"), good.object_code)))
    fresh = HostJit()
    address = fresh.load(add_one_module(fresh, name), [name])[name]
    stats = fresh.cache.stats
    assert (stats.rebuilt_corrupt, stats.misses, stats.disk_hits) == (1, 1, 0)
    np.testing.assert_array_equal(run_add_one(address), expected())
    assert cache.decode(key, path.read_bytes()) == good and "engine" not in fresh.__dict__


def test_processes_racing_to_compile_one_kernel_leave_one_good_entry(cache_dir):
    name = unique_name()
    racers = [worker.start("load", name, cache_dir=cache_dir) for _ in range(4)]
    results = [worker.finish(process) for process in racers]
    assert all(r["misses"] + r["disk_hits"] == 1 and r["rebuilt_corrupt"] == 0
               for r in results)
    [path] = entry_files(cache_dir)
    assert [p.name for p in cache_dir.iterdir() if p.suffix != cache.SUFFIX] == []
    follower = worker.finish(worker.start("load", name, "--no-llvm", cache_dir=cache_dir))
    assert follower["disk_hits"] == 1


def test_readers_never_see_a_partly_written_entry(cache_dir):
    key = "racing"
    writers = [worker.start("write", key, "150", cache_dir=cache_dir) for _ in range(3)]
    store = cache.KernelCache()
    reads = 0
    while any(process.poll() is None for process in writers):
        if store.read(key) is not None:
            reads += 1
    assert all(worker.finish(process)["write_failures"] == 0 for process in writers)
    assert store.stats.rebuilt_corrupt == 0
    assert store.read(key) is not None and reads > 0
    assert [p.name for p in entry_files(cache_dir)] == [key + cache.SUFFIX]
    assert [p.name for p in cache_dir.iterdir() if p.suffix != cache.SUFFIX] == []


def test_the_size_cap_evicts_the_least_recently_used_entries(cache_dir, monkeypatch,
                                                             cached_object):
    entry = cache.Entry(("f",), cached_object)
    size = len(cache.encode("a" * 64, entry))
    monkeypatch.setenv("KILN_CACHE_MAX_BYTES", str(2 * size))
    store = cache.KernelCache()
    for age, key in enumerate(["a" * 64, "b" * 64]):
        store.write(key, entry)
        os.utime(store.path(key), (time.time() - 100 + age, time.time() - 100 + age))
    assert store.read("a" * 64) is not None  # a is now the most recently used
    stale = cache_dir / (cache.TMP_PREFIX + "dead-writer")
    stale.write_bytes(b"partial")
    os.utime(stale, (0, 0))
    store.write("c" * 64, entry)
    assert [p.name[0] for p in entry_files(cache_dir)] == ["a", "c"]
    assert store.stats.evictions == 1 and not stale.exists()
    monkeypatch.setenv("KILN_CACHE_MAX_BYTES", "1")
    store = cache.KernelCache()  # the cap is read when a cache is made
    store.write("d" * 64, entry)
    assert [p.name[0] for p in entry_files(cache_dir)] == ["d"]  # the newest always stays


def test_info_clear_and_the_command_line(cache_dir):
    store = cache.KernelCache()
    for key in ("a" * 64, "b" * 64):
        store.write(key, cache.Entry(("f",), bytes(500)))
    unrelated = cache_dir / "notes.txt"
    unrelated.write_text("not ours")
    now = cache.info()
    assert (now.directory, now.entries, now.max_bytes) == (cache_dir, 2, cache.DEFAULT_MAX_BYTES)
    assert now.bytes == sum(p.stat().st_size for p in entry_files(cache_dir))

    def cli(command):
        return subprocess.run([sys.executable, "-m", "runtime.llvm.cache", command], cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                              text=True, check=True).stdout

    shown = cli("info")
    assert f"directory: {cache_dir}" in shown and "entries:   2" in shown
    assert f"removed 2 entries ({now.bytes} bytes)" in cli("clear")
    assert cache.info().entries == 0 and unrelated.exists()
    assert cache.clear() == 0


def test_the_default_directory(monkeypatch):
    monkeypatch.delenv("KILN_CACHE_DIR")
    assert cache.cache_dir() == Path.home() / ".cache" / "kiln"


def no_passwd_entry(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")


def test_an_empty_home_is_no_home(monkeypatch):
    """Python takes HOME="" for /, which put the cache in /.cache/kiln."""
    monkeypatch.delenv("KILN_CACHE_DIR")
    monkeypatch.setenv("HOME", "")
    home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert cache.cache_dir() == home / ".cache" / "kiln"
    monkeypatch.setenv("KILN_CACHE_DIR", "~/kernels")
    assert cache.cache_dir() == home / "kernels"
    monkeypatch.setattr(pwd, "getpwuid", no_passwd_entry)
    assert cache.cache_dir() is None and cache.home_directory() is None
    monkeypatch.setenv("KILN_CACHE_DIR", "/elsewhere/kernels")
    assert cache.cache_dir() == Path("/elsewhere/kernels")


NO_HOME = """
import json, pwd, warnings

def no_passwd_entry(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")

pwd.getpwuid = no_passwd_entry
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import eager as torch
    from runtime.llvm.jit import host_jit
    from runtime.cpu.gemm import tune
    x = torch.arange(4096, dtype=torch.float32).reshape(64, 64) / 4096
    y = (x * 2 + 1).exp().sum(-1)
    product = torch.ones(256, 256) @ torch.ones(256, 256)
print(json.dumps({"warnings": [str(w.message) for w in caught], "y": y.tolist(),
                  "stats": host_jit().cache.stats.as_dict(), "product": product[0, 0].item(),
                  "blockings looked up": len(tune._chosen)}))
"""


def test_without_a_home_kernels_are_kept_in_memory_after_one_warning(tmp_path):
    """HOME unset and no passwd entry for the uid, as in some containers: eager's first
    compiled kernel raised 'Could not determine home directory'. kiln's GEMM looks for
    stored blockings (KILN_AUTOTUNE unset) in no file either."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("HOME", "KILN_CACHE_DIR", "KILN_AUTOTUNE")}
    done = subprocess.run([sys.executable, "-c", NO_HOME], cwd=tmp_path, capture_output=True,
                          text=True, env=env | {"PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    [warning] = result["warnings"]
    assert warning.startswith("kiln's kernel cache has no directory: HOME is unset or empty "
                              f"and uid {os.getuid()} has no passwd entry")
    assert "memory only" in warning
    assert result["stats"]["misses"] >= 1  # compiled natively, not interpreted
    assert result["product"] == 256 and result["blockings looked up"] == 1
    x = np.arange(4096, dtype=np.float64).reshape(64, 64) / 4096
    np.testing.assert_allclose(result["y"], np.exp(x * 2 + 1).sum(-1), rtol=1e-5)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["lots", "-1", "1.5e9"])
def test_a_bad_size_cap_fails_when_the_jit_is_made_before_anything_compiles(monkeypatch,
                                                                            value):
    monkeypatch.setenv("KILN_CACHE_MAX_BYTES", value)
    message = f"KILN_CACHE_MAX_BYTES must be a whole number of bytes.*{re.escape(repr(value))}"
    with pytest.raises(ValueError, match=message):
        HostJit()


def test_an_unwritable_cache_only_costs_a_rebuild(jit, cache_dir, monkeypatch):
    blocker = cache_dir.parent / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KILN_CACHE_DIR", str(blocker))
    name = unique_name()
    before = jit.cache.stats.write_failures
    address = jit.load(add_one_module(jit, name))[name]
    assert jit.cache.stats.write_failures == before + 1
    np.testing.assert_array_equal(run_add_one(address), expected())


def test_the_key_follows_target_and_versions(jit):
    target = dict(triple="x86_64-unknown-linux-gnu", cpu="znver4", features="+avx512f,+fma",
                  version="0.1.0", llvm_version="22.1.0")
    base = cache.kernel_key("define void @f() {ret void}", **target)
    changes = [("cpu", "skylake"), ("features", "+avx2,+fma"), ("version", "0.1.1"),
               ("triple", "aarch64-unknown-linux-gnu"), ("llvm_version", "21.0.0")]
    keys = {cache.kernel_key("define void @f() {ret void}", **target | {field: value})
            for field, value in changes}
    assert base not in keys and len(keys) == len(changes)
    assert cache.kernel_key("define void @g() {ret void}", **target) != base

    module = add_one_module(jit, "keyed")
    fresh = HostJit()
    assert fresh.cache_key(module) == jit.cache_key(module)
    fresh.features += ",-avx512f"
    assert fresh.cache_key(module) != jit.cache_key(module)


def test_kiln_version_is_the_project_version():
    with open(ROOT / "pyproject.toml", "rb") as f:
        assert cache.kiln_version() == tomllib.load(f)["project"]["version"]


def test_load_refuses_another_module_with_a_taken_name(jit):
    name = unique_name()
    jit.load(add_one_module(jit, name))
    other = add_one_module(jit, name)
    other.name = "another"
    with pytest.raises(ValueError, match=f"already has a function named '{name}'"):
        jit.load(other)
    with pytest.raises(KeyError, match="no function named 'missing'"):
        jit.load(add_one_module(jit, name), ["missing"])
    with pytest.raises(TypeError, match="collection of names"):
        jit.load(add_one_module(jit, name), name)


def test_a_cached_kernel_shows_its_optimised_ir_and_assembly(jit):
    name = unique_name()
    module = add_one_module(jit, name)
    jit.load(module)
    assert f"define void @{name}(" in str(jit.optimise(module))
    assert f"{name}:" in jit.assembly(module)


def test_a_module_calling_a_library_function_does_not_shift_later_constants(tmp_path,
                                                                            monkeypatch):
    """With the large code model, a module reaching memset through the GOT made every
    module loaded after it read its constants 8 bytes off (wrong sums, or a crash)."""
    import ctypes

    import llvmlite.ir as ir
    import numpy as np

    from runtime.llvm.jit import HostJit
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    jit = HostJit()
    i8p, i64 = ir.PointerType(ir.IntType(8)), ir.IntType(64)
    first = jit.new_module("uses_memset")
    fill = ir.Function(first, ir.FunctionType(ir.VoidType(), [i8p, i64]), "kiln_test_fill")
    memset = ir.Function(first, ir.FunctionType(i8p, [i8p, ir.IntType(32), i64]), "memset")
    b = ir.IRBuilder(fill.append_basic_block())
    b.call(memset, [fill.args[0], ir.Constant(ir.IntType(32), 0), fill.args[1]])
    b.ret_void()
    jit.load(first)
    second = jit.new_module("adds_constants")
    v16 = ir.VectorType(ir.IntType(32), 16)
    add = ir.Function(second, ir.FunctionType(ir.VoidType(), [ir.PointerType(v16)]),
                      "kiln_test_add_lanes")
    b = ir.IRBuilder(add.append_basic_block())
    ptr = add.args[0]
    # align=4: numpy's buffers are not 64-byte aligned
    b.store(b.add(b.load(ptr, align=4), ir.Constant(v16, list(range(100, 116)))), ptr,
            align=4)
    b.ret_void()
    address = jit.load(second)["kiln_test_add_lanes"]
    data = np.arange(16, dtype=np.int32)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)(data.ctypes.data)
    np.testing.assert_array_equal(data, np.arange(16) + np.arange(100, 116))


def test_threads_asking_for_one_key_at_once_build_it_once(cached_object):
    kernels, started, builds = cache.KernelCache(), threading.Event(), []

    def build() -> cache.Entry:
        builds.append(threading.get_ident())
        started.set()
        time.sleep(0.05)  # the others arrive while this one builds
        return cache.Entry(("f",), cached_object)

    with ThreadPoolExecutor(6) as pool:
        values = list(pool.map(lambda _: kernels.get_or_build("k" * 64, build, id), range(6)))
    assert len(builds) == 1 and len(set(values)) == 1
    assert kernels.stats.misses == 1 and kernels.stats.memory_hits == 5


def test_different_keys_build_at_once_in_different_threads(cached_object):
    """Both builds wait for each other: one lock for the whole cache would deadlock them
    (the barrier's timeout then fails the test)."""
    kernels, both = cache.KernelCache(), threading.Barrier(2, timeout=60)

    def build() -> cache.Entry:
        both.wait()
        return cache.Entry(("f",), cached_object)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda key: kernels.get_or_build(key, build, id), ["a" * 64, "b" * 64]))
    assert kernels.stats.misses == 2
