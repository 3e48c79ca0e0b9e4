"""The FMA peak kernel, the host JIT it runs on, and the copy-bandwidth probe."""
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import limits
from runtime import jit, target

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("width", [4, 8, 16])
def test_fma_kernel_computes_its_closed_form(width):
    # acc_k starts at k + 1 and becomes x * acc + y each step: with x = 0.5, y = 1 it
    # tends to 2, and after n steps it is 2 + (k + 1 - 2) / 2**n.
    out = np.zeros(width, np.float32)
    limits.fma_kernel(width)(out.ctypes.data, 10, 0.5, 1.0)
    chains = np.arange(1, limits.CHAINS + 1)
    assert out == pytest.approx(np.full(width, np.sum(2 + (chains - 2) / 2 ** 10)))


def test_fma_kernel_ir_uses_explicit_vector_fma():
    text = str(limits.build_fma_kernel(8, chains=2))
    assert "declare <8 x float> @\"llvm.fma.v8f32\"" in text
    assert text.count("call <8 x float> @\"llvm.fma.v8f32\"") == 2


def test_measurements_are_positive_numbers():
    assert limits.peak_gflops(jit.vector_width(), 2, seconds=0.002, repeats=1) > 0
    assert limits.copy_gbs(4, repeats=1) > 0


def test_host_jit_is_one_engine_and_names_what_it_lacks():
    assert jit.host_jit() is jit.host_jit()
    with pytest.raises(KeyError, match="no function named 'nothing_here'"):
        jit.host_jit().address("nothing_here")
    assert jit.vector_width() in (4, 8, 16)
    assert jit.host_jit().target == target.selected() and "sse2" in target.selected().enabled


def test_limits_pick_the_limit_for_each_unit():
    lim = limits.Limits("cpu", 16, 2, 100.0, 200.0, 30.0)
    assert (lim.for_unit("GFLOP/s"), lim.for_unit("GB/s"), lim.for_unit("ops/s")) == (
        200.0, 30.0, None)


def test_import_eager_does_not_import_llvmlite():
    code = "import sys, eager; print('llvmlite' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


def test_host_jit_refuses_a_second_definition_and_shows_assembly():
    built = jit.host_jit().add(limits.build_fma_kernel(8, chains=3))
    if "fma" in target.selected().enabled:
        assert "vfmadd" in jit.host_jit().assembly(built)
    with pytest.raises(ValueError, match="already has a function named 'fma_peak_w8_c3'"):
        jit.host_jit().add(limits.build_fma_kernel(8, chains=3))
