"""kiln's GEMM on bfloat16 operands with AVX512-BF16's vdpbf16ps (Tile.dot): operands
stay 16-bit in packed panels of pairs of K steps (runtime/cpu/gemm/emit/pack.py,
_pack_pairs), and each instruction adds both products of a pair to a float32 lane.

Products of bfloat16 values are exact in float32, so the error is that of K float32
additions: every result is checked against float64 by the bound of
tests/runtime/cpu/test_gemm.py. The instruction treats subnormal inputs as zero (DAZ)
and flushes subnormal results (FTZ), as oneDNN's bfloat16 GEMM on these CPUs does.

The code is generated for an AVX512-BF16 CPU (znver4) on every machine; it runs where
this CPU has the feature (elsewhere those tests skip, saying so)."""
import ml_dtypes
import numpy as np
import pytest

from runtime.cpu.gemm import config
from runtime.cpu.gemm import jobs as gemm_jobs
from runtime.cpu.gemm import kernels as gemm_kernels
from runtime.cpu.gemm.api import Epilogue, bmm, gemm
from runtime.cpu.gemm.emit.kernel import EpilogueSpec, Tile, build_module

BF16 = ml_dtypes.bfloat16
TILE = Tile("float32", 12, 32, 16, operands="bfloat16", dot=True)


def _runs_here() -> bool:
    return gemm_kernels.dot_products()


runs_here = pytest.mark.skipif(
    not _runs_here(), reason="this CPU (or KILN_CPU's target) has no AVX512-BF16: "
    "the dot-product tile's code is only compiled here (test_the_tile_compiles_to_vdpbf16ps)")


def bf16(rng, shape):
    return rng.standard_normal(shape).astype(BF16)


def check(got, a, b, *, alpha=1.0, extra=None):
    """got within (K + 8) eps32 of the float64 product of the bfloat16 values."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact = alpha * (a64 @ b64) + (0 if extra is None else extra)
    scale = abs(alpha) * (np.abs(a64) @ np.abs(b64)) + np.abs(exact)
    bound = (a.shape[-1] + 8) * 2.0 ** -24 * scale
    assert got.dtype == np.float32 and got.shape == exact.shape
    assert (np.abs(got - exact) <= bound).all(), np.abs(got - exact).max()


def test_the_tile_compiles_to_vdpbf16ps():
    """On any machine: IR for an AVX512-BF16 target, every entry, assembled by LLVM;
    the micro-kernel is vdpbf16ps and nothing calls a library function."""
    import llvmlite.binding as llvm
    import llvmlite.ir as ir
    from runtime.cpu.values import emit_activation
    from runtime.llvm import target
    module = ir.Module(name="bf16_dot")
    module.triple = llvm.get_process_triple()
    build_module(module, "bf16_dot", TILE, EpilogueSpec("col", "gelu", True),
                 emit_activation, ("packed", "pack_b"))
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    assembly = target.named("znver4").machine().emit_assembly(parsed)
    assert "vdpbf16ps" in assembly
    assert "@GOT" not in assembly.replace("@GOTOFF", "") and "@PLT" not in assembly


def test_a_dot_tile_takes_bfloat16_in_16_lanes_only():
    with pytest.raises(ValueError, match="dot-product tile"):
        Tile("float32", 6, 16, 8, operands="bfloat16", dot=True)
    with pytest.raises(ValueError, match="dot-product tile"):
        Tile("float32", 12, 32, 16, operands="float16", dot=True)


def test_dot_products_follow_the_target_and_the_switch(monkeypatch):
    from runtime.llvm import target
    has = "avx512bf16" in target.selected().enabled
    assert gemm_kernels.dot_products() == has
    monkeypatch.setattr(config, "BF16_DOT", False)
    assert not gemm_kernels.dot_products()
    monkeypatch.setattr(gemm_kernels, "_kernels", {})
    kernel = gemm_kernels.kernel(np.float32, EpilogueSpec(), operands="bfloat16")
    assert not kernel.tile.dot


@runs_here
def test_bfloat16_products_take_the_dot_tile():
    kernel = gemm_kernels.kernel(np.float32, EpilogueSpec(), operands="bfloat16")
    assert kernel.tile.dot and "dot" in kernel.name
    assert not gemm_kernels.kernel(np.float32, EpilogueSpec(), operands="float16").tile.dot


SIZES = [(1, 1, 1), (1, 2, 1), (5, 3, 7), (7, 17, 129), (129, 7, 17), (17, 129, 1),
         (13, 64, 33), (33, 65, 48), (300, 500, 260), (130, 1101, 70), (64, 1, 40)]


@runs_here
@pytest.mark.parametrize("m,k,n", SIZES)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (False, True), (True, False),
                                             (True, True)])
def test_products_odd_depths_tails_and_transposes(m, k, n, trans_a, trans_b):
    """Every packing path (B row-major: interleaved; A row-major or B transposed: 16
    pairs transposed in registers; then the strided tail), odd K (the last pair padded
    with zeros), M and N tails."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = bf16(rng, (m, k)), bf16(rng, (k, n))
    a_in = np.ascontiguousarray(a.T) if trans_a else a
    b_in = np.ascontiguousarray(b.T) if trans_b else b
    got = gemm(a_in, b_in, trans_a=trans_a, trans_b=trans_b)
    check(got, a, b)
    assert np.array_equal(gemm(a_in, b_in, trans_a=trans_a, trans_b=trans_b), got)  # planned


@runs_here
@pytest.mark.parametrize("m,k,n", [(9, 13, 21), (150, 261, 130)])
def test_strided_views_are_read_in_place(m, k, n):
    rng = np.random.default_rng(4)
    a = bf16(rng, (2 * m, 3 * k))[::2, 1::3]
    b = bf16(rng, (k, 2 * n + 1))[:, ::-2][:, :n]
    check(gemm(a, b), a, b)


@runs_here
@pytest.mark.parametrize("m,k,n", [(333, 777, 555), (20, 1001, 2000), (64, 512, 512)])
def test_identical_across_thread_counts(m, k, n, monkeypatch):
    """Row pieces around a shared packing of B (pack_b's pairs, prepacked), or column
    pieces."""
    records, run = [], gemm_jobs.Job.run

    def spy(job):
        records.append(job.then.copy())
        run(job)

    monkeypatch.setattr(gemm_jobs.Job, "run", spy)
    rng = np.random.default_rng(7)
    a, b = bf16(rng, (m, k)), bf16(rng, (k, n))
    results = [gemm(a, b, threads=t) for t in (1, 2, 3)]
    assert max(len(r) for r in records) >= 2
    for r in results[1:]:
        assert np.array_equal(r, results[0])
    check(results[0], a, b)


@runs_here
@pytest.mark.parametrize("k", [1, 2, 31, 32, 33, 64, 257, 513])
def test_k_blocks_of_any_depth(k, monkeypatch):
    """K cut into blocks of odd sizes (for_depth gives 257 = 129 + 128): the kernel
    rounds its blocks up to whole pairs."""
    monkeypatch.setattr(gemm_kernels, "_kernels", {})
    from runtime.cpu.gemm import tune
    monkeypatch.setattr(tune, "blocking", lambda kernel, measure=None:
                        gemm_kernels.Blocking(48, 129, 128))
    rng = np.random.default_rng(k)
    a, b = bf16(rng, (150, k)), bf16(rng, (k, 300))
    check(gemm(a, b, threads=1), a, b)
    check(gemm(np.ascontiguousarray(a.T), b, trans_a=True, threads=2), a, b)


@runs_here
@pytest.mark.parametrize("m,k,n", [(5, 9, 7), (260, 300, 140)])
def test_alpha_beta_c_and_the_fused_epilogue(m, k, n):
    rng = np.random.default_rng(5)
    a, b = bf16(rng, (m, k)), bf16(rng, (k, n))
    c = rng.standard_normal((m, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    residual = rng.standard_normal((m, n)).astype(np.float32)
    got = gemm(a, b, alpha=0.5, beta=2.0, c=c, epilogue=Epilogue(
        bias=bias, activation="relu", scale=3.0, residual=residual))
    product = gemm(a, b)
    expected = residual + 3.0 * np.maximum(0.5 * product + 2.0 * c + bias, 0)
    assert np.allclose(got, expected, rtol=1e-5, atol=1e-5)
    check(product, a, b)


@runs_here
@pytest.mark.parametrize("m,k,n", [(7, 5, 9), (129, 300, 65)])
def test_a_rounded_result_is_the_float32_result_rounded_once(m, k, n):
    rng = np.random.default_rng(6)
    a, b = bf16(rng, (m, k)), bf16(rng, (k, n))
    rounded = gemm(a, b, out_dtype=BF16)
    assert rounded.dtype == BF16
    assert np.array_equal(rounded.view(np.uint16), gemm(a, b).astype(BF16).view(np.uint16))


@runs_here
def test_bmm_broadcasts_batch_dims():
    rng = np.random.default_rng(8)
    a, b = bf16(rng, (3, 1, 17, 33)), bf16(rng, (4, 33, 19))
    got = bmm(a, b)
    assert got.shape == (3, 4, 17, 19)
    check(got, np.broadcast_to(a, (3, 4, 17, 33)), np.broadcast_to(b, (3, 4, 33, 19)))


@runs_here
def test_k_zero_and_empty_products():
    assert not gemm(np.ones((5, 0), BF16), np.ones((0, 7), BF16)).any()
    assert gemm(np.ones((0, 4), BF16), np.ones((4, 7), BF16)).shape == (0, 7)
    assert gemm(np.ones((5, 4), BF16), np.ones((4, 0), BF16)).shape == (5, 0)


@runs_here
def test_special_values_and_subnormals():
    """Infinities and NaNs propagate; an infinity beside the zero padding of an odd K
    stays an infinity (0 x 0 is added, not inf x 0); subnormal operands count as zero
    (vdpbf16ps's DAZ, as in oneDNN's bfloat16 GEMM on these CPUs)."""
    info = ml_dtypes.finfo(BF16)
    specials = np.array([np.inf, -np.inf, np.nan, info.max, -0.0, 1.0, 2.0], np.float32)
    a = np.diag(specials).astype(BF16)  # each value times 1, plus zeros: K = 7, odd
    got = gemm(a, np.eye(7, 9, dtype=BF16))
    assert np.array_equal(np.diag(got), specials, equal_nan=True)
    tiny = np.full((3, 2), info.smallest_subnormal, BF16)
    assert not gemm(tiny, np.full((2, 4), 2.0 ** 100, BF16)).any()
