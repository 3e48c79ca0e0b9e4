"""Eager sum, mean, var, amax, amin, softmax and log_softmax of float tensors from
NATIVE_ELEMENTS elements on run as generated row kernels (compiler/backends/native/
eager_rows.py): values against numpy float64 over layouts, dims and dtypes, NaN, and
the cases numpy keeps (dims that do not merge, a dtype argument, empty dims)."""
import numpy as np
import pytest

import eager
from eager.backends.native import rows as eager_rows
from eager.kernels import reduction

F = eager.nn.functional
SHAPES = [(512, 256), (70, 67), (3, 5001), (64, 9, 17), (4099,)]


def _softmax(z, d):
    e = np.exp(z - z.max(d, keepdims=True))
    return e / e.sum(d, keepdims=True)


OPS = {  # name: (eager, numpy float64 reference), over dim d
    "sum": (lambda t, d: t.sum(d), lambda z, d: z.sum(d)),
    "mean_keepdim": (lambda t, d: t.mean(d, keepdim=True), lambda z, d: z.mean(d, keepdims=True)),
    "var": (lambda t, d: t.var(d), lambda z, d: z.var(d, ddof=1)),
    "var_keepdim_biased": (lambda t, d: t.var(d, correction=0, keepdim=True),
                           lambda z, d: z.var(d, keepdims=True)),
    "amax": (lambda t, d: t.amax(d), lambda z, d: z.max(d)),
    "amin_keepdim": (lambda t, d: t.amin(d, keepdim=True), lambda z, d: z.min(d, keepdims=True)),
    "softmax": (lambda t, d: F.softmax(t, d), _softmax),
    "log_softmax": (lambda t, d: F.log_softmax(t, d), lambda z, d: np.log(_softmax(z, d))),
}


def _layout(a: np.ndarray, layout: str):
    if layout == "transposed":
        return eager.tensor(np.ascontiguousarray(a.T)).t() if a.ndim == 2 else eager.tensor(a)
    if layout == "strided":
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        return eager.tensor(wide)[..., ::2]
    if layout == "expanded":  # every row the same: a broadcast first dim
        return eager.tensor(a[:1]).expand(*a.shape)
    return eager.tensor(a)


def _check(got, want, dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-12
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got.numpy(), want, rtol=tol * 10, atol=tol)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "expanded"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(OPS))
def test_eager_rows_match_numpy_in_float64(name, shape, layout):
    fn, reference = OPS[name]
    a = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    x = _layout(a, layout)
    for d in range(-1, len(shape)):
        _check(fn(x, d), reference(x.numpy().astype(np.float64), d), np.float32)


def test_eager_rows_run_as_generated_kernels(monkeypatch):
    ran = []
    original = eager_rows.run

    def spy(*args):
        out = original(*args)
        ran.append(out is not None)
        return out
    monkeypatch.setattr(reduction._native_rows or eager_rows, "run", spy)
    x = eager.randn(64, 128)
    x.sum(-1), x.amax(0), F.softmax(x, -1)
    eager.randn(8, 8).sum(-1)  # small: numpy, the kernel is not asked
    assert ran == [True, True, True]


@pytest.mark.parametrize("name", sorted(OPS))
def test_eager_rows_in_float64_and_over_merged_dims(name):
    fn, reference = OPS[name]
    a = np.random.default_rng(3).standard_normal((6, 40, 50))
    x = eager.tensor(a)
    _check(fn(x, -1), reference(a, -1), np.float64)
    if not name.endswith("softmax"):
        _check(fn(x, (1, 2)), reference(a, (1, 2)), np.float64)  # dims that merge
        _check(fn(x, (0, 2)), reference(a, (0, 2)), np.float64)  # that do not: numpy


def test_eager_rows_propagate_nan_and_keep_numpy_cases():
    a = np.random.default_rng(4).standard_normal((100, 100)).astype(np.float32)
    a[3, 7] = a[50, 99] = np.nan
    x = eager.tensor(a)
    for d in (0, 1, -1):
        _check(x.amax(d), a.astype(np.float64).max(d), np.float32)
        _check(x.amin(d), a.astype(np.float64).min(d), np.float32)
        _check(F.softmax(x, d), _softmax(a.astype(np.float64), d), np.float32)
    y = eager.zeros(5000, 0)
    assert y.sum(-1).shape == (5000,) and (y.sum(-1).numpy() == 0).all()
    assert np.isnan(y.mean(-1).numpy()).all()
    with pytest.raises(IndexError):
        y.amax(-1)
    s = eager.tensor(np.ones((100, 100), np.float32)).sum(-1, dtype=eager.float64)
    assert s.dtype == eager.float64 and (s.numpy() == 100).all()
    i = eager.tensor(np.ones((100, 100), np.int64)).sum(0)
    assert i.dtype == eager.int64 and (i.numpy() == 100).all()


def test_a_layout_is_planned_again_only_after_a_pause_while_its_kernel_compiles(monkeypatch):
    """While a background worker compiles a row kernel numpy runs, and the layout is not
    planned on every call (planning costs ~0.8 ms) until the pause is over or the workers
    have delivered everything; one the kernels do not take is planned once."""
    planned = []
    clock = [100.0]
    monkeypatch.setattr(eager_rows.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(eager_rows, "_kernel", lambda *key: planned.append(key))  # pending
    busy = [1]  # kernels the workers have not delivered yet
    monkeypatch.setattr(eager_rows.compile_service, "pending", lambda: busy[0])
    x = eager.tensor(np.arange(4096 * 3, dtype=np.float32).reshape(4096, 3))
    for _ in range(3):
        np.testing.assert_array_equal(x.sum(-1).numpy(), x.numpy().sum(-1))
    assert len(planned) == 1
    clock[0] += eager_rows.RETRY_SECONDS
    x.sum(-1)
    assert len(planned) == 2
    busy[0] = 0  # the workers delivered everything: planned at the next call, no pause
    x.sum(-1)
    assert len(planned) == 3
    calls = []
    original = eager_rows._plan
    monkeypatch.setattr(eager_rows, "_plan", lambda *a: calls.append(a) or original(*a))
    y = eager.tensor(np.ones((30, 40, 50), np.float32))
    for _ in range(3):  # dims that do not merge: numpy's, planned once
        assert (y.sum((0, 2)).numpy() == 1500).all()
    assert len(calls) == 1


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_half_rows_run_natively_computing_in_float32(name, dtype, monkeypatch):
    """Over bfloat16 and float16 the row kernels read 16-bit words, compute in float32
    (counts and divisors float32 too) and round the result once: eager's numpy kernels'
    values, the extrema bit for bit, the rest within a 16-bit ulp (float32 exp and sums
    in another order, rounded once), over rows in the lanes or along them, an odd size,
    a transpose."""
    from tests.eager.native.narrow_cases import assert_same, numpy_kernels
    ran = []
    original = eager_rows.run
    monkeypatch.setattr(reduction._native_rows or eager_rows, "run",
                        lambda *a: ran.append(original(*a) is not None) or original(*a))
    fn = OPS[name][0]
    a = np.random.default_rng(5).standard_normal((37, 301)).astype(np.float32) * 3
    for x in (eager.tensor(a).to(getattr(eager, dtype)),
              eager.tensor(np.ascontiguousarray(a.T)).to(getattr(eager, dtype)).t()):
        for d in (-1, 0):
            with numpy_kernels():
                want = fn(x, d)
            assert_same(fn(x, d), want, ulps=0 if name.startswith("am") else 1)
    assert ran and all(ran), ran
