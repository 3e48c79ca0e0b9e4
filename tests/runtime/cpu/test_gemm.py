"""kiln's native GEMM (runtime/cpu/gemm/) against numpy float64.

Every result is checked against the error bound documented in runtime/cpu/gemm/api.py:

    |out - exact| <= (K + 8) * eps * (1.2 * |scale| * P + |exact| + |residual|)
    P = |alpha| * |op(A)| @ |op(B)| + |beta| * |C| + |bias|

(K * eps for the dot products, a few eps for the alpha/beta/bias/scale/residual steps,
1.2 bounding the slope of every activation.)
"""
import json
import os
import resource
import subprocess
import sys

import numpy as np
import pytest

from tests.imports import ROOT

from runtime.cpu.gemm import config as gemm_config
from runtime.cpu.gemm import jobs as gemm_jobs
from runtime.cpu.gemm import kernels as gemm_native
from runtime.cpu.gemm import plans as gemm_plans
from runtime.cpu.gemm import tune as gemm_tune
from runtime.cpu.gemm.api import activation_reference, Epilogue, bmm, gemm
from ir.records import activations
from runtime.cpu.gemm.emit.kernel import EpilogueSpec
from runtime import pool as runtime_pool

DTYPES = [np.float32, np.float64]


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def plan_of(api: str, a, b, *, alpha=1.0, trans_b=False, epilogue=None, threads=None):
    """The plan that serves gemm() (`api` "gemm") or bmm() on these operands and
    options, or None (serving the request once more tells its key)."""
    request = (api, a, b, None, alpha, 0.0, None, False, trans_b, epilogue, threads, True)
    key, _ = gemm_plans.serve(request)
    return gemm_plans.PLANS.get(key)


def reference(a, b, *, alpha=1.0, beta=0.0, c=None, trans_a=False, trans_b=False,
              epilogue=None):
    """The exact (float64) result and the allowed error for each element."""
    e = epilogue or Epilogue()
    f64 = lambda x: None if x is None else np.asarray(x, np.float64)  # noqa: E731
    A, B = f64(a), f64(b)
    A = np.swapaxes(A, -1, -2) if trans_a else A
    B = np.swapaxes(B, -1, -2) if trans_b else B
    x = alpha * (A @ B)
    size = abs(alpha) * (np.abs(A) @ np.abs(B))
    if beta != 0:
        x = x + beta * f64(c)
        size = size + abs(beta) * np.abs(f64(c))
    if e.bias is not None:
        bias = f64(e.bias)
        bias = bias[..., None, :] if e.bias_axis == 1 else bias[..., :, None]
        x, size = x + bias, size + np.abs(bias)
    if e.activation is not None:
        x = activation_reference(e.activation)(x)
    x = e.scale * x
    residual = 0.0
    if e.residual is not None:
        residual = np.abs(f64(e.residual))
        x = x + f64(e.residual)
    k = A.shape[-1]
    eps = np.finfo(np.dtype(a.dtype)).eps
    bound = (k + 8) * eps * (1.2 * abs(e.scale) * size + np.abs(x) + residual)
    return x, bound + np.finfo(np.dtype(a.dtype)).tiny


def check(out, a, b, **kwargs):
    exact, bound = reference(a, b, **kwargs)
    assert out.shape == np.broadcast_shapes(exact.shape, out.shape)
    assert out.dtype == a.dtype
    error = np.abs(out - exact)
    assert np.all(error <= bound), (
        f"max error {error.max()} at {np.unravel_index(error.argmax(), error.shape)}, "
        f"bound there {bound.flat[error.argmax()]}")


SHAPES = [  # (M, K, N)
    (1, 1, 1), (2, 3, 4), (5, 7, 3), (12, 16, 32), (13, 17, 35), (31, 9, 65),
    (100, 7, 1), (1, 300, 200), (127, 513, 255), (300, 200, 97), (64, 64, 64),
    (8, 64, 3000), (3000, 64, 8), (20, 30, 4200),
    (301, 100, 290),  # packed with a shallow K block: row tiles outside (ROWS_FIRST_DEPTH)
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matches_numpy(dtype, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    check(gemm(a, b), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("m,k,n", [(7, 5, 9), (129, 400, 67), (211, 90, 150)])
def test_transposes(dtype, trans_a, trans_b, m, k, n):
    rng = np.random.default_rng(1)
    a = rand(rng, (k, m) if trans_a else (m, k), dtype)
    b = rand(rng, (n, k) if trans_b else (k, n), dtype)
    out = gemm(a, b, trans_a=trans_a, trans_b=trans_b)
    check(out, a, b, trans_a=trans_a, trans_b=trans_b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(9, 11, 13), (150, 420, 70)])
def test_strided_views_are_read_in_place(dtype, m, k, n):
    rng = np.random.default_rng(2)
    a = rand(rng, (2 * m, 3 * k), dtype)[::2, ::3]           # both strides non-unit
    b = rand(rng, (k, 2 * n), dtype)[::-1, ::2]              # negative rows, gaps
    check(gemm(a, b), a, b)
    a_f, b_f = np.asfortranarray(a), np.asfortranarray(b)    # column-major
    check(gemm(a_f, b_f), a_f, b_f)


@pytest.mark.parametrize("layout", ["transposed", "strided", "fortran"])
def test_out_views_with_any_layout(layout):
    rng = np.random.default_rng(3)
    m, k, n = 37, 50, 45
    a, b = rand(rng, (m, k), np.float32), rand(rng, (k, n), np.float32)
    bias, residual = rand(rng, (n,), np.float32), rand(rng, (m, n), np.float32)
    base = {"transposed": np.zeros((n, m), np.float32).T,
            "strided": np.zeros((m, 2 * n), np.float32)[:, ::2],
            "fortran": np.zeros((m, n), np.float32, order="F")}[layout]
    epilogue = Epilogue(bias=bias, activation="relu", residual=residual, scale=0.5)
    out = gemm(a, b, out=base, epilogue=epilogue)
    assert out is base
    check(out, a, b, epilogue=epilogue)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(0, 5, 7), (6, 5, 0), (0, 0, 0)])
def test_empty_outputs(dtype, m, k, n):
    a, b = np.ones((m, k), dtype), np.ones((k, n), dtype)
    out = gemm(a, b)
    assert out.shape == (m, n) and out.dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_k_zero_gives_beta_c_then_epilogue(dtype):
    rng = np.random.default_rng(4)
    a, b = np.ones((4, 0), dtype), np.ones((0, 6), dtype)
    assert np.array_equal(gemm(a, b), np.zeros((4, 6), dtype))
    c = rand(rng, (4, 6), dtype)
    epilogue = Epilogue(bias=np.arange(6, dtype=dtype), activation="relu", scale=2.0)
    out = gemm(a, b, beta=0.5, c=c, epilogue=epilogue)
    check(out, a, b, beta=0.5, c=c, epilogue=epilogue)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(10, 20, 30), (200, 500, 150)])
def test_alpha_beta_and_c(dtype, m, k, n):
    rng = np.random.default_rng(5)
    a, b, c = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype)
    check(gemm(a, b, alpha=-1.5, beta=0.25, c=c), a, b, alpha=-1.5, beta=0.25, c=c)
    row = rand(rng, (1, n), dtype)  # c broadcasts to M x N
    check(gemm(a, b, beta=2.0, c=row), a, b, beta=2.0, c=np.broadcast_to(row, (m, n)))
    out = c.copy()
    gemm(a, b, alpha=2.0, beta=-1.0, out=out)  # C is out: updated in place
    check(out, a, b, alpha=2.0, beta=-1.0, c=c)


def test_beta_zero_never_reads_c():
    a, b = np.ones((20, 30), np.float32), np.ones((30, 40), np.float32)
    out = np.full((20, 40), np.nan, np.float32)
    gemm(a, b, out=out, c=np.full((20, 40), np.nan, np.float32))
    assert np.all(out == 30)


EPILOGUES = [
    dict(bias="col"), dict(bias="row"), dict(residual=True), dict(scale=-0.75),
    *[dict(activation=name) for name in tuple(activations())],
    dict(bias="col", activation="gelu", residual=True, scale=0.5),
    dict(bias="row", activation="silu", residual=True),
    dict(bias="col", activation="gelu_tanh", scale=2.0),
    dict(bias="row", activation="tanh", residual=True, scale=3.0),
]


def make_epilogue(rng, dtype, m, n, bias=None, activation=None, residual=False, scale=1.0):
    return Epilogue(
        bias=None if bias is None else rand(rng, (n if bias == "col" else m,), dtype),
        bias_axis=0 if bias == "row" else 1, activation=activation,
        residual=rand(rng, (m, n), dtype) if residual else None, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("parts", EPILOGUES, ids=lambda p: "-".join(map(str, p.values())))
@pytest.mark.parametrize("m,k,n", [(13, 21, 37), (130, 400, 90)])
def test_epilogues(dtype, parts, m, k, n):
    rng = np.random.default_rng(6)
    a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
    epilogue = make_epilogue(rng, dtype, m, n, **parts)
    check(gemm(a, b, alpha=0.5, epilogue=epilogue), a, b, alpha=0.5, epilogue=epilogue)


def test_strided_epilogue_operands():
    rng = np.random.default_rng(7)
    m, k, n = 45, 400, 70
    a, b = rand(rng, (m, k), np.float32), rand(rng, (k, n), np.float32)
    c = rand(rng, (n, m), np.float32).T                     # column-major C
    bias = rand(rng, (3 * n,), np.float32)[::3]              # strided bias
    residual = rand(rng, (2 * m, 3 * n), np.float32)[::2, ::3]
    epilogue = Epilogue(bias=bias, residual=residual, activation="relu")
    out = gemm(a, b, beta=1.0, c=c, epilogue=epilogue)
    check(out, a, b, beta=1.0, c=c, epilogue=epilogue)


@pytest.mark.parametrize("dtype", DTYPES)
def test_bmm_broadcasts_batch_dims(dtype):
    rng = np.random.default_rng(8)
    a, b = rand(rng, (3, 1, 17, 23), dtype), rand(rng, (1, 4, 23, 29), dtype)
    out = bmm(a, b)
    assert out.shape == (3, 4, 17, 29)
    check(out, a, b)
    shared = rand(rng, (23, 29), dtype)  # a 2-D operand broadcasts over the batch
    check(bmm(a, shared), a, shared)


def test_bmm_with_epilogue_and_transposes():
    rng = np.random.default_rng(9)
    a, b = rand(rng, (5, 40, 130), np.float32), rand(rng, (5, 90, 40), np.float32)
    c = rand(rng, (5, 130, 90), np.float32)
    epilogue = Epilogue(bias=rand(rng, (5, 90), np.float32), activation="gelu",
                        residual=rand(rng, (130, 90), np.float32), scale=0.5)
    out = bmm(a, b, trans_a=True, trans_b=True, beta=0.5, c=c, epilogue=epilogue)
    check(out, a, b, trans_a=True, trans_b=True, beta=0.5, c=c, epilogue=epilogue)


@pytest.mark.parametrize("m,k,n,trans_a", [
    (333, 777, 555, False),   # rows split, B packed once and shared, A read in place
    (333, 777, 555, True),    # the same with A packed per piece
    (256, 512, 700, False),   # rows 2 KiB apart: A packed (L1 sets)
    (20, 2000, 2000, False),  # too few rows: columns split, each piece packs its B
])
def test_identical_across_thread_counts(m, k, n, trans_a, monkeypatch):
    monkeypatch.setattr(gemm_config, "SHARED_B_ELEMENTS", 1 << 18)  # several B chunks
    pieces = spy_on_pieces(monkeypatch)
    rng = np.random.default_rng(10)
    a = rand(rng, (k, m) if trans_a else (m, k), np.float32)
    b = rand(rng, (k, n), np.float32)
    epilogue = Epilogue(bias=rand(rng, (n,), np.float32), activation="relu")
    results = [gemm(a, b, trans_a=trans_a, epilogue=epilogue, threads=t) for t in (1, 2, 3)]
    assert all(np.array_equal(results[0], r) for r in results[1:])
    assert max(pieces) >= 2  # the work was really split
    check(results[0], a, b, trans_a=trans_a, epilogue=epilogue)


@pytest.mark.parametrize("n, in_place", [(512, 1), (1536, 0)])
def test_narrow_column_pieces_read_a_in_place(n, in_place, monkeypatch):
    """Rows of A 2 KiB apart are packed, except into column pieces of at most
    config.NARROW_PIECE_COLUMNS, each of which would pack all of A again; the same bits."""
    records = []
    run = gemm_jobs.Job.run

    def spy(job):
        records.append(job.then.copy())
        run(job)

    monkeypatch.setattr(gemm_jobs.Job, "run", spy)
    rng = np.random.default_rng(17)
    a, b = rand(rng, (64, 512), np.float32), rand(rng, (512, n), np.float32)
    together = gemm(a, b, threads=2)
    (pieces,) = records
    column = gemm_jobs.FIELDS.index("a_in_place")
    assert len(pieces) == 4 and (pieces[:, column] == in_place).all()
    assert np.array_equal(together, gemm(a, b, threads=1))
    check(together, a, b)


def test_batches_identical_across_thread_counts(monkeypatch):
    pieces = spy_on_pieces(monkeypatch)
    rng = np.random.default_rng(16)
    batch, b = rand(rng, (3, 400, 300), np.float32), rand(rng, (300, 250), np.float32)
    results = [bmm(batch, b, threads=t) for t in (1, 2, 4)]
    assert all(np.array_equal(results[0], r) for r in results[1:])
    assert max(pieces) >= 3
    check(results[0], batch, b)


def spy_on_pieces(monkeypatch) -> list:
    """A list that gets the number of pieces of every parallel run."""
    seen, run = [], gemm_jobs.Job.run

    def spy(job):
        seen.append(len(job.then))
        run(job)

    monkeypatch.setattr(gemm_jobs.Job, "run", spy)
    return seen


def test_native_code_stays_in_bounds():
    """Operands are views into larger buffers: NaN around (and between the elements of)
    every input, and a sentinel around the output. A stray read would put NaN into the
    result; a stray write would change a sentinel."""
    rng = np.random.default_rng(11)
    for m, k, n, trans_a, trans_b in [(13, 19, 35, 0, 0), (131, 403, 67, 0, 1),
                                      (97, 390, 129, 1, 0), (1, 1, 1, 1, 1),
                                      (25, 3, 47, 0, 0)]:
        def embed(shape):
            big = np.full((shape[0] * 2 + 8, shape[1] * 2 + 8), np.nan, np.float32)
            view = big[4:4 + 2 * shape[0]:2, 4:4 + 2 * shape[1]:2]
            view[...] = rand(rng, shape, np.float32)
            return view

        a = embed((k, m) if trans_a else (m, k))
        b = embed((n, k) if trans_b else (k, n))
        c, residual, bias = embed((m, n)), embed((m, n)), embed((1, n))
        out_buffer = np.full((m + 8, 2 * n + 8), 7.0, np.float32)
        out = out_buffer[4:4 + m, 4:4 + n]  # unit column stride: written with masks
        epilogue = Epilogue(bias=bias[0], residual=residual, activation="relu")
        gemm(a, b, out=out, beta=0.5, c=c, trans_a=bool(trans_a), trans_b=bool(trans_b),
             epilogue=epilogue)
        check(out, a, b, beta=0.5, c=c, trans_a=bool(trans_a), trans_b=bool(trans_b),
              epilogue=epilogue)
        outside = np.ones(out_buffer.shape, bool)
        outside[4:4 + m, 4:4 + n] = False
        assert np.all(out_buffer[outside] == 7.0)


def test_direct_and_packed_paths_agree():
    rng = np.random.default_rng(12)
    side = int(round(gemm_config.DIRECT_MAX_MACS ** (1 / 3)))
    a, b = rand(rng, (side, side), np.float64), rand(rng, (side, side), np.float64)
    direct = gemm(a, b)
    packed = gemm(a, b[:, ::-1])[:, ::-1]  # B with stride -1 along N takes the packed path
    check(direct, a, b)
    check(packed, a, b)


def _spy_on_packed_entries(monkeypatch) -> list:
    """A list that gets the K block depth of every packed job prepared from now on."""
    asked, real = [], gemm_jobs._packed_entry
    monkeypatch.setattr(gemm_jobs, "_packed_entry",
                        lambda calls, kc: asked.append(kc) or real(calls, kc))
    return asked


def test_a_small_product_with_b_transposed_seen_once_runs_direct_with_the_packed_result(
        monkeypatch):
    rng = np.random.default_rng(31)
    m, n, k = 509, 191, 67  # above DIRECT_MAX_MACS, within DIRECT_SPREAD_MAX_MACS
    assert gemm_config.DIRECT_MAX_MACS < m * n * k <= gemm_config.DIRECT_SPREAD_MAX_MACS
    a = rand(rng, (m, k + 3), np.float32)[:, :k]  # rows 70 elements apart
    b = rand(rng, (n, k), np.float32)
    asked = _spy_on_packed_entries(monkeypatch)
    first = gemm(a, b, trans_b=True)
    assert asked == []  # a contiguous copy of B on the direct kernel, no packed variant
    packed = gemm(a, b, trans_b=True, specialise=False)
    assert asked == [k]  # all of K in one block
    again = gemm(a, b, trans_b=True)  # seen twice: its specialised kernel
    check(first, a, b, trans_b=True)
    assert np.array_equal(first, packed) and np.array_equal(first, again)


def test_a_product_whose_a_rows_crowd_l1_sets_is_packed_above_direct_max_macs(monkeypatch):
    rng = np.random.default_rng(32)
    m, n, k = 301, 101, 150
    assert gemm_config.DIRECT_MAX_MACS < m * n * k <= gemm_config.DIRECT_SPREAD_MAX_MACS
    a = rand(rng, (m, 512), np.float32)[:, :k]  # rows 2 KiB apart
    b = rand(rng, (k, n), np.float32)
    asked = _spy_on_packed_entries(monkeypatch)
    check(gemm(a, b), a, b)
    assert asked


@pytest.mark.slow
def test_tall_skinny():
    rng = np.random.default_rng(13)
    m, k, n = 4096, 64, 4096
    a, b = rand(rng, (m, k), np.float32), rand(rng, (k, n), np.float32)
    check(gemm(a, b), a, b)
    check(gemm(b.T, a.T), b.T, a.T)  # 4096 x 4096 @ 4096 x 64 ... as K-deep and narrow


def test_kiln_tensors_are_accepted():
    class Tensor:
        def __init__(self, array):
            self.array = array

        def _np(self):
            return self.array

    a, b = np.ones((3, 4), np.float32), np.ones((4, 5), np.float32)
    assert np.all(gemm(Tensor(a), Tensor(b)) == 4)


def test_bad_inputs_raise_clear_errors():
    f32 = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 6\)"):
        gemm(f32, np.ones((5, 6), np.float32))
    with pytest.raises(TypeError, match="float32.*float64|float64.*float32"):
        gemm(f32, np.ones((4, 2), np.float64))
    with pytest.raises(TypeError, match="int64"):
        gemm(np.ones((3, 4), np.int64), np.ones((4, 2), np.int64))
    with pytest.raises(ValueError, match="2-D"):
        gemm(np.ones((2, 3, 4), np.float32), f32)
    with pytest.raises(ValueError, match="2-D"):
        gemm(np.ones(4, np.float32), f32)
    with pytest.raises(ValueError, match="at least 2"):
        bmm(np.ones(4, np.float32), f32)
    with pytest.raises(ValueError, match="do not broadcast"):
        bmm(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))
    with pytest.raises(ValueError, match="bias"):
        gemm(f32, f32.T, epilogue=Epilogue(bias=np.ones(4, np.float32)))
    with pytest.raises(ValueError, match="bias_axis"):
        gemm(f32, f32.T, epilogue=Epilogue(bias=np.ones(3, np.float32), bias_axis=2))
    with pytest.raises(ValueError, match="activation"):
        gemm(f32, f32.T, epilogue=Epilogue(activation="softplus"))
    with pytest.raises(ValueError, match="out must be"):
        gemm(f32, f32.T, out=np.empty((3, 4), np.float32))
    with pytest.raises(ValueError, match="read-only"):
        gemm(f32, f32.T, out=np.broadcast_to(np.empty(3, np.float32), (3, 3)))
    with pytest.raises(ValueError, match="no C"):
        gemm(f32, f32.T, beta=1.0)
    with pytest.raises(TypeError, match="numpy array"):
        gemm([[1.0]], f32)


def test_inputs_overlapping_out_are_read_before_written():
    rng = np.random.default_rng(14)
    x = rand(rng, (40, 40), np.float64)
    w = rand(rng, (40, 40), np.float64)
    expected, bound = reference(x, w, epilogue=Epilogue(residual=x))
    gemm(x, w, out=x, epilogue=Epilogue(residual=x))  # x = x @ w + x, in place
    assert np.all(np.abs(x - expected) <= bound)


def test_kernels_are_cached_per_dtype_and_epilogue():
    spec = EpilogueSpec(bias="col", activation="relu")
    assert gemm_native.kernel(np.float32, spec) is gemm_native.kernel(np.float32, spec)
    assert gemm_native.kernel(np.float32, spec) is not gemm_native.kernel(np.float64, spec)


def test_autotuner_stores_its_choice(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_AUTOTUNE", "1")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gemm_config, "TUNE_SIZE", 128)
    monkeypatch.setattr(gemm_tune, "_chosen", {})
    rng = np.random.default_rng(15)
    a, b = rand(rng, (250, 260), np.float32), rand(rng, (260, 270), np.float32)  # packed
    check(gemm(a, b), a, b)
    stored = json.loads((tmp_path / gemm_tune.FILE_NAME).read_text())
    assert len(stored) == 1
    kernel = gemm_native.kernel(np.float32, EpilogueSpec())
    assert gemm_native.Blocking(**next(iter(stored.values()))) in gemm_tune.candidates(kernel)
    monkeypatch.setenv("KILN_AUTOTUNE", "0")
    assert gemm_tune.blocking(kernel) == gemm_tune.default_blocking(kernel)


@pytest.mark.parametrize("plant", ["fifo", "dev-zero", "world-writable"])
def test_stored_blockings_are_read_only_from_a_trusted_file(plant, tmp_path):
    """A FIFO or a link to /dev/zero in place of the tuning file must not hang or eat
    memory, nor a file others can write steer the GEMM: each reads as nothing stored."""
    path = tmp_path / gemm_tune.FILE_NAME
    if plant == "fifo":
        os.mkfifo(path)
    elif plant == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text('{"x": {"mc": 8, "kc": 8, "nc": 8}}')
        path.chmod(0o666)
    code = ("import sys; from runtime.cpu.gemm import tune as gemm_tune; "
            "sys.exit(0 if gemm_tune._load() == {} else 3)")
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path))
    limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)))
    done = subprocess.run([sys.executable, "-c", code], env=env, timeout=60, cwd=ROOT,
                          preexec_fn=limit)  # a read that never ends fails, not the machine
    assert done.returncode == 0


@pytest.mark.parametrize("lanes_f32", [8, 4])  # the tiles chosen for AVX2 and for SSE
def test_narrower_vector_tiles(lanes_f32, monkeypatch):
    chosen = {dtype: gemm_native.default_tile(dtype, lanes_f32)
              for dtype in ("float32", "float64")}
    monkeypatch.setattr(gemm_native, "default_tile", lambda dtype, lanes: chosen[dtype])
    monkeypatch.setattr(gemm_native, "_kernels", {})
    rng = np.random.default_rng(17)
    for dtype in DTYPES:
        for m, k, n in [(7, 5, 9), (127, 130, 61), (250, 300, 270)]:
            a, b = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype)
            epilogue = Epilogue(bias=rand(rng, (n,), dtype), activation="gelu")
            check(gemm(a, b, epilogue=epilogue, threads=2), a, b, epilogue=epilogue)


@pytest.mark.parametrize("lanes_f32", [16, 8, 4])
def test_a_transposed_b_packs_as_the_same_b_laid_out_by_rows(lanes_f32, monkeypatch):
    """pack_b's transposing path (B's columns contiguous: linear's weight) and its
    contiguous path put B's values in the same places, over partial panels and depths
    that are not whole vectors."""
    from runtime.pool import Items
    chosen = {dtype: gemm_native.default_tile(dtype, lanes_f32)
              for dtype in ("float32", "float64")}
    monkeypatch.setattr(gemm_native, "default_tile", lambda dtype, lanes: chosen[dtype])
    monkeypatch.setattr(gemm_native, "_kernels", {})
    rng = np.random.default_rng(23)
    for dtype in DTYPES:
        pack_b = gemm_native.kernel(dtype, EpilogueSpec()).items["pack_b"]
        nr = chosen[np.dtype(dtype).name].nr
        for k, n in [(1, 1), (15, 7), (16, nr), (37, 2 * nr + 5), (160, 3 * nr)]:
            b_t = rand(rng, (n, k), dtype)  # B = b_t.T: unit row stride
            b = np.ascontiguousarray(b_t.T)
            size = -(-n // nr) * nr * k
            packings = []
            for source, rs, cs in ((b_t, 1, k), (b, n, 1)):
                dst = np.full(size, np.nan, dtype)
                record = np.array([[source.ctypes.data, rs, cs, k, n, dst.ctypes.data]],
                                  np.int64)
                Items(None, (pack_b, record.ctypes.data, 1, record.strides[0])).run(1)
                # panels (p, k, j) to columns: padding lanes (zeros or copies) dropped
                panels = dst.reshape(-1, k, nr).transpose(1, 0, 2).reshape(k, -1)
                packings.append(panels[:, :n])
            assert np.array_equal(packings[0], b) and np.array_equal(packings[1], b)


@pytest.mark.parametrize("lanes", [16, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kernels_call_no_library_functions(dtype, lanes):
    """No memset/memcpy/libm calls: a call through the GOT in one module has shifted the
    constant-pool addresses of modules the host JIT loaded after it."""
    from runtime.llvm.jit import host_jit
    from runtime.cpu.values import emit_activation
    from runtime.cpu.gemm.emit.kernel import build_module
    jit = host_jit()
    tile = gemm_native.default_tile(dtype, lanes)
    module = jit.new_module("gemm_no_libcalls")
    build_module(module, f"no_libcalls_{dtype}_{lanes}", tile,
                 EpilogueSpec("col", "gelu", True), emit_activation)
    assembly = jit.assembly(module)
    assert "@GOT" not in assembly.replace("@GOTOFF", "") and "@PLT" not in assembly


def test_the_packed_kernel_prefetches_each_tile_of_c_for_writing():
    """One prefetch per cache line of a tile row (64-byte lines), for writing into L1."""
    import llvmlite.ir as ir

    from runtime.cpu.values import emit_activation
    from runtime.cpu.gemm.emit.kernel import build_module
    tile = gemm_native.default_tile("float32", 16)
    module = ir.Module("gemm_prefetch")
    build_module(module, "prefetch_f32", tile, EpilogueSpec(), emit_activation)
    calls = [line for line in str(module).splitlines() if "llvm.prefetch" in line
             and "call" in line]
    lines_per_row = max(1, tile.nr * 4 // 64)
    # tiles from A packed or in place, each rows-first or columns-first: four loop nests
    assert len(calls) == 4 * tile.mr * lines_per_row
    assert all(line.rstrip().endswith("i32 1, i32 3, i32 1)") for line in calls)


@pytest.mark.parametrize("m, k, n, trans_b", [(7, 13, 5, False), (64, 64, 64, False),
                                              (33, 17, 9, True), (8, 1000, 8, True)])
def test_a_repeated_small_product_gets_a_specialised_kernel_with_the_same_result(
        m, k, n, trans_b):
    """The second sight of a small request compiles a gemm_small kernel for it; its
    results are bitwise those of the generic kernels that served the first call (one
    FMA chain along K per element, the same store), so a result never depends on how
    often a shape was seen."""
    rng = np.random.default_rng(m * k * n)
    a = rand(rng, (m, k), np.float32)
    b = rand(rng, (n, k) if trans_b else (k, n), np.float32)
    epilogue = Epilogue(bias=rand(rng, n, np.float32), activation="gelu", scale=0.5,
                        residual=rand(rng, (m, n), np.float32))
    for options in ({}, {"alpha": 1.5, "epilogue": epilogue}):
        first = gemm(a, b, trans_b=trans_b, **options)
        second = gemm(a, b, trans_b=trans_b, **options)
        assert isinstance(plan_of("gemm", a, b, trans_b=trans_b, **options),
                          gemm_plans.SmallPlan)
        third = gemm(a, b, trans_b=trans_b, **options)
        assert np.array_equal(first, second) and np.array_equal(second, third)
        check(third, a, b, trans_b=trans_b, **options)


def test_a_specialised_kernel_reads_the_arrays_of_each_call():
    rng = np.random.default_rng(21)
    bias_rows = rand(rng, (3, 24), np.float32)
    for round_ in range(3):
        a, b = rand(rng, (20, 30), np.float32), rand(rng, (30, 24), np.float32)
        epilogue = Epilogue(bias=bias_rows[round_], activation="relu")
        check(gemm(a, b, epilogue=epilogue), a, b, epilogue=epilogue)
        check(gemm(a.T.copy().T, b), a, b)  # a column-major A: a request of its own


def test_a_repeated_batch_of_small_products_runs_on_a_specialised_kernel():
    from runtime.cpu.gemm import small as gemm_small
    rng = np.random.default_rng(22)
    a, b = rand(rng, (6, 1, 9, 11), np.float64), rand(rng, (3, 11, 13), np.float64)
    compiled_before = len(gemm_small._by_call)
    results = [bmm(a, b, alpha=2.0, threads=2) for _ in range(3)]
    assert len(gemm_small._by_call) == compiled_before + 1
    assert all(np.array_equal(results[0], r) for r in results[1:])
    check(results[-1], a, b, alpha=2.0)


def test_a_repeated_bmm_request_reads_the_arrays_and_scalars_of_each_call():
    """The plan of a repeated bmm() call keeps its products' records relative to the
    operands: new arrays of the same layout, and a new alpha and scale, are used."""
    rng = np.random.default_rng(23)
    for round_ in range(4):
        a, b = rand(rng, (5, 6, 7), np.float32), rand(rng, (5, 7, 4), np.float32)
        epilogue = Epilogue(bias=rand(rng, 4, np.float32), activation="relu",
                            scale=1.0 + round_)
        check(bmm(a, b, alpha=0.5 * round_, epilogue=epilogue), a, b, alpha=0.5 * round_,
              epilogue=epilogue)


@pytest.mark.parametrize("api, shape_a, shape_b, trans_b", [
    ("gemm", (200, 300), (250, 300), True),  # packed, shared B or columns on 2 threads
    ("gemm", (40, 700), (700, 90), False),
    ("bmm", (3, 250, 260), (260, 270), False)])  # above DIRECT_SPREAD_MAX_MACS: packed
def test_a_planned_request_reads_the_arrays_and_scalars_of_each_call(api, shape_a, shape_b,
                                                                     trans_b):
    """From its second sight on, a request runs from a plan whose records hold its
    operands' addresses relative to them: each call's arrays, alpha and scale are used,
    and the result is bitwise that of the unplanned first call."""
    product = gemm if api == "gemm" else bmm
    rng = np.random.default_rng(24)
    n = shape_b[0] if trans_b else shape_b[-1]
    m = shape_a[-2]
    first = None
    for round_ in range(4):
        a, b = rand(rng, shape_a, np.float32), rand(rng, shape_b, np.float32)
        epilogue = Epilogue(bias=rand(rng, n, np.float32), activation="relu",
                            scale=1.0 + round_, residual=rand(rng, (m, n), np.float32))
        options = dict(alpha=0.5 + round_, trans_b=trans_b, epilogue=epilogue)
        result = product(a, b, threads=2, **options)
        check(result, a, b, **options)
        if round_ == 0:
            first = (a, b, options, result)
    a, b, options, result = first
    assert np.array_equal(product(a, b, threads=2, **options), result)
    assert isinstance(plan_of(api, a, b, threads=2, **options), gemm_plans.Plan)


def test_a_plan_in_use_by_another_thread_is_not_shared():
    import threading
    rng = np.random.default_rng(25)
    b = rand(rng, (300, 200), np.float32)
    inputs = [rand(rng, (260, 300), np.float32) for _ in range(8)]
    gemm(inputs[0], b), gemm(inputs[0], b)  # the plan exists now
    results = [None] * len(inputs)

    def work(index):
        for _ in range(5):
            results[index] = gemm(inputs[index], b)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for a, result in zip(inputs, results):
        check(result, a, b)


def test_a_direct_product_is_cut_in_equal_row_pieces_one_per_thread():
    """From config.SPLIT_MIN_MACS on, a small product whose M divides by the thread
    count runs as that many row pieces of one specialised kernel: the result is bitwise
    the one of one thread (each element keeps its FMA chain) and of the first,
    generic-kernel call."""
    rng = np.random.default_rng(26)
    a, b = rand(rng, (128, 96), np.float32), rand(rng, (96, 90), np.float32)
    assert 128 * 96 * 90 >= gemm_config.SPLIT_MIN_MACS
    alone = [gemm(a, b, threads=1) for _ in range(3)]
    together = [gemm(a, b, threads=2) for _ in range(3)]
    assert all(np.array_equal(alone[0], r) for r in alone[1:] + together)
    plan = plan_of("gemm", a, b, threads=2)
    if runtime_pool.available():
        key = plan.kernel.key
        assert key.cut.pieces == key.cut.threads == 2 and key.m == 64
    check(together[-1], a, b)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_small_batch_runs_in_one_call_of_a_specialised_kernel(threads):
    """Evenly spaced batch elements (B broadcast) are the pieces of one specialised
    kernel call, from the second sight on: the bits of the generic first call."""
    rng = np.random.default_rng(28)
    a, b = rand(rng, (8, 64, 32), np.float32), rand(rng, (32, 64), np.float32)
    epilogue = Epilogue(bias=rand(rng, (64,), np.float32), activation="tanh")
    results = [bmm(a, b, epilogue=epilogue, threads=threads) for _ in range(3)]
    assert all(np.array_equal(results[0], r) for r in results[1:])
    plan = plan_of("bmm", a, b, epilogue=epilogue, threads=threads)
    assert isinstance(plan, gemm_plans.SmallPlan)
    cut = plan.kernel.key.cut
    assert cut.pieces == 8 and dict(cut.steps) == {"a": 64 * 32, "out": 64 * 64}
    assert cut.threads == (threads if runtime_pool.available() else 1)
    check(results[-1], a, b, epilogue=epilogue)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_in_one_call_writes_only_its_output(threads):
    """A broadcast A, a transposed B (each piece copies its own), out a view inside a NaN
    frame: every element written once, nothing around it touched."""
    from runtime.cpu.gemm import small as gemm_small
    rng = np.random.default_rng(31)
    a = rand(rng, (40, 33), np.float32)
    b = rand(rng, (8, 45, 33), np.float32).swapaxes(-1, -2)
    frame = np.full((8, 42, 50), np.nan, np.float32)
    out = frame[:, 1:41, 2:47]
    for _ in range(3):
        out[...] = np.nan
        bmm(a, b, out=out, threads=threads)
        check(out, a, b)
    frame[:, 1:41, 2:47] = 0
    assert np.isnan(frame).sum() == frame.size - out.size
    assert any(key.cut.pieces == 8 and dict(key.cut.steps) == {"b": 45 * 33, "out": 42 * 50}
               and key.cut.threads == (threads if runtime_pool.available() else 1)
               for key in gemm_small._kernels)


def test_a_batch_not_evenly_spaced_runs_as_records():
    """Batch dims (2, 3) over a view whose elements are not evenly spaced: records of
    the specialised kernel's item, one per product."""
    rng = np.random.default_rng(29)
    a = rand(rng, (2, 4, 6, 5), np.float32)[:, :3]  # dim 0 steps 4 elements of dim 1
    b = rand(rng, (5, 7), np.float32)
    results = [bmm(a, b) for _ in range(3)]
    assert all(np.array_equal(results[0], r) for r in results[1:])
    plan = plan_of("bmm", a, b)
    assert isinstance(plan, gemm_plans.Plan)
    check(results[-1], a, b)


def test_row_pieces_move_every_operand_by_their_rows():
    """C, a row bias, the residual and a strided A all move with the row pieces of a
    specialised kernel on two threads: the bits of one thread, within the bound."""
    rng = np.random.default_rng(30)
    m, k, n = 64, 72, 70
    a = rand(rng, (m, 2 * k), np.float32)[:, ::2]
    b, c = rand(rng, (k, n), np.float32), rand(rng, (n, m), np.float32).T
    epilogue = Epilogue(bias=rand(rng, (m,), np.float32), bias_axis=0, activation="silu",
                        residual=rand(rng, (m, n), np.float32), scale=0.5)
    options = dict(alpha=1.5, beta=0.25, c=c, epilogue=epilogue)
    alone = [gemm(a, b, threads=1, **options) for _ in range(3)]
    together = [gemm(a, b, threads=2, **options) for _ in range(3)]
    assert all(np.array_equal(alone[0], r) for r in alone[1:] + together)
    check(together[-1], a, b, **options)
    if runtime_pool.available():
        from runtime.cpu.gemm import small as gemm_small
        assert any(key.cut.pieces == 2 and (key.m, key.n, key.k) == (32, n, k) and
                   dict(key.cut.steps).keys() == {"a", "c", "out", "bias", "res"}
                   for key in gemm_small._kernels)


def test_a_bmm_plan_does_not_serve_gemm():
    """gemm() on the operands of a planned bmm() request still refuses them."""
    rng = np.random.default_rng(27)
    a, b = rand(rng, (2, 5, 6), np.float32), rand(rng, (2, 6, 7), np.float32)
    for _ in range(3):
        check(bmm(a, b), a, b)
    with pytest.raises(ValueError, match="must be 2-D"):
        gemm(a, b)


def test_second_sight_remembers_keys_until_its_limit():
    sightings = gemm_native.SecondSight(limit=2)
    assert not sightings.again("a") and sightings.again("a")
    assert not sightings.again("b")
    assert not sightings.again("c")  # the limit was reached: "a" and "b" are forgotten
    assert not sightings.again("a") and sightings.again("c")


@pytest.mark.parametrize("dtype", [">f4", ">f8", ">f2", "i8"])
def test_operands_of_another_type_or_byte_order_are_refused(dtype):
    """Big-endian floats used to pass the check and come out as zeros. (float16 and
    bfloat16 operands are taken: test_gemm_half_operands.py.)"""
    a = np.ones((4, 4), dtype)
    with pytest.raises(TypeError, match="both must be float32, float64, bfloat16 or "
                                        "float16, in this machine's byte order"):
        gemm(a, a)
