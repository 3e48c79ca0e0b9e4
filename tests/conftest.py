"""Test-wide settings: compiled kernels are cached in a temporary directory, never in
the user's ~/.cache/kiln, and compiled in the calling thread (KILN_COMPILE_WORKERS=0), so
that a compiled function's first call runs its kernels natively, as the tests expect;
tests/runtime/test_compile_service.py turns the background workers on where it tests
them.

PyTorch's 16-bit values, which many tests compare bit for bit, depend on the CPU: where
it has AMX or AVX512-FP16 (Intel Sapphire Rapids and later), MKL and oneDNN run kernels
that sum in other orders (measured: float16 linear, convolution and gelu, bfloat16
attention gradients, 2-1440 elements apart). kiln follows the kernels PyTorch runs on
the other x86 CPUs; the two caps below make PyTorch run those here too (on CPUs below
them they change nothing). They are set before anything imports torch.
"""
import os

import pytest

os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", "AVX512")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")

import eager  # noqa: F401 - declares the ops' records, which the kernel generators read


@pytest.fixture(autouse=True, scope="session")
def _private_kernel_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("KILN_CACHE_DIR", str(tmp_path_factory.mktemp("kiln-cache")))
    mp.setenv("KILN_AUTOTUNE", "0")
    mp.setenv("KILN_COMPILE_WORKERS", "0")
    yield
    mp.undo()



@pytest.fixture
def widened_bfloat16(monkeypatch):
    """kiln's GEMM widens bfloat16 operands to float32 (bitwise the float32 product) on
    every CPU, also on those where it would multiply them with vdpbf16ps
    (runtime/cpu/gemm/config.BF16_DOT); plans made before, and the requests seen before
    (whose next sighting makes a plan), are forgotten."""
    from runtime.cpu.gemm import config, kernels, plans
    monkeypatch.setattr(config, "BF16_DOT", False)
    monkeypatch.setattr(plans, "PLANS", {})
    monkeypatch.setattr(plans, "_sightings", kernels.SecondSight())
