"""What a compile leaves in the host JIT: object code only, no LLVM module, and no pass
manager left behind (llvmlite 0.50 does not free one by itself)."""

import numpy as np
import pytest

from runtime import llvm_passes
from runtime.jit import HostJit
from runtime_kernels import ADD_ONE, add_one_module, unique_name


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
    freed, dispose = [], llvm_passes.NewPassManager._dispose

    def spy(passes):
        freed.append(passes)
        dispose(passes)

    monkeypatch.setattr(llvm_passes.NewPassManager, "_dispose", spy)
    jit.optimise(add_one_module(jit, unique_name()))
    jit.load(add_one_module(jit, unique_name()))
    assert len(freed) == 2 and all(passes.closed for passes in freed)
