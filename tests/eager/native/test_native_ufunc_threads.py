"""Eager one-ufunc ops (add, sub, mul, div, maximum, minimum, neg, abs, sqrt, exp, log)
run as generated kernels from ONE_UFUNC_ELEMENTS elements on, most only where the kernel
runs on threads (KILN_NUM_THREADS=2): there they match numpy bit for bit where the op is
exactly rounded, exp and log against float64 and PyTorch, over layouts, broadcasts,
Python numbers, in-place ops, NaN, inf and signed zeros; which path ran
(eager_pointwise.calls); numpy where it must (one thread, integers, float16, tanh)."""
import numpy as np
import pytest

import eager
from eager.backends.native import pointwise as eager_pointwise
from eager.kernels import elementwise
from ir.ops import Op
from runtime import pool
from tests.eager.native.pointwise_cases import DTYPES, check, data, layouts, reference

torch = pytest.importorskip("torch", reason="PyTorch (the compare extra) is the reference "
                                              "these kernels are checked against")

on_threads = pytest.mark.skipif(not pool.available(), reason="runtime.pool runs on Linux "
                                "x86-64 only; elsewhere one-ufunc ops keep numpy")
BIG = (300, 451)  # 135300 elements: from every ONE_UFUNC_ELEMENTS size on
EXACT = {  # exactly rounded ops: numpy's result in the same dtype, bit for bit
    "add": (eager.add, np.add), "sub": (eager.sub, np.subtract),
    "mul": (eager.mul, np.multiply), "div": (eager.div, np.divide),
    "maximum": (eager.maximum, np.maximum), "minimum": (eager.minimum, np.minimum),
}
EXACT_UNARY = {"neg": (eager.neg, np.negative), "abs": (eager.abs, np.abs),
               "sqrt": (eager.sqrt, np.sqrt), "floor": (eager.floor, np.floor),
               "ceil": (eager.ceil, np.ceil), "trunc": (eager.trunc, np.trunc),
               "round": (eager.round, np.round)}


def _same_bits(got, want: np.ndarray):
    """got (an eager tensor) holds want's values bit for bit, in want's dtype."""
    g = got.numpy()
    assert g.dtype == want.dtype and g.shape == want.shape
    assert np.array_equal(g.view(f"u{g.itemsize}"), want.view(f"u{want.itemsize}"))


def _binary_cases(a: np.ndarray, b: np.ndarray):
    """(eager x, eager y, numpy x, numpy y): every layout pair of _layouts, a column and
    a row broadcast, and an expanded first operand."""
    cases = [(x, y, a, b) for (_, x), (_, y) in zip(layouts(a), layouts(b))]
    cases.append((eager.tensor(a), eager.tensor(b[:, :1]), a, b[:, :1]))
    cases.append((eager.tensor(a[:1]), eager.tensor(b), a[:1], b))
    cases.append((eager.tensor(a[:, :1]).expand(*a.shape), eager.tensor(b), a[:, :1], b))
    return cases


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(EXACT))
def test_large_exactly_rounded_binary_ops_on_two_threads_run_natively_bit_for_bit(
        name, dtype, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    fn, numpy_op = EXACT[name]
    np_dtype = DTYPES[dtype][0]
    a, b = data(BIG, np_dtype, 12), data(BIG, np_dtype, 13, positive=name == "div")
    for x, y, ax, by in _binary_cases(a, b):
        before = eager_pointwise.calls
        got = fn(x, y)
        assert eager_pointwise.calls == before + 1, name
        _same_bits(got, numpy_op(ax, by))


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(EXACT_UNARY))
def test_large_exactly_rounded_unary_ops_on_two_threads_run_natively_bit_for_bit(
        name, dtype, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    fn, numpy_op = EXACT_UNARY[name]
    a = data(BIG, DTYPES[dtype][0], 14, positive=name == "sqrt")
    for layout, x in layouts(a):
        before = eager_pointwise.calls
        got = fn(x)
        assert eager_pointwise.calls == before + 1, f"{name} {layout}"
        _same_bits(got, numpy_op(a))


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", ["exp", "log"])
def test_large_exp_and_log_on_two_threads_run_natively_and_match_float64(name, dtype,
                                                                         monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    op, fn, tfn = {"exp": (Op.EXP, eager.exp, torch.exp),
                   "log": (Op.LOG, eager.log, torch.log)}[name]
    np_dtype, rtol, atol = DTYPES[dtype]
    a = data(BIG, np_dtype, 15, positive=name == "log")
    for layout, x in layouts(a):
        before = eager_pointwise.calls
        got = fn(x)
        assert eager_pointwise.calls == before + 1, f"{name} {layout}"
        check(got, reference(op, {}, [a]), tfn(torch.tensor(a)), dtype, rtol, atol, name)


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_large_add_and_sub_with_alpha_keep_numpys_rounding(dtype, monkeypatch):
    """The kernel would fuse other * alpha + self into one FMA; numpy rounds the product
    first, and so do the fused optimiser steps that match eager's bit for bit. An alpha
    of 1 is no alpha."""
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    np_dtype = DTYPES[dtype][0]
    a, b = data(BIG, np_dtype, 16), data(BIG, np_dtype, 17)
    for x, y, ax, by in _binary_cases(a, b):
        before = eager_pointwise.calls
        _same_bits(eager.add(x, y, alpha=0.37), ax + by * np_dtype(0.37))
        _same_bits(eager.sub(x, y, alpha=3), ax - by * np_dtype(3))
        assert eager_pointwise.calls == before
        _same_bits(eager.add(x, y, alpha=1), ax + by)
        assert eager_pointwise.calls == before + 1


@on_threads
def test_python_numbers_in_large_one_ufunc_ops_give_numpys_bits_and_pytorchs_dtypes(
        monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    a = data(BIG, np.float32, 18, positive=True)
    ints = np.random.default_rng(19).integers(-1000, 1000, BIG)
    x, i = eager.tensor(a), eager.tensor(ints)
    cases = [  # (eager result, numpy's float32 computation)
        (x * 0.1, a * np.float32(0.1)), (x - 1, a - np.float32(1)),
        (2.5 - x, np.float32(2.5) - a), (1 / x, np.float32(1) / a), (x / 3, a / np.float32(3)),
        (x + eager.tensor(0.25, dtype=eager.float64), a + np.float32(0.25)),
        (i * 0.5, ints.astype(np.float32) * np.float32(0.5)),  # int64 * a number: float32
        (x * eager.tensor(3), a * np.float32(3)),
    ]
    for got, want in cases:
        _same_bits(got, want)
    before = eager_pointwise.calls
    x * 0.1, 2.5 - x, i * 0.5
    assert eager_pointwise.calls == before + 3


@on_threads
def test_large_in_place_ops_on_two_threads_write_their_own_tensor(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    a, b = data(BIG, np.float32, 20), data(BIG, np.float32, 21)
    x = eager.tensor(a)
    t = eager.tensor(np.ascontiguousarray(a.T)).t()  # a transposed self
    address, t_address = x.data_ptr(), t.data_ptr()
    want, want_t = a.copy(), a.copy()
    before = eager_pointwise.calls
    assert x.add_(eager.tensor(b)) is x
    want += b
    x.mul_(0.5)
    want *= np.float32(0.5)
    x -= eager.tensor(b[:1])
    want -= b[:1]
    x.sub_(eager.tensor(b), alpha=0.3)  # (numpy: see the test above)
    want -= b * np.float32(0.3)
    x += x
    want += want
    t.div_(eager.tensor(b).abs() + 1)
    want_t /= np.abs(b) + np.float32(1)
    assert eager_pointwise.calls == before + 7  # (abs and + 1 of the divisor too)
    assert x.data_ptr() == address and t.data_ptr() == t_address
    assert t.stride() == (1, 300)
    _same_bits(x, want)
    _same_bits(t, want_t)


@pytest.mark.parametrize("name", ["add", "mul", "sub", "div", "log", "neg"])
def test_one_ufunc_ops_on_one_thread_stay_with_numpy(name, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    a, b = data(BIG, np.float32, 22, positive=True), data(BIG, np.float32, 23)
    x, y = eager.tensor(a), eager.tensor(b)
    fn, numpy_op = {**EXACT, "log": (eager.log, np.log), "neg": (eager.neg, np.negative)}[
        name]
    unary = name in ("log", "neg")
    before = eager_pointwise.calls
    got = fn(x) if unary else fn(x, y)
    assert eager_pointwise.calls == before
    _same_bits(got, numpy_op(a) if unary else numpy_op(a, b))  # numpy's own result


def test_exp_and_sqrt_run_natively_on_one_thread_from_their_size(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    for name, fn in (("exp", eager.exp), ("sqrt", eager.sqrt)):
        least, threads_only = elementwise.ONE_UFUNC_ELEMENTS[getattr(Op, name.upper())]
        assert not threads_only
        for n, ran in ((least - 1, 0), (least, 1)):
            a = data((n,), np.float64, 24, positive=True)
            before = eager_pointwise.calls
            got = fn(eager.tensor(a))
            assert eager_pointwise.calls == before + ran, (name, n)
            np.testing.assert_allclose(got.numpy(), getattr(np, name)(a), rtol=1e-15)


@on_threads
def test_integer_tanh_and_empty_one_ufunc_ops_keep_numpy_on_two_threads(monkeypatch):
    """(A 16-bit float's one-ufunc op goes native: numpy's path converts it to float32
    and back, elementwise._NATIVE_DTYPES.)"""
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    ints = eager.arange(200_000)
    x = eager.randn(*BIG)
    before = eager_pointwise.calls
    assert (ints + ints).dtype == eager.int64 and (ints * 2)[7].item() == 14
    np.testing.assert_array_equal(x.tanh().numpy(), np.tanh(x.numpy()))
    assert eager_pointwise.calls == before
    half = x.half()
    assert (half + half).dtype == eager.float16 and eager_pointwise.calls == before + 1
    empty = eager.randn(1 << 16, 1) + eager.randn(1, 0)  # no elements at all
    assert empty.shape == (1 << 16, 0) and empty.dtype == eager.float32


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_nan_inf_and_signed_zeros_in_large_one_ufunc_ops_come_out_as_numpy_gives_them(
        dtype, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    np_dtype, rtol, atol = DTYPES[dtype]
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1.0], np_dtype)
    rng = np.random.default_rng(25)
    a, b = rng.choice(specials, BIG), rng.choice(specials, BIG)
    x, y = eager.tensor(a), eager.tensor(b)
    before = eager_pointwise.calls
    with np.errstate(all="ignore"):
        for fn, numpy_op in EXACT.values():
            np.testing.assert_array_equal(fn(x, y).numpy(), numpy_op(a, b))
        for fn, numpy_op in (*EXACT_UNARY.values(), (eager.exp, np.exp), (eager.log, np.log)):
            np.testing.assert_allclose(fn(x).numpy(), numpy_op(a), rtol=rtol, atol=atol,
                                       equal_nan=True)
        assert np.array_equal(np.signbit((x + y).numpy()), np.signbit(a + b))
    assert eager_pointwise.calls == before + len(EXACT) + len(EXACT_UNARY) + 3
