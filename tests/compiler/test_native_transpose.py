"""Native elementwise kernels over permuted inputs: an input read across the inner dim
with a stride (a transpose) goes through W x W tiles transposed in registers where W of
its rows are neighbours in memory, row by row where they are not; rows of 2 to W / 2
elements whose outputs lie end to end go several to a vector. Every answer is
numpy's bit for bit, from generated code, over odd, empty, size-1, broadcast and sliced
layouts, on one thread and two."""
import numpy as np
import pytest

import compiler
import eager
from tests.compiler.test_native import _assert_ran_natively


def _compiled(fn, *args):
    compiled = compiler.compile(fn, backend="native")
    got = compiled(*args)
    _assert_ran_natively(compiled)
    return compiled, got.numpy()


def _tiled(compiled) -> bool:
    """Whether a kernel of `compiled` was made with the tiled loop."""
    run = next(iter(compiled.region_cache.values()))
    return any("tiles" in artifact.llvm_ir for k in run.kernels.values()
               for artifact in k.artifacts)


PERMUTED = [((3, 5), (1, 0)), ((16, 16), (1, 0)), ((17, 33), (1, 0)), ((33, 17), (1, 0)),
            ((7, 9, 5), (0, 2, 1)), ((2, 40, 3, 24), (0, 2, 3, 1)), ((5, 1, 9), (2, 1, 0)),
            ((1, 48, 1), (2, 1, 0)), ((0, 7), (1, 0)), ((9, 0, 3), (2, 1, 0)),
            ((8, 64, 6, 64), (0, 2, 3, 1)), ((4, 6, 32, 40), (0, 1, 3, 2)),
            ((3, 5, 7, 9), (3, 1, 2, 0))]


@pytest.mark.parametrize("shape, dims", PERMUTED, ids=str)
def test_a_permuted_copy_is_numpy_s(shape, dims):
    a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    _, got = _compiled(lambda x: x.permute(*dims).contiguous() * 1.0, eager.tensor(a))
    np.testing.assert_array_equal(got, np.ascontiguousarray(a.transpose(dims)))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool", "int8",
                                   "uint8", "int16", "float16"])
def test_transposes_of_every_dtype_go_through_tiles(dtype):
    a = (np.random.default_rng(2).standard_normal((37, 51)) * 50).astype(dtype)
    compiled, got = _compiled(lambda x: x.t().clone(), eager.tensor(a))
    np.testing.assert_array_equal(got, np.ascontiguousarray(a.T))
    assert _tiled(compiled)


def test_a_transposed_input_beside_contiguous_and_broadcast_ones():
    """x.t() (tiled), y (a vector a row), a column broadcast along the rows (one value a
    row) and a row broadcast down the columns (stride 0 across rows), 45 x 35. (No sum of
    a product: kernels may contract one to an FMA, numpy does not.)"""
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(s).astype(np.float32) for s in [(35, 45), (45, 35)])
    col, row = (rng.standard_normal(s).astype(np.float32) for s in [(45, 1), (35,)])
    compiled, got = _compiled(lambda x, y, c, r: (x.t() + c - r) * y,
                              *map(eager.tensor, (x, y, col, row)))
    np.testing.assert_array_equal(got, (x.T + col - row) * y)
    assert _tiled(compiled)


def test_transposed_rows_that_are_not_neighbours_go_row_by_row():
    """Every other row of the input, transposed: its rows are two elements apart."""
    a = np.random.default_rng(4).standard_normal((70, 40)).astype(np.float32)
    _, got = _compiled(lambda x: (x[::2].t() * 2.0).exp(), eager.tensor(a))
    np.testing.assert_allclose(got, np.exp(a[::2].T * 2), rtol=1e-6)


def test_two_transposed_inputs_and_a_sliced_one():
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((40, 50)).astype(np.float32), \
        rng.standard_normal((40, 50)).astype(np.float32)
    wide = rng.standard_normal((48, 60)).astype(np.float32)
    _, got = _compiled(lambda x, y, w: (x.t() - y.t()) * w[3:43, 5:55].t(),
                       *map(eager.tensor, (x, y, wide)))
    np.testing.assert_array_equal(got, (x.T - y.T) * wide[3:43, 5:55].T)


def test_no_tile_reads_or_writes_outside_its_operands():
    """A transposed 19 x 21 view in the middle of a NaN-filled buffer, inner dims that
    end mid-tile: the result is the view's alone, and the buffer around it unchanged."""
    base = np.full((40, 40), np.nan, np.float32)
    base[10:29, 10:31] = np.arange(19 * 21, dtype=np.float32).reshape(19, 21)
    x = eager.from_numpy(base)[10:29, 10:31]
    _, got = _compiled(lambda x: x.t() + 1.0, x)
    np.testing.assert_array_equal(got, base[10:29, 10:31].T + 1)
    assert np.isnan(base[:10]).all() and np.isnan(base[29:]).all()


def test_a_transpose_split_over_two_threads(monkeypatch):
    """A 4 x 6 x 150 x 130 transpose on the pool: each thread's rows start anywhere, not on
    a tile; the same bits as on one thread."""
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    a = np.random.default_rng(6).standard_normal((4, 6, 130, 150)).astype(np.float32)
    compiled, got = _compiled(lambda x: x.transpose(-1, -2).contiguous() * 3.0,
                              eager.tensor(a))
    np.testing.assert_array_equal(got, np.ascontiguousarray(a.transpose(0, 1, 3, 2)) * 3)
    run = next(iter(compiled.region_cache.values()))
    launches = [launch for k in run.kernels.values() for launch in k._layouts.values()]
    from tests.compiler.test_native import pool_available
    assert all(launch.threads == 2 for launch in launches) or not pool_available()


SHORT_ROWS = [((8, 300, 4), (1, 0, 2)), ((5, 7, 2), (1, 0, 2)), ((3, 9, 8), (1, 0, 2)),
              ((9, 5, 3), (1, 0, 2)), ((4, 33, 4), (1, 0, 2)), ((6, 1, 4), (1, 0, 2)),
              ((0, 5, 4), (1, 0, 2)), ((2, 8, 3, 2), (2, 0, 1, 3))]


@pytest.mark.parametrize("shape, dims", SHORT_ROWS, ids=str)
def test_short_rows_go_several_to_a_vector(shape, dims):
    """ResNet's (N, C, H * W) <-> (C, N, H * W) copies: rows of 4 elements and fewer."""
    a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    _, got = _compiled(lambda x: x.permute(*dims).contiguous() * 2.0, eager.tensor(a))
    np.testing.assert_array_equal(got, np.ascontiguousarray(a.transpose(dims)) * 2)


@pytest.mark.parametrize("dtype", ["float64", "int64", "bool", "int8", "float16"])
def test_short_rows_of_every_dtype_and_a_value_a_row(dtype):
    """Rows of 2 elements, with a value a row (broadcast along the row) beside them."""
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((5, 37, 2)) * 50).astype(dtype)
    col = (rng.standard_normal((37, 5, 1)) * 50).astype(dtype)
    _, got = _compiled(lambda x, c: x.transpose(0, 1) * c, eager.tensor(a), eager.tensor(col))
    np.testing.assert_array_equal(got, a.transpose(1, 0, 2) * col)


def test_short_rows_on_two_threads(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    a = np.random.default_rng(8).standard_normal((8, 9001, 4)).astype(np.float32)
    _, got = _compiled(lambda x: x.transpose(0, 1).contiguous() - 1.0, eager.tensor(a))
    np.testing.assert_array_equal(got, np.ascontiguousarray(a.transpose(1, 0, 2)) - 1)
