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
    chains = np.arange(1, limits.accumulators(width) + 1)
    assert out == pytest.approx(np.full(width, np.sum(2 + (chains - 2) / 2 ** 10)))


def test_fma_kernel_ir_uses_explicit_vector_fma():
    text = str(limits.build_fma_kernel(8, chains=2))
    assert "declare <8 x float> @\"llvm.fma.v8f32\"" in text
    assert text.count("call <8 x float> @\"llvm.fma.v8f32\"") == 2


def test_measurements_are_positive_numbers():
    assert limits.peak_gflops(jit.vector_width(), 2, seconds=0.002, repeats=1) > 0
    assert limits.copy_gbs(1 << 20, threads=2, repeats=1) > 0


@pytest.mark.parametrize("cpu, width, register", [("haswell", 8, "ymm"),
                                                   ("skylake-avx512", 16, "zmm")])
def test_the_peak_kernel_keeps_every_accumulator_in_a_register(cpu, width, register):
    """16 accumulators and two broadcasts did not fit AVX2's 16 ymm registers: the spills
    to the stack halved the measured peak."""
    assembly = jit.HostJit(target=target.named(cpu)).assembly(limits.build_fma_kernel(width))
    assert f"%{register}" in assembly and "vfmadd" in assembly
    assert "(%rsp)" not in assembly


def test_a_copy_rate_is_held_to_the_copy_of_the_nearest_smaller_working_set():
    lim = limits.Limits("cpu", 16, 2, 100.0, 200.0, {1 << 20: 80.0, 64 << 20: 20.0})
    assert lim.for_work("GB/s", 3 << 20) == 80.0  # a 1 MB add runs in cache
    assert lim.for_work("GB/s", 200 << 20) == 20.0
    assert lim.for_work("GB/s", 1000) == 80.0  # smaller than any measured: the smallest


def test_host_jit_is_one_engine_and_names_what_it_lacks():
    assert jit.host_jit() is jit.host_jit()
    with pytest.raises(KeyError, match="no function named 'nothing_here'"):
        jit.host_jit().address("nothing_here")
    assert jit.vector_width() in (4, 8, 16)
    assert jit.host_jit().target == target.selected() and "sse2" in target.selected().enabled


def test_limits_pick_the_limit_for_each_unit():
    lim = limits.Limits("cpu", 16, 2, 100.0, 200.0, {1 << 20: 30.0})
    assert (lim.for_work("GFLOP/s", 1e9), lim.for_work("GB/s", 1e9),
            lim.for_work("ops/s", 1)) == (200.0, 30.0, None)


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
