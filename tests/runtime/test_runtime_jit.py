"""What a compile leaves in the host JIT: object code only, no LLVM module, and no pass
manager left behind (llvmlite 0.50 does not free one by itself); kernels keyed by spec
and the code generators' version; compiles in parallel threads."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from llvmlite.binding.newpassmanagers import NewPassManager

from runtime.llvm import jit as jit_module
from runtime.llvm.jit import HostJit
from runtime_kernels import ADD_ONE, add_one, add_one_module, unique_name


@pytest.fixture
def jit(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    return HostJit()


def test_add_and_load_give_the_engine_object_code_not_modules(jit, monkeypatch):
    def refuse(module):
        raise AssertionError("an LLVM module was handed to the engine")

    monkeypatch.setattr(jit.engine, "add_module", refuse)
    added, loaded = unique_name(), unique_name()
    optimised = jit.add(add_one_module(jit, added))
    optimised.close()  # the caller's to drop: the engine does not need it
    addresses = [jit.address(added), jit.load(add_one_module(jit, loaded))[loaded]]
    for address in addresses:
        x = np.zeros(8, np.float32)
        ADD_ONE(address)(x.ctypes.data, 2, 5)
        np.testing.assert_array_equal(x, [0, 0, 1, 1, 1, 0, 0, 0])


def test_each_optimisation_frees_its_pass_manager(jit, monkeypatch):
    freed, dispose = [], NewPassManager._dispose

    def spy(passes):
        freed.append(passes)
        dispose(passes)

    monkeypatch.setattr(NewPassManager, "_dispose", spy)
    jit.optimise(add_one_module(jit, unique_name()))
    jit.load(add_one_module(jit, unique_name()))
    assert len(freed) == 2 and all(passes.closed for passes in freed)


def _spec_kernel(jit, name: str, built: list) -> int:
    def build(module):
        built.append(name)
        add_one(module, name)
    return jit.load_spec(name, f"add_one {name}", build, [name])[name]


def _adds_one(address: int) -> None:
    x = np.zeros(4, np.float32)
    ADD_ONE(address)(x.ctypes.data, 1, 3)
    np.testing.assert_array_equal(x, [0, 1, 1, 0])


def test_a_spec_keyed_hit_in_memory_or_on_disk_builds_no_ir(jit):
    name, built = unique_name(), []
    address = _spec_kernel(jit, name, built)
    assert _spec_kernel(jit, name, built) == address and built == [name]
    other_process = HostJit()  # a new engine over the same disk cache
    _adds_one(_spec_kernel(other_process, name, built))
    assert built == [name] and other_process.cache.stats.disk_hits == 1


def test_a_new_code_generator_version_misses_the_entries_of_the_old_one(jit, monkeypatch):
    name, built = unique_name(), []
    _spec_kernel(jit, name, built)
    monkeypatch.setattr(jit_module, "generator_version", lambda: "generators edited")
    other_process = HostJit()  # kept alive while its code runs
    _adds_one(_spec_kernel(other_process, name, built))
    assert built == [name, name] and other_process.cache.stats.misses == 1


def test_the_generator_version_follows_every_source_file(tmp_path, monkeypatch):
    for relative in ("runtime/cpu/a.py", "runtime/cpu/deeper/b.py", "runtime/c.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x = 1\n")
    monkeypatch.setattr(jit_module, "ROOT", str(tmp_path))
    monkeypatch.setattr(jit_module, "GENERATORS", ("runtime/cpu", "runtime/c.py"))
    version = jit_module.generator_version.__wrapped__
    seen = {version()}
    for relative in ("runtime/cpu/a.py", "runtime/cpu/deeper/b.py", "runtime/c.py"):
        (tmp_path / relative).write_text("x = 2\n")
        seen.add(version())
    (tmp_path / "runtime/cpu/new.py").write_text("")
    seen.add(version())
    assert len(seen) == 5


def test_kernels_compiled_in_parallel_threads_are_the_serial_ones_byte_for_byte(jit):
    names = [unique_name() for _ in range(6)]
    texts = [str(add_one_module(jit, name)) for name in names]
    serial = [jit._build(text) for text in texts]
    with ThreadPoolExecutor(3) as pool:
        parallel = list(pool.map(jit._build, texts))
    assert parallel == serial
    with ThreadPoolExecutor(3) as pool:
        addresses = list(pool.map(lambda name: _spec_kernel(jit, name, []), names))
    for address in addresses:
        _adds_one(address)
