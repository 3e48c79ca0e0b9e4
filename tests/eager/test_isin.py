"""isin (an op record, eager/kernels/membership.py) against PyTorch and numpy's np.isin:
every kiln dtype and mixed ones (compared in their result type), numbers on either side,
NaN, -0.0 and infinities, invert, empty and 0-d inputs, sizes around the vector width,
non-contiguous, transposed and expanded inputs, each of the kernel's three ways (the
generated scan, the integer table, the sorted search) with the one that ran asserted,
the generated kernel writing nothing past its elements, and isin in a compiled graph."""
from __future__ import annotations

import contextlib
import ctypes

import numpy as np
import pytest

import eager
from eager.backends.native import membership as native
from eager.kernels import membership

DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8"]
SIZES = [0, 1, 7, 17, 33, 1003]


def _torch():
    try:
        import torch
    except ImportError:
        pytest.skip("PyTorch is not installed: isin is compared with torch.isin")
    return torch


def _both(a, b, **kwargs):
    """(kiln's isin, PyTorch's) of numpy arrays or numbers, as numpy bool arrays."""
    torch = _torch()
    got = eager.isin(*(eager.tensor(v) if isinstance(v, np.ndarray) else v for v in (a, b)),
                     **kwargs)
    want = torch.isin(*(torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v
                        for v in (a, b)), **kwargs)
    assert got.dtype is eager.bool and tuple(got.shape) == tuple(want.shape)
    return got.numpy(), want.numpy()


def _same(a, b, **kwargs):
    got, want = _both(a, b, **kwargs)
    np.testing.assert_array_equal(got, want)
    return got


def _values(dtype: str, n: int, seed: int, high: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0 if dtype == "uint8" else -high, high, n).astype(dtype)


@contextlib.contextmanager
def _runs(kind: str):
    """Asserts that the block ran the generated scan ("scan") or did not ("numpy")."""
    before = native.calls
    yield
    assert (native.calls > before) == (kind == "scan"), f"expected the {kind} path"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("invert", [False, True])
def test_every_dtype_and_size_around_the_vector_width_as_pytorch(dtype, n, invert):
    x, tests = _values(dtype, n, 0), _values(dtype, 9, 1)
    with _runs("scan" if n else "numpy"):
        got = _same(x, tests, invert=invert)
    np.testing.assert_array_equal(got, np.isin(x, tests, invert=invert))


@pytest.mark.parametrize("left", DTYPES)
@pytest.mark.parametrize("right", DTYPES)
def test_mixed_dtypes_compare_in_their_result_type(left, right):
    x = (np.arange(-6, 30) / 2).astype(left) if left[0] == "f" else _values(left, 36, 2)
    tests = (np.arange(0, 20) / 4).astype(right) if right[0] == "f" else _values(right, 20, 3)
    _same(x, tests)


def test_results_past_one_side_s_type_as_pytorch():
    _same(np.array([16777217], np.int32), np.array([16777216.0], np.float32))  # float32
    _same(np.array([16777217], np.int64), np.array([16777216.0], np.float64))
    _same(np.array([0.1], np.float32), np.array([0.1], np.float64))  # float64: not in
    _same(np.array([1, 2], np.int32), np.array([2 ** 32 + 2], np.int64))  # int64
    _same(np.array([1, 2], np.uint8), np.array([257, -254], np.int64))


@pytest.mark.parametrize("a, b", [
    (np.array([1, 2, 3]), 2), (np.array([1, 2, 3]), 2.0), (np.array([1, 2, 3]), 2.5),
    (np.array([0.1, 0.2], np.float32), 0.1), (0.1, np.array([0.1], np.float32)),
    (2, np.array([[1, 2]])), (2.5, np.array([2, 3])), (np.array([1, 2], np.int32), 2 ** 32 + 2),
    (np.array([1, 2], np.uint8), 257), (np.array(3), np.array([1, 3])),
    (np.array([1, 2], np.int32), np.array(2 ** 32 + 2)),  # a 0-d tensor promotes as one
])
@pytest.mark.parametrize("invert", [False, True])
def test_a_number_on_either_side_as_pytorch(a, b, invert):
    _same(a, b, invert=invert)


def test_two_numbers_raise_a_type_error_as_pytorch():
    torch = _torch()
    with pytest.raises(TypeError):
        torch.isin(1, 2)
    with pytest.raises(TypeError, match="isin\\(\\): expected at least one Tensor argument"):
        eager.isin(1, 2)


@pytest.mark.parametrize("a, b", [
    (np.array([True, False]), np.array([1, 2])), (np.array([1.0, 2.0]), np.array([True])),
    (np.array([True]), np.array([True])), (np.array([1, 2]), True)])
def test_bool_raises_pytorch_s_error(a, b):
    torch = _torch()
    message = "Unsupported input type encountered for isin\\(\\): Bool"
    for lib, lift in ((torch, lambda v: torch.from_numpy(v)), (eager, eager.tensor)):
        with pytest.raises(RuntimeError, match=message):
            lib.isin(*(lift(v) if isinstance(v, np.ndarray) else v for v in (a, b)))
    with pytest.raises(RuntimeError, match=message):
        eager.isin(*(eager.empty(np.shape(v), dtype=eager.tensor(v).dtype, device="meta")
                     for v in (a, b)))


SPECIALS = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.5, 1e-30, 3.0])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("tests", [
    [np.nan, 0.0, np.inf], [-0.0], [np.nan], [np.nan, np.nan], [-np.inf, 1e-30, 3.0],
    [], list(np.arange(2000.0)) + [np.nan, -np.inf]])  # the last: past the scan
@pytest.mark.parametrize("invert", [False, True])
def test_nan_is_in_nothing_and_minus_zero_is_zero(dtype, tests, invert):
    x = SPECIALS.astype(dtype)
    got = _same(x, np.array(tests, dtype), invert=invert)
    assert got[0] == invert  # NaN


def test_assume_unique_changes_no_value():
    """(PyTorch's answer with repeated values and assume_unique=True is undefined, as
    numpy's: kiln's is the true one.)"""
    x, tests = _values("int64", 100, 4), _values("int64", 30, 5)
    for flag in (False, True):
        _same(np.unique(x), np.unique(tests), assume_unique=flag)
        np.testing.assert_array_equal(eager.isin(eager.tensor(x), eager.tensor(tests),
                                                 assume_unique=flag).numpy(), np.isin(x, tests))


@pytest.mark.parametrize("x_shape, t_shape", [
    ((0,), (3,)), ((3,), (0,)), ((0,), (0,)), ((2, 0, 3), (4,)), ((), (3,)), ((), (0,)),
    ((4, 5), (2, 0)), ((3, 1, 4), (2, 3, 2))])
def test_empty_and_zero_dim_inputs(x_shape, t_shape):
    x = _values("int64", int(np.prod(x_shape)), 6, high=4).reshape(x_shape)
    tests = _values("int64", int(np.prod(t_shape)), 7, high=4).reshape(t_shape)
    for invert in (False, True):
        _same(x, tests, invert=invert)


def _layouts(a: np.ndarray):
    """`a`'s values as eager tensors: contiguous, transposed, every other element, and a
    row expanded (stride 0), each with its numpy twin."""
    yield eager.tensor(a), a
    yield eager.tensor(a.T.copy()).t(), a
    wide = np.zeros((a.shape[0], 2 * a.shape[1]), a.dtype)
    wide[:, ::2] = a
    yield eager.tensor(wide)[:, ::2], a
    yield eager.tensor(a[:1]).expand(*a.shape), np.broadcast_to(a[:1], a.shape)


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "float64"])
def test_non_contiguous_transposed_and_expanded_inputs(dtype):
    torch = _torch()
    x, tests = _values(dtype, 7 * 9, 8).reshape(7, 9), _values(dtype, 3 * 5, 9).reshape(3, 5)
    for xt, xa in _layouts(x):
        for tt, ta in _layouts(tests):
            want = torch.isin(torch.from_numpy(xa.copy()), torch.from_numpy(ta.copy()))
            np.testing.assert_array_equal(eager.isin(xt, tt).numpy(), want.numpy())
            assert xt.numpy().tolist() == xa.tolist()  # the inputs are left as they were


def _limits(dtype: str) -> tuple:
    lanes = native.lanes(np.dtype(dtype))
    return membership.TABLE_VECTORS * lanes, membership.SCAN_VECTORS * lanes


@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64"])
def test_the_scan_takes_a_set_up_to_its_limit_and_a_search_the_larger(dtype):
    table_from, limit = _limits(dtype)
    x = np.random.default_rng(10).integers(-2 ** 30, 2 ** 30, 4099).astype(dtype)
    for m, path in ((limit, "scan"), (limit + 1, "numpy")):
        tests = np.concatenate([x[:m // 2], np.arange(m - m // 2) * 1000 + 2 ** 30])
        assert np.unique(tests).size == m and not membership._narrow(x, tests)
        with _runs(path):
            _same(x, tests.astype(dtype))


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
def test_integers_in_a_narrow_range_are_looked_up_in_a_table(dtype):
    compute = "int32" if dtype == "uint8" else dtype
    table_from, limit = _limits(compute)
    x = _values(dtype, 5003, 11, high=100)
    for m, path in ((table_from, "scan"), (table_from + 1, "numpy")):
        tests = (np.arange(m) % 200 - (0 if dtype == "uint8" else 100)).astype(dtype)
        assert membership._narrow(x.astype(compute), np.unique(tests).astype(compute))
        with _runs(path):
            _same(x, tests)
            _same(x, tests, invert=True)


def test_a_table_of_integers_far_apart_clips_without_overflow():
    extremes = np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, -3, 5, 7], np.int64)
    tests = np.arange(-3, 300, dtype=np.int64)
    assert membership._narrow(extremes, tests)
    _same(extremes, tests)


def test_duplicates_in_a_large_set_leave_few_values_for_the_scan():
    x = _values("int64", 1000, 12)
    tests = np.repeat(np.array([-3, 5, 17]), 2000)
    with _runs("scan"):
        _same(x, tests)


@pytest.mark.parametrize("type_name", ["f32", "f64", "i32", "i64"])
@pytest.mark.parametrize("n", [1, 7, 15, 16, 17, 33, 63, 64, 65, 1003])
def test_the_generated_kernel_writes_nothing_past_its_elements(type_name, n):
    dtype = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64}[type_name]
    fn = native._kernel(type_name)
    x = np.arange(n + 64).astype(dtype)  # values past n would match if they were read
    tests = np.array([0, n + 3, n + 10], dtype)
    out = np.full(n + 64, 7, np.int8)
    fn(x.ctypes.data, tests.ctypes.data, out.ctypes.data, n, tests.size, 0)
    assert out[:n].tolist() == np.isin(x[:n], tests).astype(np.int8).tolist()
    assert (out[n:] == 7).all()
    fn(x.ctypes.data, tests.ctypes.data, out.ctypes.data, n, tests.size, ctypes.c_int8(1))
    assert out[:n].tolist() == (~np.isin(x[:n], tests)).astype(np.int8).tolist()
    assert (out[n:] == 7).all()


def test_numpy_serves_where_the_kernel_cannot(monkeypatch):
    monkeypatch.setattr(membership, "_membership", False)
    x, tests = _values("int64", 100, 13), _values("int64", 5, 14)
    with _runs("numpy"):
        _same(x, tests)
        _same(x.astype(np.float32), tests.astype(np.float32), invert=True)


def test_isin_is_not_differentiable_and_has_no_tensor_method():
    torch = _torch()
    x = eager.tensor([1.0, 2.0], requires_grad=True)
    got = eager.isin(x, eager.tensor([2.0]))
    assert not got.requires_grad and got.grad_fn is None
    assert hasattr(eager.Tensor, "isin") == hasattr(torch.Tensor, "isin")


def test_out_writes_the_given_tensor():
    out = eager.empty(3, dtype=eager.bool)
    got = eager.isin(eager.tensor([1, 2, 3]), eager.tensor([2]), out=out)
    assert got is out and out.tolist() == [False, True, False]


def test_isin_in_a_compiled_graph_gives_eager_s_values():
    def f(x, tests):
        y = x * 2 + 1
        return eager.isin(y, tests, invert=True), eager.isin(y, 7), eager.isin(3.0, y)

    compiled = eager.compile(f)
    rng = np.random.default_rng(15)
    for shape in [(3, 4), (17,), (0, 5)]:
        x = eager.tensor(rng.integers(0, 10, shape).astype(np.float32))
        tests = eager.tensor(np.array([3.0, 7.0, np.nan, 100.0] * 30, np.float32))
        for _ in range(2):  # the capture, then the replay
            for got, want in zip(compiled(x, tests), f(x, tests)):
                assert got.dtype is eager.bool and got.shape == want.shape
                np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert "= isin.Tensor_Tensor(" in compiled.explain()  # in the captured graph


@pytest.mark.parametrize("a, b", [
    (np.array([[1.0, np.nan, -0.0], [3.0, 2.5, 7.0]], np.float32),
     np.array([0.0, np.nan, 7.0, 3.0], np.float32)),
    (np.array([1, 2, 3], np.int32), np.array([2.0, 3.5])), (np.array([1, 2], np.int32), 2 ** 32 + 2),
    (2, np.array([[1, 2]])), (np.arange(40, dtype=np.int64), np.zeros(0, np.int64))])
@pytest.mark.parametrize("invert", [False, True])
def test_cuda_tensors_give_the_cpu_s_values(a, b, invert):
    from runtime.cuda.current import unless_gpu
    want = eager.isin(*(eager.tensor(v) if isinstance(v, np.ndarray) else v for v in (a, b)),
                      invert=invert)
    with unless_gpu(memory=64 << 20):
        got = eager.isin(*(eager.tensor(v, device="cuda") if isinstance(v, np.ndarray) else v
                           for v in (a, b)), invert=invert)
        assert got.device == eager.device("cuda:0") and got.dtype is eager.bool
        np.testing.assert_array_equal(got.cpu().numpy(), want.numpy())
