"""Row kernels over short rows take GROUP_ROWS rows a trip and fold the rows' results
together (runtime/cpu/kernel_ir._rows, accumulators.finish_rows), the rows left over and
long rows one at a time: values against numpy float64 for row counts that are not a
multiple of the group, row lengths around the vector width, empty rows, strided and
transposed inputs, keepdim, float64, NaN in some rows only; and the grouped rows give
bitwise what a row alone gives."""
import numpy as np
import pytest

import compiler
import eager
from eager.backends.native import rows as eager_rows
from runtime.cpu import kernel_ir as pointwise
from eager.backends import row_ops
from ir.ops import Op
from tests.compiler.test_native import _assert_ran_natively

ROWS = [1, 3, 5, 7, 513]
LENGTHS = [1, 3, 15, 16, 17, 255, 256, 257]
LONG = pointwise.GROUP_BYTES // 4 + 3  # kernels of several passes: one row at a time


def _softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


OPS = {  # op: (numbers the kernel takes for n elements a row, numpy float64 reference)
    Op.SUM: (lambda n: (), lambda z: z.sum(-1)),
    Op.MEAN: (lambda n: (n,), lambda z: z.mean(-1)),
    Op.VAR: (lambda n: (n, n - 1), lambda z: z.var(-1, ddof=1)),
    Op.AMAX: (lambda n: (), lambda z: z.max(-1)),
    Op.AMIN: (lambda n: (), lambda z: z.min(-1)),
    Op.SOFTMAX: (lambda n: (), _softmax),
    Op.LOG_SOFTMAX: (lambda n: (), lambda z: np.log(_softmax(z))),
}


def _rows(op, x, keepdim=False):
    """op over x's last dim as the generated row kernel (asserting that it ran)."""
    n = x.shape[-1]
    out = eager_rows.run(op, x, (x.dim() - 1,), keepdim, OPS[op][0](n))
    assert out is not None, "the generated kernel did not run"
    return out


def _check(got, want, dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("length", LENGTHS + [LONG])
@pytest.mark.parametrize("op", list(OPS), ids=lambda op: op.name.lower())
def test_row_groups_match_numpy_in_float64(op, length, dtype):
    rng = np.random.default_rng(length)
    for rows in ROWS:
        if op is Op.VAR and length == 1:
            continue  # n - 1 = 0: numpy warns, the kernel gives what 0 / 0 gives
        a = rng.standard_normal((rows, length)).astype(dtype)
        _check(_rows(op, eager.tensor(a)), OPS[op][1](a.astype(np.float64)), dtype)


@pytest.mark.parametrize("op", [Op.SUM, Op.MEAN, Op.AMAX, Op.SOFTMAX])
def test_row_groups_over_strided_transposed_and_kept_dims(op):
    a = np.random.default_rng(1).standard_normal((7, 17)).astype(np.float32)
    want = OPS[op][1](a.astype(np.float64))
    wide = np.zeros((7, 34), np.float32)
    wide[:, ::2] = a
    strided = eager.tensor(wide)[:, ::2]
    transposed = eager.tensor(np.ascontiguousarray(a.T)).t()
    for x in (strided, transposed):
        _check(_rows(op, x), want, np.float32)
    if op is not Op.SOFTMAX:
        _check(_rows(op, eager.tensor(a), keepdim=True), want[:, None], np.float32)


@pytest.mark.parametrize("op", [Op.AMAX, Op.AMIN])
def test_row_groups_give_nan_exactly_in_the_rows_that_hold_one(op):
    for length in (3, 16, 17, 256, LONG):
        a = np.random.default_rng(length).standard_normal((7, length)).astype(np.float32)
        a[1, length // 2] = np.nan
        a[4, -1] = np.nan
        a[6, 0] = np.inf if op is Op.AMAX else -np.inf
        got = _rows(op, eager.tensor(a)).numpy()
        want = OPS[op][1](a.astype(np.float64))
        assert np.isnan(got[[1, 4]]).all()
        np.testing.assert_array_equal(np.delete(got, [1, 4]), np.delete(want, [1, 4]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", [Op.SOFTMAX, Op.LOG_SOFTMAX], ids=lambda op: op.name.lower())
def test_softmax_rows_masked_infinite_nan_and_far_below_their_max(op, dtype):
    """A row masked with -inf gives nan, as PyTorch; masked elements of a row give 0 (or
    -inf); +inf or nan make the row nan; elements far below the max give subnormal
    exponentials and zeros: as numpy in float64, on every row length around the groups."""
    for length in (1, 2, 3, 17, 256, 257, LONG):
        rng = np.random.default_rng(length)
        a = (rng.standard_normal((11, length)) * 3).astype(dtype)
        a[0] = -np.inf
        a[1, length // 2:] = -np.inf
        a[2, length // 3] = np.inf
        a[3, length - 1] = np.nan
        a[4] = np.linspace(0, -800 if dtype is np.float64 else -120, length)
        a[5, ::2] = -np.inf
        with np.errstate(invalid="ignore"):
            z = a.astype(np.float64)
            shifted = z - z.max(-1, keepdims=True)  # (log(softmax) would be -inf where
            total = np.exp(shifted).sum(-1, keepdims=True)  # its exponential is 0)
            want = np.exp(shifted) / total if op is Op.SOFTMAX else shifted - np.log(total)
        got = _rows(op, eager.tensor(a)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5 if dtype is np.float32 else 1e-12,
                                   atol=1e-6 if dtype is np.float32 else 1e-13)
        assert np.isnan(got[[0, 2, 3]]).all()


def test_row_groups_of_empty_rows():
    x = eager.zeros(5, 0)
    assert (_rows(Op.SUM, x).numpy() == 0).all()
    assert np.isnan(_rows(Op.MEAN, x).numpy()).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", [Op.SUM, Op.AMAX, Op.VAR, Op.SOFTMAX, Op.LOG_SOFTMAX])
def test_a_row_in_a_group_gives_bitwise_what_it_gives_alone(op, dtype):
    """Different rows, so that a group's per-row values (computed side by side, one
    vector of them) cannot stand in for each other."""
    scales = np.array([1, 2, 3, 5, 8, 13, 21])[:, None]
    a = (np.random.default_rng(5).standard_normal((7, 255)) * scales).astype(dtype)
    together = _rows(op, eager.tensor(a)).numpy()  # 4 grouped, 3 alone
    for r in range(7):
        alone = _rows(op, eager.tensor(a[r:r + 1].copy())).numpy()[0]
        np.testing.assert_array_equal(together[r], alone)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_layer_norm_row_in_a_group_gives_bitwise_what_it_gives_alone(dtype):
    """Its per-row mean, variance and rsqrt, computed for a group's rows side by side."""
    scales = np.array([1, 2, 3, 5, 8, 13, 21])[:, None]
    shifts = np.array([0, 1, -3, 9, 0.5, 2, 7])[:, None]
    a = (np.random.default_rng(6).standard_normal((7, 255)) * scales + shifts).astype(dtype)
    dt = eager.tensor(a).dtype

    def layer_norm(x):
        rows = x.shape[0]
        out = eager_rows.run_graph(("layer_norm", False, False), lambda: row_ops.layer_norm_graph(
            dt, False, False), [x], (255, 1e-5), (1,), (((rows, 255), False),
                                                      ((rows, 1), False), ((rows, 1), False)))
        assert out is not None, "the generated kernel did not run"
        return [t.numpy() for t in out]
    together = layer_norm(eager.tensor(a))
    for r in range(7):
        for got, alone in zip(together, layer_norm(eager.tensor(a[r:r + 1].copy()))):
            np.testing.assert_array_equal(got[r], alone[0])


def test_compiled_row_groups_with_rows_left_over():
    for rows in (5, 7, 513):
        f = compiler.compile(lambda x: (x * 2.0).sum(-1) + x.amax(-1), backend="native")
        a = np.random.default_rng(rows).standard_normal((rows, 17)).astype(np.float32)
        z = a.astype(np.float64)
        _check(f(eager.tensor(a)), (z * 2).sum(-1) + z.max(-1), np.float32)
        _assert_ran_natively(f)


def _batch_norm(x):
    """BatchNorm's training statistics and normalised value, as a model writes them."""
    m = x.mean((0, 2, 3), keepdim=True)
    v = ((x - m) ** 2).mean((0, 2, 3), keepdim=True)
    return (x - m) * eager.rsqrt(v + 1e-5), m, v


def _batch_norm64(z):
    m = z.mean((0, 2, 3), keepdims=True)
    v = ((z - m) ** 2).mean((0, 2, 3), keepdims=True)
    return (z - m) / np.sqrt(v + 1e-5), m, v


LAYOUTS = {"contiguous": lambda a: a,
           "channels_last": lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1)),
           "every_other_column": lambda a: np.repeat(a, 2, -1)}
VIEWS = {"contiguous": lambda t: t, "channels_last": lambda t: t.permute(0, 3, 1, 2),
         "every_other_column": lambda t: t[..., ::2]}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("shape", [(8, 256, 2, 2), (3, 5, 2, 3), (3, 5, 7, 9), (2, 1, 3, 3),
                                   (5, 3, 1, 1), (1, 4, 3, 5), (7, 9, 3, 1)], ids=str)
def test_statistics_over_dims_that_do_not_merge_run_natively_as_segments(shape, layout):
    """A reduction over N, H and W of (N, C, H, W) with short H * W (split_reductions
    leaves it whole) walks each channel as N segments of H * W: natively, where it ran
    interpreted (~0.7 ms for (8, 256, 2, 2)), on every layout of its input."""
    a = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32) * 3 + 1
    stored = LAYOUTS[layout](a)
    f = compiler.compile(lambda t: _batch_norm(VIEWS[layout](t)), backend="native")
    for _ in range(2):
        got = f(eager.tensor(stored))
        for g, want in zip(got, _batch_norm64(a.astype(np.float64))):
            np.testing.assert_allclose(g.numpy(), want, rtol=1e-4, atol=1e-4)
    _assert_ran_natively(f)


@pytest.mark.parametrize("shape", [(0, 3, 2, 2), (2, 3, 0, 2), (2, 0, 2, 2)], ids=str)
def test_statistics_over_empty_dims_give_eager_s_answer(shape):
    x = eager.tensor(np.zeros(shape, np.float32))
    f = compiler.compile(lambda t: (t * 2).sum((0, 2, 3)), backend="native")
    np.testing.assert_array_equal(f(x).numpy(), np.zeros(shape[1], np.float32))


@pytest.mark.parametrize("name, fn, ref", [
    ("sum", lambda t: (t * 2).sum((0, 2)), lambda z: (z * 2).sum((0, 2))),
    ("amax", lambda t: t.amax((0, 2)) - t.amin((0, 2)), lambda z: z.max((0, 2)) - z.min((0, 2))),
    ("argmax", lambda t: t.transpose(0, 2).argmax(), lambda z: z.transpose(2, 1, 0).argmax()),
    ("argmin", lambda t: t[:, ::2].argmin(), lambda z: z[:, ::2].argmin()),
])
def test_other_reductions_over_segments_match_numpy(name, fn, ref):
    """amax, amin, and argmax's positions counted along all the segments in order."""
    a = np.random.default_rng(3).standard_normal((5, 6, 37)).astype(np.float32)
    f = compiler.compile(fn, backend="native")
    np.testing.assert_allclose(f(eager.tensor(a)).numpy(), ref(a.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)
    _assert_ran_natively(f)


def test_segments_give_the_same_bits_on_one_and_two_threads(monkeypatch):
    """Threads take whole rows (channels): each channel's sum runs in one order."""
    from runtime import threads as runtime_threads
    # put back as found: set_num_threads(get_num_threads()) would pin the count over
    # $KILN_NUM_THREADS for the worker's later tests
    monkeypatch.setattr(runtime_threads, "_chosen", [None])
    a = np.random.default_rng(4).standard_normal((64, 256, 2, 2)).astype(np.float32)
    results = []
    for threads in (1, 2):
        eager.set_num_threads(threads)
        f = compiler.compile(lambda t: _batch_norm(t), backend="native")
        results.append([t.numpy() for t in f(eager.tensor(a))])
        _assert_ran_natively(f)
        launches = [launch for run in f.region_cache.values()
                    for k in run.kernels.values() for launch in k._layouts.values()]
        assert max(launch.threads for launch in launches) == threads
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)
    for got, want in zip(results[0], _batch_norm64(a.astype(np.float64))):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
