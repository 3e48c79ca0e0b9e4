"""Shape-specialised small GEMM kernels (runtime/cpu/gemm/small.py) against numpy float64,
every result within the error bound of runtime/cpu/gemm/api.py (asserted by
test_gemm.reference). Each new shape or layout compiles a kernel (~30-200 ms): shapes
are few and small."""
import ctypes
from dataclasses import replace

import numpy as np
import pytest

from runtime.cpu.gemm import config as gemm_config
from runtime.cpu.gemm import small as gemm_small
from runtime.cpu.gemm.api import Epilogue
from ir.records import activations
from runtime.cpu.gemm.emit.kernel import EpilogueSpec

ACTIVATIONS = tuple(activations())
from runtime.cpu.gemm.small import Cut, SmallKey, choose_tile, fits, small_kernel
from runtime.pool import available as pool_available
from tests.runtime.cpu.test_gemm import reference

DTYPES = [np.float32, np.float64]


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def strides(x) -> tuple:
    return tuple(s // x.itemsize for s in x.strides)


def run(a, b, out=None, *, alpha=1.0, beta=0.0, c=None, epilogue=Epilogue(),
        on_addresses=False, rows=None, cut=Cut()):
    """out = the small kernel's product (out preallocated or new; through its fast entry
    where it has one, else or when `on_addresses` through ctypes), checked against the
    float64 reference and its error bound. `rows` and `cut`: a kernel for that many rows
    covering all of them in that Cut."""
    (m, k), n = a.shape, b.shape[1]
    out = np.full((m, n), np.nan, a.dtype) if out is None else out
    e = epilogue
    bias = None if e.bias is None else ("col" if e.bias_axis == 1 else "row")
    spec = EpilogueSpec(bias, e.activation, e.residual is not None)
    kernel = small_kernel(SmallKey(
        a.dtype.name, rows or m, n, k, strides(a), strides(b), strides(out)[0], spec,
        c_strides=None if c is None else strides(c),
        bias_stride=1 if e.bias is None else strides(e.bias)[0],
        residual_strides=None if e.residual is None else strides(e.residual),
        alpha=alpha != 1, scale=e.scale != 1, cut=cut))
    optional = {"c": c, "bias": e.bias, "res": e.residual, "alpha": alpha, "beta": beta,
                "scale": e.scale}
    args = [a, b, out] + [optional[name] for name, _ in kernel.key.args[3:]]
    if kernel.fast is not None and not on_addresses:
        assert kernel.fast(*args) is out
    else:
        kernel.fn(*[x.__array_interface__["data"][0] if isinstance(x, np.ndarray) else x
                    for x in args], *kernel.pool_args)
    exact, bound = reference(a, b, alpha=alpha, beta=beta, c=c, epilogue=e)
    error = np.abs(out - exact)
    assert np.all(error <= bound), (
        f"max error {error.max()} at {np.unravel_index(error.argmax(), error.shape)}, "
        f"bound there {bound.flat[error.argmax()]}")
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 13, 5), (127, 31, 61), (64, 64, 64),
                                   (33, 17, 9)])
def test_matches_numpy(dtype, m, n, k):
    rng = np.random.default_rng(0)
    run(rand(rng, (m, k), dtype), rand(rng, (k, n), dtype))


@pytest.mark.parametrize("transposed_b", [False, True])
@pytest.mark.parametrize("dtype,residue", [(np.float32, r) for r in range(16)]
                         + [(np.float64, r) for r in range(8)])
def test_every_n_tail(dtype, residue, transposed_b):
    """N = one whole vector plus every residue (a whole second vector for 0), B in
    place or transposed (copied through the vector transpose)."""
    rng = np.random.default_rng(residue)
    lanes = 16 if dtype == np.float32 else 8
    n, k = lanes + (residue or lanes), 3 + residue
    a = rand(rng, (5, k), dtype)
    b = rand(rng, (n, k), dtype).T if transposed_b else rand(rng, (k, n), dtype)
    run(a, b)


EPILOGUES = [
    dict(bias="col"), dict(bias="row"), dict(residual=True), dict(scale=-0.75),
    *[dict(activation=name) for name in ACTIVATIONS],
    dict(bias="col", activation="gelu", residual=True, scale=0.5),
    dict(bias="row", activation="silu", residual=True),
]


def make_epilogue(rng, dtype, m, n, bias=None, activation=None, residual=False, scale=1.0):
    return Epilogue(
        bias=None if bias is None else rand(rng, (n if bias == "col" else m,), dtype),
        bias_axis=0 if bias == "row" else 1, activation=activation,
        residual=rand(rng, (m, n), dtype) if residual else None, scale=scale)


@pytest.mark.parametrize("parts", EPILOGUES, ids=lambda p: "-".join(map(str, p.values())))
def test_epilogues(parts):
    rng = np.random.default_rng(1)
    m, n, k = 13, 37, 21
    a, b = rand(rng, (m, k), np.float32), rand(rng, (k, n), np.float32)
    run(a, b, alpha=0.5, epilogue=make_epilogue(rng, np.float32, m, n, **parts))


@pytest.mark.parametrize("dtype", DTYPES)
def test_alpha_beta_c_and_everything_float64(dtype):
    rng = np.random.default_rng(2)
    m, n, k = 11, 19, 23
    a, b, c = rand(rng, (m, k), dtype), rand(rng, (k, n), dtype), rand(rng, (m, n), dtype)
    epilogue = make_epilogue(rng, dtype, m, n, bias="col", activation="gelu_tanh",
                             residual=True, scale=2.0)
    run(a, b, alpha=-1.5, beta=0.25, c=c, epilogue=epilogue, on_addresses=True)


def test_strided_and_transposed_views_in_place():
    """A transposed and strided, B strided both ways (the element copy), C column-major,
    a strided bias and residual, out a view whose surroundings must stay untouched."""
    rng = np.random.default_rng(3)
    m, n, k = 29, 21, 18
    a_t = rand(rng, (k, m), np.float32).T
    a_strided = rand(rng, (2 * m, 3 * k), np.float32)[::2, ::3]
    b_strided = rand(rng, (3 * k, 2 * n), np.float32)[::3, ::2]
    c = rand(rng, (n, m), np.float32).T
    epilogue = Epilogue(bias=rand(rng, (3 * n,), np.float32)[::3], activation="relu",
                        residual=rand(rng, (2 * m, 3 * n), np.float32)[::2, ::3])
    for a in (a_t, a_strided):
        frame = np.full((m + 2, n + 9), np.nan, np.float32)
        out = frame[1:-1, 4:4 + n]
        run(a, b_strided, out, beta=1.0, c=c, epilogue=epilogue)
        frame[1:-1, 4:4 + n] = 0
        assert np.isnan(frame).sum() == frame.size - m * n


def test_transposed_b_with_whole_and_partial_blocks():
    rng = np.random.default_rng(4)
    m, n, k = 9, 40, 35  # K: two whole 16-blocks and a tail; N likewise
    a, b = rand(rng, (m, k), np.float32), rand(rng, (n, k), np.float32).T
    run(a, b, epilogue=Epilogue(bias=rand(rng, (m,), np.float32), bias_axis=0))


needs_pool = pytest.mark.skipif(not pool_available(),
                                reason="pieces run on runtime.pool (Linux on x86-64)")


@needs_pool
@pytest.mark.parametrize("pieces, threads", [(2, 2), (3, 2), (3, 1)])
@pytest.mark.parametrize("layout", ["plain", "epilogue", "transposed-b", "strided"])
def test_row_pieces_give_the_one_piece_result_bitwise(layout, pieces, threads):
    """A kernel for 6 rows cut over 6 * pieces: every row once, each piece's operands
    (A, out, C, a row bias, the residual) moved by its rows, B copied by each piece
    where it needs a copy; the same bits as one kernel for all rows."""
    rng = np.random.default_rng(7)
    m, n, k, rows = 6 * pieces, 37, 29, 6
    a, b = rand(rng, (m, k), np.float32), rand(rng, (k, n), np.float32)
    options = {}
    if layout == "epilogue":
        options = dict(c=rand(rng, (n, m), np.float32).T, beta=0.5, epilogue=make_epilogue(
            rng, np.float32, m, n, bias="row", activation="tanh", residual=True, scale=2.0))
    elif layout == "transposed-b":
        b = rand(rng, (n, k), np.float32).T
    elif layout == "strided":
        a = rand(rng, (2 * m, 3 * k), np.float32)[::2, ::3]
        b = rand(rng, (k, 2 * n), np.float32)[:, ::2]
    steps = [("a", rows * strides(a)[0]), ("out", rows * n)]
    if layout == "epilogue":
        steps += [("c", rows), ("bias", rows), ("res", rows * n)]
    one = run(a, b, **options)
    cut = Cut(pieces, tuple(steps), threads)
    assert np.array_equal(run(a, b, rows=rows, cut=cut, **options), one)


@needs_pool
@pytest.mark.parametrize("threads", [1, 2])
def test_a_batch_in_one_call_gives_each_products_result_bitwise(threads):
    """Five products (A and out moving, B broadcast, a column bias) in one call."""
    rng = np.random.default_rng(8)
    batch, m, n, k = 5, 7, 21, 11
    a, b = rand(rng, (batch, m, k), np.float32), rand(rng, (k, n), np.float32)
    epilogue = Epilogue(bias=rand(rng, (n,), np.float32), activation="relu")
    each = np.stack([run(a[i], b, epilogue=epilogue) for i in range(batch)])
    kernel = small_kernel(SmallKey("float32", m, n, k, (k, 1), (n, 1), n,
                                   EpilogueSpec("col", "relu"),
                                   cut=Cut(batch, (("a", m * k), ("out", m * n)), threads)))
    out = np.full((batch, m, n), np.nan, np.float32)
    if kernel.fast is not None:
        assert kernel.fast(a, b, out, epilogue.bias) is out
    else:
        kernel.fn(a.ctypes.data, b.ctypes.data, out.ctypes.data, epilogue.bias.ctypes.data,
                  *kernel.pool_args)
    assert np.array_equal(out, each)


PIECE_4x5x3 = SmallKey("float32", 4, 5, 3, (3, 1), (5, 1), 5)  # 4 rows of 8 x 5 x 3


def test_a_cut_is_checked():
    with pytest.raises(ValueError, match="3 pieces cannot run on 4 threads"):
        small_kernel(replace(PIECE_4x5x3, cut=Cut(3, (), 4)))
    with pytest.raises(ValueError, match="does not take"):
        small_kernel(replace(PIECE_4x5x3, cut=Cut(2, (("bias", 4),), 1)))
    kernel = small_kernel(replace(PIECE_4x5x3, cut=Cut(2, (("a", 12), ("out", 20)), 1)))
    assert kernel.item == 0 and kernel.pool_args == ()
    if kernel.fast is not None:
        a, b = np.ones((8, 3), np.float32), np.ones((3, 5), np.float32)
        with pytest.raises(TypeError, match="takes 3 arrays"):
            kernel.fast(a, b)
        out = np.zeros((8, 5), np.float32)
        assert kernel.fast(a, b, out) is out and (out == 3).all()


CUT_ON_TWO = Cut(2, (("a", 12), ("out", 20)), 2)  # 8 x 5 x 3 as two pieces of 4 rows


def _pieces_in_child(queue):
    try:
        from runtime import pool
        kernel = small_kernel(replace(PIECE_4x5x3, cut=CUT_ON_TWO))
        assert ctypes.c_int64.from_address(pool.current_cell()).value == 0  # no pool here
        out = np.zeros((8, 5), np.float32)
        kernel.fn(np.ones((8, 3), np.float32).ctypes.data, np.ones((3, 5), np.float32)
                  .ctypes.data, out.ctypes.data, *kernel.pool_args)
        queue.put(bool((out == 3).all()))
    except BaseException as e:  # reported to the parent, which asserts
        queue.put(repr(e))


@needs_pool
def test_pieces_run_in_a_forked_child_whose_pool_is_not_the_parents():
    """The parent's pool and workers are not in a forked child: its kernels in pieces run
    alone there until the child makes a pool of its own, and do not hang."""
    import multiprocessing
    kernel = small_kernel(replace(PIECE_4x5x3, cut=CUT_ON_TWO))
    assert kernel.pool_args
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_pieces_in_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get(timeout=5) is True


def test_kernels_are_cached_and_take_only_the_arguments_they_use():
    spec = EpilogueSpec("row", None, False)
    key = SmallKey("float32", 7, 13, 5, (5, 1), (13, 1), 13, spec)
    first = small_kernel(key)
    assert small_kernel(SmallKey("float32", 7, 13, 5, (5, 1), (13, 1), 13, spec)) is first
    assert [name for name, _ in first.key.args] == ["a", "b", "out", "bias"]
    with_c = small_kernel(replace(key, c_strides=(13, 1), alpha=True))
    assert [name for name, _ in with_c.key.args] == ["a", "b", "out", "c", "bias", "alpha",
                                                     "beta"]


def test_compiled_variants_are_capped(monkeypatch):
    one = SmallKey("float32", 1, 1, 1, (1, 1), (1, 1), 1)
    small_kernel(one)
    monkeypatch.setattr(gemm_config, "SMALL_MAX_KERNELS", len(gemm_small._kernels))
    assert small_kernel(one) is not None
    assert small_kernel(replace(one, m=2)) is None


def test_fits_and_tiles():
    assert fits(1, 1, 1) and fits(128, 128, 128) and fits(200, 200, 200)
    assert not fits(0, 4, 4) and not fits(256, 256, 256) and not fits(1, 1000, 1000)
    with pytest.raises(ValueError, match="not small"):
        small_kernel(SmallKey("float32", 300, 300, 300, (300, 1), (300, 1), 300))
    for m, n, k in [(1, 1, 1), (64, 64, 64), (200, 3, 9), (5, 200, 200)]:
        tile = choose_tile("float32", m, n, k, 16)
        assert tile.mr <= m and tile.mr * tile.vectors + tile.vectors < 32


@pytest.mark.parametrize("with_c", [False, True])
def test_a_specialised_kernel_without_c_builds_no_code_that_reads_it(with_c):
    """With beta == 0 compiled in, the tile store's reading of C is known to be skipped
    when the kernel is built, so it is not built (half the IR of a 512x64x64 kernel);
    with a C, every row branches on beta at run time."""
    import llvmlite.ir as ir

    from runtime.cpu.gemm.emit.small import SmallGemm
    key = SmallKey("float32", 9, 20, 5, (5, 1), (20, 1), 20,
                   c_strides=(1, 9) if with_c else None)
    module = ir.Module("small_without_c")
    SmallGemm(module, "kiln_test_small", key, choose_tile("float32", 9, 20, 5, 16)).build()
    assert ("when.then" in str(module)) is with_c
