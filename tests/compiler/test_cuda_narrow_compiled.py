"""Compiled graphs over float16, bfloat16, uint8, int8 and int16 on CUDA tensors: every
elementwise chain of tests/compiler/test_native_narrow.py runs as one CUDA kernel (none of
its nodes interpreted) and gives eager's CPU numpy kernels' values bit for bit (float math
within a unit of the type), over each dtype's special values; its PTX assembles with
`ptxas -arch=sm_90` without spilling (skipped where ptxas is missing). Reductions and
softmax over the 16-bit floats are widened by the compiler and run as CUDA row kernels
reading 16-bit words. On a GPU where the driver finds one, else on the emulated device."""
import numpy as np
import pytest

import compiler
import eager
from compiler.backends.cuda.run import CudaNode
from runtime.cuda.current import unless_gpu
from tests.compiler.test_native_narrow import CHAINS
from tests.eager.native.narrow_cases import assert_same, numpy_kernels, special


@pytest.fixture(autouse=True)
def emulated():
    with unless_gpu(memory=64 << 20) as device:
        yield device


def _pair(dtype):
    a = eager.tensor(special(dtype, extra=12))
    b = eager.tensor(special(dtype, extra=12, seed=1)[::-1].copy())
    return a, b


def _kernels(f) -> list:
    return [k for run in f.region_cache.values() for k in run.kernels.values()]


@pytest.mark.parametrize("name, dtype", [(n, d) for n, c in CHAINS.items() for d in c[1]],
                         ids=str)
def test_fused_chains_run_as_one_cuda_kernel_bit_for_bit(name, dtype, emulated):
    fn, _, ulps = CHAINS[name]
    a, b = _pair(dtype)
    with numpy_kernels():
        want = fn(a, b)
    f = eager.compile(fn)
    before = emulated.launches if emulated is not None else None
    got = f(a.cuda(), b.cuda())
    assert_same(got.cpu(), want, ulps)
    (node,) = _kernels(f)
    assert isinstance(node, CudaNode) and node.kind == "elementwise"
    if emulated is not None:
        assert emulated.launches == before + 1


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "int8"])
def test_fused_kernels_over_views_and_casts_equal_eager(dtype):
    grid = eager.tensor(special(dtype, extra=120)[:7 * 19].reshape(7, 19))

    def fn(g):
        return (g.t() * 2 + g.t()[:, :1]).to(eager.float32) - g.t().to(eager.int16)
    with numpy_kernels():
        want = fn(grid)
    assert_same(eager.compile(fn)(grid.cuda()).cpu(), want)


@pytest.mark.parametrize("name, dtype", [("arithmetic", "bfloat16"), ("arithmetic", "float16"),
                                         ("bitwise", "int8"), ("bitwise", "uint8"),
                                         ("sigmoid_chain", "float16"), ("divide", "int16")],
                         ids=str)
def test_the_kernels_ptx_assembles_without_spills(name, dtype):
    fn = CHAINS[name][0]
    lowered = compiler.lower(fn, *_pair(dtype), target="cuda")
    assert lowered.not_cuda == {}
    if lowered.ptxas_missing:
        pytest.skip(lowered.ptxas_missing)
    assert lowered.ptxas, "no kernel made"
    for report in lowered.ptxas.values():
        assert report.registers > 0 and (report.spill_stores, report.spill_loads) == (0, 0)


def test_16_bit_float_arithmetic_reaches_the_ptx_as_half_instructions_or_cvt():
    """NVPTX rounds a float32 result to float16 with cvt.rn.f16.f32 and, on sm_90, turns an
    add, mul or compare of two float16s widened to float32 and rounded back into the
    float16 instruction itself (exact: float32 holds such a result before its one
    rounding); bfloat16 stays integer words and float32 arithmetic."""
    h = eager.tensor(special("float16"))
    lowered = compiler.lower(lambda x: (x * x + x).exp(), h, target="cuda")
    ptx = "\n".join(lowered.ptx.values()) if isinstance(lowered.ptx, dict) else lowered.ptx
    assert "cvt.rn.f16.f32" in ptx and "cvt.f32.f16" in ptx and "mul.rn.f16" in ptx
    bf = eager.tensor(special("bfloat16"))
    lowered = compiler.lower(lambda x: x * x + x, bf, target="cuda")
    ptx = "\n".join(lowered.ptx.values()) if isinstance(lowered.ptx, dict) else lowered.ptx
    assert "bf16" not in ptx and "mul.rn.f32" in ptx


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reductions_and_softmax_over_16_bit_floats_run_as_cuda_row_kernels(dtype):
    """The compiler widens them (passes/decompose.py): a CUDA row kernel reads the 16-bit
    words, sums in float32 and rounds once, as eager's CPU kernels: within a 16-bit ulp
    (float32 sums in another order)."""
    x = eager.tensor(np.random.default_rng(2).standard_normal((5, 37)).astype(np.float32) * 3
                     ).to(getattr(eager, dtype))
    for fn in (lambda t: (t * 2).sum(1) + 1, lambda t: eager.softmax(t, -1),
               lambda t: t.mean(0)):
        with numpy_kernels():
            want = fn(x)
        f = eager.compile(fn)
        assert_same(f(x.cuda()).cpu(), want, ulps=1)
        kinds = [k.kind for k in _kernels(f)]
        assert "reduction" in kinds and set(kinds) <= {"reduction", "elementwise"}, kinds
