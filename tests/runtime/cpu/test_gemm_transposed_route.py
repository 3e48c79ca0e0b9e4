"""A packed product whose out^T the register tiles cover better runs as
out^T = op(B)^T op(A)^T (runtime/cpu/gemm/api.py: _fits_better_transposed): each element
sees the same multiply-adds in the same order, so the result is bitwise the one computed
as asked, with every epilogue part, C, batches, given outputs and thread counts."""
import numpy as np
import pytest

from runtime.cpu.gemm import api, config
from runtime.cpu.gemm.api import Epilogue, bmm, gemm
from runtime.cpu.gemm import kernels
from runtime.cpu.gemm.emit.kernel import EpilogueSpec
from tests.runtime.cpu.test_gemm import reference

F32 = np.float32


def _tile():
    return kernels.kernel(np.dtype(F32), EpilogueSpec()).tile


def _routes(monkeypatch) -> list:
    """Records the (m, n) of every product that takes the transposed route."""
    taken, chosen = [], api._fits_better_transposed

    def spy(tile, m, n):
        answer = chosen(tile, m, n)
        if answer:
            taken.append((m, n))
        return answer
    monkeypatch.setattr(api, "_fits_better_transposed", spy)
    return taken


def test_narrow_outputs_fit_the_tiles_better_transposed():
    t = _tile()
    assert api._fits_better_transposed(t, 512, 8)  # 8 of NR columns used
    assert api._fits_better_transposed(t, 512, t.nr * 2 + 1)  # an edge tile of 1 column
    assert not api._fits_better_transposed(t, 8, 512)  # the other way round
    assert not api._fits_better_transposed(t, 512, 512)
    assert not api._fits_better_transposed(t, t.mr * 10, t.nr * 10)  # no waste either way


# (m, k, n, trans_a, trans_b): N of 8 and 65 (with NR = 32 on AVX-512, 16 on AVX2 the
# edge tiles waste most of a tile), each layout of A and B
# packed: above config.DIRECT_SPREAD_MAX_MACS multiply-adds
SHAPES = [(512, 2100, 8, False, False), (512, 2100, 8, False, True),
          (300, 5700, 5, True, False), (512, 384, 65, False, True),
          (389, 700, 33, True, True), (257, 2001, 17, False, False)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n, trans_a, trans_b", SHAPES)
def test_the_transposed_route_gives_the_untransposed_result_bitwise(
        monkeypatch, m, k, n, trans_a, trans_b, threads):
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(F32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(F32)
    c = rng.standard_normal((m, n)).astype(F32)
    options = [dict(), dict(epilogue=Epilogue(bias=rng.standard_normal(n).astype(F32),
                                               activation="gelu")),
               dict(epilogue=Epilogue(bias=rng.standard_normal(m).astype(F32), bias_axis=0,
                                      residual=c * 2, scale=0.5, activation="relu")),
               dict(alpha=0.75, beta=-1.5, c=c)]
    taken = _routes(monkeypatch)
    results = [gemm(a, b, trans_a=trans_a, trans_b=trans_b, threads=threads, specialise=False,
                    **kw) for kw in options]
    assert len(taken) == len(options), "every product took the transposed route"
    monkeypatch.setattr(config, "TRANSPOSE_GAIN", float("inf"))
    for kw, got in zip(options, results):
        want = gemm(a, b, trans_a=trans_a, trans_b=trans_b, threads=threads,
                    specialise=False, **kw)
        np.testing.assert_array_equal(got, want)
        exact, allowed = reference(a, b, trans_a=trans_a, trans_b=trans_b, **kw)
        assert np.all(np.abs(got - exact) <= allowed)


def test_a_given_output_and_a_batch(monkeypatch):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 400, 2500)).astype(F32)
    b = rng.standard_normal((2500, 9)).astype(F32)
    out = np.full((3, 400, 9), np.nan, F32)
    taken = _routes(monkeypatch)
    bmm(a, b, out=out)
    assert taken
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    monkeypatch.setattr(config, "TRANSPOSE_GAIN", float("inf"))
    np.testing.assert_array_equal(out, bmm(a, b))


def test_16_bit_outputs_and_small_products_keep_their_route(monkeypatch):
    """A rounded (16-bit) out keeps its layout (its partial sums live in the float32
    out's); products of the direct domain are never routed."""
    import ml_dtypes
    rng = np.random.default_rng(4)
    taken = _routes(monkeypatch)
    a = rng.standard_normal((512, 700)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((700, 8)).astype(ml_dtypes.bfloat16)
    got = gemm(a, b, out_dtype=ml_dtypes.bfloat16)
    assert got.dtype == ml_dtypes.bfloat16 and not taken
    small = rng.standard_normal((40, 30)).astype(F32), rng.standard_normal((30, 3)).astype(F32)
    gemm(*small)
    assert not taken
