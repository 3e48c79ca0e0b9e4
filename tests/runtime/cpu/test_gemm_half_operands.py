"""kiln's GEMM on bfloat16 and float16 operands, widened to float32 while packed
(runtime/cpu/gemm/emit/pack.py): every result is bitwise the float32 GEMM of the
operands converted in numpy (ml_dtypes' and numpy's conversions are exact), with the same
blocking; with out_dtype, bitwise that result rounded by numpy/ml_dtypes. Run again with
KILN_CPU=haswell for the AVX2 code. On CPUs with AVX512-BF16 bfloat16 products take the
dot-product tile instead (tests/runtime/cpu/test_gemm_bf16_dot.py); here it is turned off
(config.BF16_DOT), so the widening path is tested on every CPU."""
from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from runtime.cpu.gemm import jobs as gemm_jobs
from runtime.cpu.gemm import kernels as gemm_kernels
from runtime.cpu.gemm import plans as gemm_plans
from runtime.cpu.gemm.api import Epilogue, bmm, gemm
from runtime.cpu.gemm.emit.kernel import EpilogueSpec, Tile

HALVES = [ml_dtypes.bfloat16, np.float16]


@pytest.fixture(autouse=True)
def _widening(widened_bfloat16):
    pass
SIZES = [(1, 1, 1), (7, 17, 129), (129, 7, 17), (17, 129, 1), (1, 129, 7), (33, 64, 48),
         (300, 500, 260), (130, 1100, 70)]  # direct-sized (one K block) and packed ones


def halves(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def widened(*arrays):
    return [None if x is None else x.astype(np.float32) for x in arrays]


def same_bits(x, y):
    assert x.dtype == y.dtype == np.float32 and x.shape == y.shape
    assert np.array_equal(x.view(np.uint32), y.view(np.uint32))


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("m,k,n", SIZES)
def test_half_operands_give_the_float32_product_of_their_widened_values(dtype, m, k, n):
    rng = np.random.default_rng(m * k + n)
    a, b = halves(rng, (m, k), dtype), halves(rng, (k, n), dtype)
    a32, b32 = widened(a, b)
    got = gemm(a, b)
    same_bits(got, gemm(a32, b32, specialise=False))
    same_bits(gemm(a, b), got)  # seen twice: served by a plan


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("trans_a,trans_b", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("m,k,n", [(7, 17, 129), (129, 40, 17), (260, 300, 140)])
def test_transposes(dtype, trans_a, trans_b, m, k, n):
    rng = np.random.default_rng(3)
    a = halves(rng, (k, m) if trans_a else (m, k), dtype)
    b = halves(rng, (n, k) if trans_b else (k, n), dtype)
    a32, b32 = widened(a, b)
    same_bits(gemm(a, b, trans_a=trans_a, trans_b=trans_b),
              gemm(a32, b32, trans_a=trans_a, trans_b=trans_b, specialise=False))


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("m,k,n", [(9, 13, 21), (150, 260, 130)])
def test_strided_views_are_read_in_place(dtype, m, k, n):
    rng = np.random.default_rng(4)
    a = halves(rng, (2 * m, 3 * k), dtype)[::2, 1::3]
    b = halves(rng, (k, 2 * n + 1), dtype)[:, ::-2][:, :n]
    a32, b32 = widened(a, b)
    same_bits(gemm(a, b), gemm(a32, b32, specialise=False))


@pytest.mark.parametrize("dtype", HALVES)
def test_k_zero_gives_beta_c_then_the_epilogue(dtype):
    a, b = np.ones((5, 0), dtype), np.ones((0, 7), dtype)
    c = np.full((5, 7), 2.0, np.float32)
    epilogue = Epilogue(bias=np.arange(7, dtype=np.float32), activation="relu", scale=0.5)
    got = gemm(a, b, beta=3.0, c=c, epilogue=epilogue)
    assert got.dtype == np.float32
    assert np.array_equal(got, 0.5 * np.maximum(6.0 + np.arange(7, dtype=np.float32), 0)[
        None].repeat(5, 0))
    assert not gemm(a, b).any()


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("m,k,n", [(7, 17, 129), (200, 300, 250)])
def test_alpha_beta_c_and_the_fused_epilogue_are_applied_in_float32(dtype, m, k, n):
    rng = np.random.default_rng(5)
    a, b = halves(rng, (m, k), dtype), halves(rng, (k, n), dtype)
    c = rng.standard_normal((m, n)).astype(np.float32)
    epilogue = Epilogue(bias=rng.standard_normal(n).astype(np.float32), activation="gelu",
                        residual=rng.standard_normal((m, n)).astype(np.float32), scale=0.75)
    a32, b32 = widened(a, b)
    same_bits(gemm(a, b, alpha=1.5, beta=-0.5, c=c, epilogue=epilogue),
              gemm(a32, b32, alpha=1.5, beta=-0.5, c=c, epilogue=epilogue, specialise=False))


@pytest.mark.parametrize("dtype", HALVES)
def test_bmm_broadcasts_batch_dims(dtype):
    rng = np.random.default_rng(6)
    for shape_a, shape_b in [((3, 17, 40), (40, 9)), ((2, 1, 64, 33), (5, 33, 129)),
                             ((4, 130, 150), (4, 150, 120))]:
        a, b = halves(rng, shape_a, dtype), halves(rng, shape_b, dtype)
        a32, b32 = widened(a, b)
        same_bits(bmm(a, b), bmm(a32, b32, specialise=False))


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("m,k,n", [(333, 777, 555), (20, 1000, 2000), (64, 512, 512)])
def test_identical_across_thread_counts_and_a_is_always_packed(dtype, m, k, n, monkeypatch):
    """Rows around a shared packing of B, or column pieces (where float32 operands with
    rows 2 KiB apart would read A in place, config.NARROW_PIECE_COLUMNS)."""
    records, run = [], gemm_jobs.Job.run

    def spy(job):
        records.append(job.then.copy())
        run(job)

    monkeypatch.setattr(gemm_jobs.Job, "run", spy)
    rng = np.random.default_rng(7)
    a, b = halves(rng, (m, k), dtype), halves(rng, (k, n), dtype)
    results = [gemm(a, b, threads=t) for t in (1, 2, 3)]
    for r in results[1:]:
        same_bits(r, results[0])
    in_place = gemm_jobs.FIELDS.index("a_in_place")
    assert max(len(r) for r in records) >= 2 and not any(r[:, in_place].any() for r in records)
    a32, b32 = widened(a, b)
    same_bits(results[0], gemm(a32, b32, threads=1))


@pytest.mark.parametrize("dtype", HALVES)
def test_special_values_are_widened_exactly(dtype):
    """Infinities, NaNs, subnormals and signed zeros: the float32 values they stand for."""
    info = ml_dtypes.finfo(dtype)
    specials = np.array([np.inf, -np.inf, np.nan, info.smallest_subnormal,
                         -info.smallest_subnormal, info.max, -0.0, 1.0], np.float32)
    a = np.diag(specials).astype(dtype)  # each value times 1, plus zeros
    b = np.eye(8, 9, dtype=dtype)
    got = gemm(a, b)
    assert np.array_equal(got, gemm(*widened(a, b), specialise=False), equal_nan=True)
    assert np.array_equal(np.diag(got), specials.astype(dtype).astype(np.float32),
                          equal_nan=True)


@pytest.mark.parametrize("lanes_f32", [16, 8, 4])  # AVX-512, AVX2 and SSE tiles
def test_pack_b_widens_by_rows_and_transposed(lanes_f32, monkeypatch):
    """pack_b's contiguous, transposing and strided paths put the widened values of B in
    the places the float32 packing does, over partial panels and depths that are not
    whole vectors."""
    from runtime.pool import Items
    tile = gemm_kernels.default_tile("float32", lanes_f32)
    monkeypatch.setattr(gemm_kernels, "_kernels", {})
    rng = np.random.default_rng(8)
    for dtype in HALVES:
        pack_b = gemm_kernels.kernel(np.float32, EpilogueSpec(), tile,
                                     np.dtype(dtype).name).items["pack_b"]
        for k, n in [(1, 1), (15, 7), (16, tile.nr), (37, 2 * tile.nr + 5)]:
            b = halves(rng, (k, n), dtype)
            size = -(-n // tile.nr) * tile.nr * k
            strided = halves(rng, (2 * n, 2 * k), dtype)[::2, ::2].T  # rows and columns
            for source in (b, np.ascontiguousarray(b.T).T, strided):
                rs, cs = (stride // 2 for stride in source.strides)
                dst = np.full(size, np.nan, np.float32)
                record = np.array([[source.ctypes.data, rs, cs, k, n, dst.ctypes.data]],
                                  np.int64)
                Items(None, (pack_b, record.ctypes.data, 1, record.strides[0])).run(1)
                panels = dst.reshape(-1, k, tile.nr).transpose(1, 0, 2).reshape(k, -1)
                assert np.array_equal(panels[:, :n], source.astype(np.float32))


def _use_tile_of(lanes_f32: int, monkeypatch) -> None:
    """Every kernel made from here on uses the float32 tile of `lanes_f32` lanes (AVX2's
    8, SSE's 4) whatever this CPU's vectors are."""
    chosen = gemm_kernels.default_tile("float32", lanes_f32)
    monkeypatch.setattr(gemm_kernels, "default_tile", lambda dtype, lanes: chosen)
    monkeypatch.setattr(gemm_kernels, "_kernels", {})


@pytest.mark.parametrize("lanes_f32", [8, 4])
def test_narrower_vector_tiles(lanes_f32, monkeypatch):
    _use_tile_of(lanes_f32, monkeypatch)
    rng = np.random.default_rng(9)
    for dtype in HALVES:
        for m, k, n in [(7, 5, 9), (127, 130, 61), (250, 300, 270)]:
            a, b = halves(rng, (m, k), dtype), halves(rng, (n, k), dtype)
            same_bits(gemm(a, b, trans_b=True, threads=2),
                      gemm(*widened(a, b), trans_b=True, threads=2, specialise=False))


@pytest.mark.parametrize("lanes", [16, 8])
@pytest.mark.parametrize("operands", ["bfloat16", "float16"])
def test_half_kernels_call_no_library_functions(operands, lanes):
    """float16's fpext is F16C code, not a call of __extendhfsf2."""
    from runtime.llvm.jit import host_jit
    from runtime.cpu.values import emit_activation
    from runtime.cpu.gemm.emit.kernel import build_module
    jit = host_jit()
    tile = replace(gemm_kernels.default_tile("float32", lanes), operands=operands)
    module = jit.new_module("gemm_half_no_libcalls")
    build_module(module, f"half_no_libcalls_{operands}_{lanes}", tile,
                 EpilogueSpec("col", "gelu", True), emit_activation, ("packed", "pack_b"))
    assembly = jit.assembly(module)
    assert "@GOT" not in assembly.replace("@GOTOFF", "") and "@PLT" not in assembly


def test_a_half_tile_has_no_direct_entry_and_only_float32_takes_half_operands():
    from runtime.llvm.jit import host_jit
    from runtime.cpu.gemm.emit.kernel import build_module
    tile = Tile("float32", 6, 16, 8, operands="bfloat16")
    with pytest.raises(ValueError, match="no direct entry"):
        build_module(host_jit().new_module("half_direct"), "half_direct", tile,
                     EpilogueSpec(), None, ("direct",))
    with pytest.raises(ValueError, match="cannot take bfloat16"):
        Tile("float64", 6, 8, 4, operands="bfloat16")


def test_operands_of_two_types_are_refused():
    a = np.ones((4, 4), ml_dtypes.bfloat16)
    for b in (np.ones((4, 4), np.float16), np.ones((4, 4), np.float32)):
        with pytest.raises(TypeError, match="both must be float32, float64, bfloat16 or "
                                            "float16"):
            gemm(a, b)
    with pytest.raises(TypeError, match="c is float64 but the product is float32"):
        gemm(a, a, beta=1.0, c=np.ones((4, 4), np.float64))


def test_a_repeated_half_request_is_planned_and_reads_each_calls_arrays():
    rng = np.random.default_rng(10)
    shape_a, shape_b = (40, 70), (70, 50)
    for _ in range(2):
        gemm(halves(rng, shape_a, ml_dtypes.bfloat16), halves(rng, shape_b, ml_dtypes.bfloat16))
    a, b = halves(rng, shape_a, ml_dtypes.bfloat16), halves(rng, shape_b, ml_dtypes.bfloat16)
    key, _ = gemm_plans.serve(("gemm", a, b, None, 1.0, 0.0, None, False, False, None, None,
                               True))
    assert key in gemm_plans.PLANS
    same_bits(gemm(a, b), gemm(*widened(a, b), specialise=False))


# out_dtype: the store rounds the result to the operands' type ---------------------------
def same_words(x, y):
    """Bitwise equal 16-bit floats, any NaN matching any NaN."""
    assert x.dtype == y.dtype and x.shape == y.shape and x.dtype.itemsize == 2
    nan = np.isnan(x.astype(np.float32))
    assert (nan == np.isnan(y.astype(np.float32))).all()
    assert np.array_equal(x.view(np.uint16)[~nan], y.view(np.uint16)[~nan])


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("m,k,n", SIZES + [(333, 777, 555)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_rounded_result_is_the_float32_result_rounded_once(dtype, m, k, n, threads):
    rng = np.random.default_rng(m + k * n)
    a, b = halves(rng, (m, k), dtype), halves(rng, (k, n), dtype)
    got = gemm(a, b, out_dtype=dtype, threads=threads)
    same_words(got, gemm(a, b, threads=threads).astype(dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_the_epilogue_is_applied_before_rounding(dtype):
    rng = np.random.default_rng(11)
    for m, k, n in [(7, 17, 129), (200, 600, 250)]:  # one K block, and two
        a, b = halves(rng, (k, m), dtype), halves(rng, (n, k), dtype)
        c = rng.standard_normal((m, n)).astype(np.float32)
        epilogue = Epilogue(bias=rng.standard_normal(m).astype(np.float32), bias_axis=0,
                            activation="gelu", scale=0.75,
                            residual=rng.standard_normal((m, n)).astype(np.float32))
        options = dict(alpha=1.5, beta=-0.5, c=c, epilogue=epilogue, trans_a=True,
                       trans_b=True)
        same_words(gemm(a, b, out_dtype=dtype, **options),
                   gemm(a, b, **options).astype(dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_rounding_ties_overflow_and_nans_as_numpy_and_ml_dtypes(dtype):
    """The residual of a zero product is the value rounded: ties to even, beyond the
    largest value to inf, NaNs kept NaN."""
    info = ml_dtypes.finfo(dtype)
    ulp_of_one = float(info.eps)
    values = [1 + ulp_of_one / 2, 1 + 1.5 * ulp_of_one, -(1 + ulp_of_one / 2),
              float(info.max) * (1 + ulp_of_one / 4), float(info.max) * (1 + ulp_of_one),
              np.inf, -np.inf, np.nan, -np.nan, float(info.smallest_subnormal) / 2,
              float(info.smallest_subnormal) * 1.5, 1e-30, -0.0, 3.0, 65519.0, 65520.0]
    with np.errstate(over="ignore"):  # bfloat16's max * (1 + eps) is past float32's
        residual = np.array(values, np.float32).reshape(2, 8)
    a, b = np.zeros((2, 3), dtype), np.zeros((3, 8), dtype)
    got = gemm(a, b, out_dtype=dtype, epilogue=Epilogue(residual=residual))
    exact = residual + np.float32(0)  # (the product's zero turns -0 into 0)
    with np.errstate(over="ignore"):
        same_words(got, exact.astype(dtype))


@pytest.mark.parametrize("dtype", HALVES)
def test_rounded_batches_k_zero_and_empty_products(dtype):
    rng = np.random.default_rng(12)
    for shape_a, shape_b in [((3, 17, 40), (40, 9)), ((2, 1, 64, 33), (5, 33, 129)),
                             ((4, 130, 150), (4, 150, 120))]:
        a, b = halves(rng, shape_a, dtype), halves(rng, shape_b, dtype)
        for threads in (1, 2):
            same_words(bmm(a, b, out_dtype=dtype, threads=threads),
                       bmm(a, b, threads=threads).astype(dtype))
    c = rng.standard_normal((5, 7)).astype(np.float32)
    a, b = np.ones((5, 0), dtype), np.ones((0, 7), dtype)
    same_words(gemm(a, b, beta=0.3, c=c, out_dtype=dtype), (np.float32(0.3) * c).astype(dtype))
    assert gemm(np.ones((0, 4), dtype), np.ones((4, 3), dtype), out_dtype=dtype).shape == (0, 3)


@pytest.mark.parametrize("lanes_f32", [8, 4])
def test_rounded_results_on_narrower_vector_tiles(lanes_f32, monkeypatch):
    _use_tile_of(lanes_f32, monkeypatch)
    rng = np.random.default_rng(13)
    for dtype in HALVES:
        for m, k, n in [(7, 5, 9), (127, 130, 61), (250, 600, 270)]:
            a, b = halves(rng, (m, k), dtype), halves(rng, (k, n), dtype)
            same_words(gemm(a, b, out_dtype=dtype, threads=2),
                       gemm(a, b, threads=2).astype(dtype))


def test_out_dtype_is_refused_where_it_cannot_be_honoured():
    a32, half = np.ones((4, 4), np.float32), np.ones((4, 4), np.float16)
    with pytest.raises(TypeError, match="out_dtype bfloat16 is taken only for"):
        gemm(a32, a32, out_dtype=ml_dtypes.bfloat16)
    with pytest.raises(TypeError, match="out_dtype bfloat16 is taken only for"):
        gemm(half, half, out_dtype=ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="out_dtype is taken only without out"):
        gemm(half, half, out_dtype=np.float16, out=np.empty((4, 4), np.float32))
    assert gemm(half, half, out_dtype=np.float32).dtype == np.float32  # the product's type


@pytest.mark.parametrize("api, shape_a, shape_b", [
    ("gemm", (40, 70), (70, 50)), ("gemm", (300, 600), (600, 200)),
    ("bmm", (3, 40, 70), (70, 50))])
def test_a_repeated_rounded_request_is_planned_and_reads_each_calls_arrays(api, shape_a,
                                                                            shape_b):
    run = gemm if api == "gemm" else bmm
    rng = np.random.default_rng(14)
    dtype = ml_dtypes.bfloat16
    for _ in range(2):
        run(halves(rng, shape_a, dtype), halves(rng, shape_b, dtype), out_dtype=dtype)
    a, b = halves(rng, shape_a, dtype), halves(rng, shape_b, dtype)
    key, _ = gemm_plans.serve((api, a, b, None, 1.0, 0.0, None, False, False, None, None,
                               True), dtype)
    assert key in gemm_plans.PLANS
    got = run(a, b, out_dtype=dtype)
    same_words(got, run(*widened(a, b), specialise=False).astype(dtype))
