"""Eager float32 and float64 pointwise ops whose numpy function is composed (gelu,
gelu_backward, sigmoid, silu, erf, ...) run from NATIVE_ELEMENTS elements on as generated
kernels (compiler/backends/native/eager_pointwise.py): values against the op's own numpy
function in float64 and against PyTorch, over sizes, layouts, Python numbers, NaN and
inf; which path ran (eager_pointwise.calls); numpy where it must; gradients by finite
differences. One-ufunc ops (add, exp, ...) run natively only from ONE_UFUNC_ELEMENTS, most
only on threads (KILN_NUM_THREADS=2): there they match numpy bit for bit where the op is
exactly rounded; small ones are checked through eager_pointwise.run itself."""
import numpy as np
import pytest
import torch

import eager
from compiler.backends.native import eager_pointwise, eager_rows
from eager.kernels import elementwise
from eager.records import RECORDS
from eager.tensor import ops, wrap_scalar
from ir.ops import Op
from runtime import compile_service, pool

F, TF = eager.nn.functional, torch.nn.functional

UNARY = {  # name: (op, eager, torch, attrs)
    "gelu": (Op.GELU, F.gelu, TF.gelu, {}),
    "gelu_tanh": (Op.GELU, lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: TF.gelu(x, approximate="tanh"), {"approximate": "tanh"}),
    "sigmoid": (Op.SIGMOID, eager.sigmoid, torch.sigmoid, {}),
    "silu": (Op.SILU, F.silu, TF.silu, {}),
    "erf": (Op.ERF, eager.erf, torch.erf, {}),
    "relu": (Op.RELU, eager.relu, torch.relu, {}),
    "sign": (Op.SIGN, eager.sign, torch.sign, {}),
    "rsqrt": (Op.RSQRT, eager.rsqrt, torch.rsqrt, {}),
    "hardswish": (Op.HARDSWISH, F.hardswish, TF.hardswish, {}),
    "hardsigmoid": (Op.HARDSIGMOID, F.hardsigmoid, TF.hardsigmoid, {}),
}
BINARY = {
    "gelu_backward": (Op.GELU_BACKWARD, lambda g, x: ops.gelu_backward(g, x),
                      lambda g, x: torch.ops.aten.gelu_backward(g, x), {}),
    "gelu_backward_tanh": (Op.GELU_BACKWARD,
                           lambda g, x: ops.gelu_backward(g, x, approximate="tanh"),
                           lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh"),
                           {"approximate": "tanh"}),
    "pow": (Op.POW, eager.pow, torch.pow, {}),
}


def _natively(op: Op, like, **attrs):
    """op through eager_pointwise.run itself, as elementwise.py calls it (it keeps
    small one-ufunc ops with numpy); `like` (numpy's eager op) gives the result's shape and
    dtype. Python numbers are given as eager gives them, wrapped."""
    def call(*args):
        expected = like(*args)
        tensors = [a if isinstance(a, eager.Tensor) else wrap_scalar(a) for a in args]
        out = eager_pointwise.run(RECORDS[op], tensors, attrs, expected._shape,
                                  expected.dtype)
        assert out is not None
        return out
    return call


UFUNCS = {  # one-ufunc ops: numpy in eager at these sizes, here natively
    "exp": (Op.EXP, _natively(Op.EXP, eager.exp), torch.exp, {}),
    "tanh": (Op.TANH, _natively(Op.TANH, eager.tanh), torch.tanh, {}),
    "log": (Op.LOG, _natively(Op.LOG, eager.log), torch.log, {}),
    "sqrt": (Op.SQRT, _natively(Op.SQRT, eager.sqrt), torch.sqrt, {}),
    "neg": (Op.NEG, _natively(Op.NEG, eager.neg), torch.neg, {}),
    "abs": (Op.ABS, _natively(Op.ABS, eager.abs), torch.abs, {}),
}
UFUNCS2 = {
    "add": (Op.ADD, _natively(Op.ADD, eager.add), torch.add, {}),
    "add_alpha": (Op.ADD, _natively(Op.ADD, lambda a, b: eager.add(a, b, alpha=0.37),
                                    alpha=0.37),
                  lambda a, b: torch.add(a, b, alpha=0.37), {}),
    "sub_alpha": (Op.SUB, _natively(Op.SUB, lambda a, b: eager.sub(a, b, alpha=2), alpha=2),
                  lambda a, b: torch.sub(a, b, alpha=2), {}),
    "mul": (Op.MUL, _natively(Op.MUL, eager.mul), torch.mul, {}),
    "div": (Op.DIV, _natively(Op.DIV, eager.div), torch.div, {}),
    "maximum": (Op.MAXIMUM, _natively(Op.MAXIMUM, eager.maximum), torch.maximum, {}),
}
POSITIVE = {"rsqrt", "log", "sqrt", "pow"}  # compared on positive inputs (their domain)
DTYPES = {"float32": (np.float32, 2e-6, 1e-6), "float64": (np.float64, 1e-13, 1e-14)}


def _data(shape, dtype, seed, positive=False):
    a = np.random.default_rng(seed).standard_normal(shape) * 3
    return (np.abs(a) + 0.05 if positive else a).astype(dtype)


def _layouts(a: np.ndarray):
    """(name, eager tensor holding a's values): contiguous, transposed, sliced."""
    yield "contiguous", eager.tensor(a)
    if a.ndim == 2:
        yield "transposed", eager.tensor(np.ascontiguousarray(a.T)).t()
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    yield "sliced", eager.tensor(wide)[..., ::2]


def _reference(op, attrs, arrays):
    """The op's own numpy function in float64."""
    with np.errstate(all="ignore"):
        return RECORDS[op].pointwise.numpy(*[np.asarray(a, np.float64) for a in arrays], **attrs)


def _check(got, want_f64, want_torch, dtype, rtol, atol, name=""):
    """got against the float64 reference rounded to dtype (exp(88.9) is inf in float32)
    and against PyTorch; gelu_backward's tail is a difference of nearly equal terms (its
    error scales with the gradient, not with the result)."""
    assert got.dtype == getattr(eager, dtype)
    atol = atol * 20 if name.startswith("gelu_backward") else atol
    g = got.numpy()
    with np.errstate(over="ignore"):
        want = np.asarray(want_f64).astype(DTYPES[dtype][0])
    np.testing.assert_allclose(g, want, rtol=rtol, atol=atol, equal_nan=True)
    np.testing.assert_allclose(g, want_torch.numpy(), rtol=rtol, atol=atol, equal_nan=True)


def _native(shape) -> int:
    """Kernels one op launches on operands of `shape`: 1 from NATIVE_ELEMENTS on (1023
    elements run numpy)."""
    return int(np.prod(shape) >= elementwise.NATIVE_ELEMENTS)


def _run_unary(table, name, dtype, shape):
    op, fn, tfn, attrs = table[name]
    np_dtype, rtol, atol = DTYPES[dtype]
    a = _data(shape, np_dtype, 1, name in POSITIVE)
    for layout, x in _layouts(a):
        before = eager_pointwise.calls
        got = fn(x)
        assert eager_pointwise.calls == before + _native(shape), f"{name} {layout}"
        _check(got, _reference(op, attrs, [a]), tfn(torch.tensor(a)), dtype, rtol, atol, name)


def _run_binary(table, name, dtype, shape):
    op, fn, tfn, attrs = table[name]
    np_dtype, rtol, atol = DTYPES[dtype]
    a, b = _data(shape, np_dtype, 2, name in POSITIVE), _data(shape, np_dtype, 3)
    cases = [(x, y, a, b) for (_, x), (_, y) in zip(_layouts(a), _layouts(b))]
    cases.append((eager.tensor(a), eager.tensor(b[..., :1]), a, b[..., :1]))  # broadcast
    cases.append((eager.tensor(a[..., :1]).expand(*shape), eager.tensor(b), a[..., :1], b))
    for x, y, ax, by in cases:
        before = eager_pointwise.calls
        got = fn(x, y)
        assert eager_pointwise.calls == before + _native(shape), name
        if table is UFUNCS2 and "alpha" in name:  # the record's numpy takes no alpha
            want = tfn(torch.tensor(ax, dtype=torch.float64),
                       torch.tensor(by, dtype=torch.float64)).numpy()
        else:
            want = _reference(op, attrs, np.broadcast_arrays(ax, by))
        tx, ty = (torch.tensor(np.ascontiguousarray(v)) for v in np.broadcast_arrays(ax, by))
        _check(got, want, tfn(tx, ty), dtype, rtol, atol, name)


SHAPES = [(1023,), (1025,), (4097,), (37, 61)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_composed_unary_ops_run_natively_and_match_numpy_float64_and_torch(name, dtype, shape):
    _run_unary(UNARY, name, dtype, shape)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(BINARY))
def test_composed_binary_ops_run_natively_over_broadcast_and_strided_operands(name, dtype,
                                                                              shape):
    _run_binary(BINARY, name, dtype, shape)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(UFUNCS))
def test_one_ufunc_unary_ops_match_through_vmath_when_run_natively(name, dtype):
    _run_unary(UFUNCS, name, dtype, (37, 61))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(UFUNCS2))
def test_one_ufunc_binary_ops_and_alpha_match_when_run_natively(name, dtype):
    _run_binary(UFUNCS2, name, dtype, (37, 61))


def test_small_one_ufunc_ops_stay_with_numpy():
    x = eager.randn(4096)
    before = eager_pointwise.calls
    x + x, x * 0.5, x.exp(), x.tanh(), x - 1
    assert eager_pointwise.calls == before


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_python_numbers_and_zero_dim_operands_give_pytorchs_dtypes(dtype):
    np_dtype, rtol, atol = DTYPES[dtype]
    a = _data((4099,), np_dtype, 4, positive=True)
    x, t = eager.tensor(a), torch.tensor(a)
    mul = _natively(Op.MUL, eager.mul)
    cases = [(lambda u: mul(u, 0.5), lambda u: u * 0.5),
             (lambda u: _natively(Op.SUB, lambda a, b: a - b)(1, u), lambda u: 1 - u),
             (lambda u: u ** 1.5, lambda u: u ** 1.5), (lambda u: 2.0 ** u, lambda u: 2.0 ** u),
             (lambda u: _natively(Op.DIV, eager.div)(u, 3), lambda u: u / 3),
             (lambda u: _natively(Op.ADD, lambda a, b: eager.add(a, b, alpha=0.5),
                                  alpha=0.5)(u, 2), lambda u: torch.add(u, 2, alpha=0.5)),
             (lambda u: eager.where(u > 1, u, 0.0), lambda u: torch.where(u > 1, u, 0.0)),
             (lambda u: mul(u, eager.tensor(0.25, dtype=eager.float64)),
              lambda u: u * torch.tensor(0.25, dtype=torch.float64)),
             (lambda u: mul(u, eager.tensor(3)), lambda u: u * torch.tensor(3))]
    for fn, tfn in cases:
        before = eager_pointwise.calls
        got, want = fn(x), tfn(t)
        assert eager_pointwise.calls == before + 1
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_nan_and_inf_come_out_as_numpy_and_torch_give_them(dtype):
    np_dtype, rtol, atol = DTYPES[dtype]
    a = _data((2048,), np_dtype, 5)
    a[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 88.9]
    x, t = eager.tensor(a), torch.tensor(a)
    for name, (op, fn, tfn, attrs) in {**UNARY, **UFUNCS}.items():
        if name in ("rsqrt", "log", "sqrt"):
            continue  # negative inputs: NaN both ways, compared below on |x|
        want = tfn(t)
        if name == "gelu":  # PyTorch's float32 gelu(inf) is NaN, numpy's (and kiln's) inf
            want[1] = np.inf
        try:
            _check(fn(x), _reference(op, attrs, [a]), want, dtype, rtol, atol, name)
        except AssertionError as e:
            raise AssertionError(name) from e
    for name, tfn in (("rsqrt", torch.rsqrt), ("log", torch.log), ("sqrt", torch.sqrt)):
        fn = {**UNARY, **UFUNCS}[name][1]
        np.testing.assert_allclose(fn(x.abs()).numpy(), tfn(t.abs()).numpy(), rtol=rtol,
                                   atol=atol, equal_nan=True)
    g = eager.tensor(a[::-1].copy())
    np.testing.assert_allclose(ops.gelu_backward(g, x).numpy(),
                               torch.ops.aten.gelu_backward(torch.tensor(a[::-1].copy()),
                                                            t).numpy(),
                               rtol=rtol, atol=atol, equal_nan=True)


def test_small_empty_integer_and_half_tensors_keep_numpy():
    before = eager_pointwise.calls
    assert F.gelu(eager.randn(64)).shape == (64,)
    assert F.gelu(eager.randn(5000, 0)).shape == (5000, 0)
    assert eager.sign(eager.arange(5000)).dtype == eager.int64
    assert F.gelu(eager.randn(5000).half()).dtype == eager.float16
    assert eager.pow(eager.arange(1, 5000), 2).dtype == eager.int64
    assert eager.clamp(eager.randn(5000), -1, 1).abs().max().item() <= 1  # bounds compiled in
    assert eager_pointwise.calls == before
    empty = eager.pow(eager.rand(1025), eager.rand(0, 1))  # a broadcast with no elements
    assert empty.shape == (0, 1025) and empty.dtype == eager.float32


def test_keeping_numpy_with_kiln_eager_native_0(monkeypatch):
    monkeypatch.setenv("KILN_EAGER_NATIVE", "0")
    monkeypatch.setattr(elementwise, "_native_pointwise", None)  # read again at the next call
    before = eager_pointwise.calls
    x = eager.randn(3000)
    np.testing.assert_allclose(F.gelu(x).numpy(), TF.gelu(torch.tensor(x.numpy())).numpy(),
                               rtol=2e-6, atol=1e-6)
    assert eager_pointwise.calls == before and elementwise._native_pointwise is False


def test_numpy_runs_while_the_kernel_compiles_in_the_background(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "inline")  # each new kernel: one call pending
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(eager_rows, "RETRY_SECONDS", 0.0)  # the next call plans again
    compile_service.reset()
    try:
        a = _data((53, 71), np.float64, 6)
        x = eager.tensor(np.ascontiguousarray(a.T)).t()
        want = np.power(2.5, a)  # a number to the power of a transposed tensor: a layout
        before = eager_pointwise.calls  # only this test uses
        first, second = eager.pow(2.5, x), eager.pow(2.5, x)
        assert eager_pointwise.calls == before + 1  # the first call ran numpy
        for got in (first, second):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-13)
    finally:
        compile_service.reset()


def _directional_gradient_check(fn, x: np.ndarray, seed: int):
    """fn's gradient through eager autograd against central differences of
    sum(fn(x) * w) along random directions (float64)."""
    rng = np.random.default_rng(seed)
    w = eager.tensor(rng.standard_normal(x.shape))
    t = eager.tensor(x, requires_grad=True)
    before = eager_pointwise.calls
    (fn(t) * w).sum().backward()
    ran = eager_pointwise.calls - before
    grad = t.grad.numpy()
    h = 1e-6
    for _ in range(3):
        v = rng.standard_normal(x.shape)
        up = (fn(eager.tensor(x + h * v)) * w).sum().item()
        down = (fn(eager.tensor(x - h * v)) * w).sum().item()
        assert (up - down) / (2 * h) == pytest.approx((grad * v).sum(), rel=1e-6, abs=1e-8)
    return ran


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "tanh", "sigmoid", "silu"])
def test_gradients_through_native_kernels_match_finite_differences(name):
    fn = eager.tanh if name == "tanh" else UNARY[name][1]  # (tanh itself: numpy)
    x = _data((48, 67), np.float64, 7)
    ran = _directional_gradient_check(fn, x, 8)
    if name.startswith("gelu"):
        assert ran == 2  # gelu and gelu_backward, each one kernel
    elif name != "tanh":
        assert ran >= 1


def test_operands_of_other_dtypes_are_cast_in_the_kernel_as_numpy_casts_them():
    rng = np.random.default_rng(9)
    a = rng.standard_normal((45, 47)).astype(np.float32)
    b = rng.standard_normal((45, 47))
    mask = rng.standard_normal((45, 47)) > 0
    ints = rng.integers(-5, 5, (45, 47))
    cases = [  # (eager result, torch result)
        (eager.where(eager.tensor(mask), eager.tensor(a), eager.tensor(b)),
         torch.where(torch.tensor(mask), torch.tensor(a), torch.tensor(b))),
        (eager.where(eager.tensor(mask).t(), eager.tensor(a).t(), 0.0),
         torch.where(torch.tensor(mask).t(), torch.tensor(a).t(), 0.0)),
        (eager.sigmoid(eager.tensor(ints)), torch.sigmoid(torch.tensor(ints))),
        (eager.pow(eager.tensor(np.abs(a)), eager.tensor(b)),
         torch.pow(torch.tensor(np.abs(a)), torch.tensor(b))),
    ]
    for got, want in cases:
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-6, atol=1e-6)
    before = eager_pointwise.calls
    eager.where(eager.tensor(mask), eager.tensor(a), eager.tensor(b))
    eager.sigmoid(eager.tensor(ints))
    assert eager_pointwise.calls == before + 2


def test_large_tensors_split_across_threads_give_the_same_values(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")  # from launch.PARALLEL_ELEMENTS on
    a = _data((70001, 3), np.float32, 10)
    for x in (eager.tensor(a), eager.tensor(np.ascontiguousarray(a.T)).t()):
        before = eager_pointwise.calls
        got = F.gelu(x)
        assert eager_pointwise.calls == before + 1
        np.testing.assert_allclose(got.numpy(), _reference(Op.GELU, {}, [a]), rtol=2e-6,
                                   atol=1e-6)  # (PyTorch's float32 gelu is 1e-6 off here)


def test_a_layout_is_planned_again_only_after_a_pause_while_its_kernel_compiles(monkeypatch):
    """While a background worker compiles the kernel numpy runs, and the layout is not
    planned on every call (as eager_rows)."""
    planned = []
    clock = [100.0]
    monkeypatch.setattr(eager_rows.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(eager_pointwise, "_kernel", lambda *key: planned.append(key))
    busy = [1]  # kernels the workers have not delivered yet
    monkeypatch.setattr(eager_rows.compile_service, "pending", lambda: busy[0])
    a = _data((4096, 5), np.float32, 11)
    x = eager.tensor(a)
    before = eager_pointwise.calls
    for _ in range(3):
        np.testing.assert_allclose(F.silu(x).numpy(), _reference(Op.SILU, {}, [a]),
                                   rtol=2e-6, atol=1e-6)
    assert len(planned) == 1 and eager_pointwise.calls == before
    clock[0] += eager_rows.RETRY_SECONDS
    F.silu(x)
    assert len(planned) == 2


# One-ufunc ops in eager: on threads (most) or from ONE_UFUNC_ELEMENTS (exp, sqrt)
on_threads = pytest.mark.skipif(not pool.available(), reason="runtime.pool runs on Linux "
                                "x86-64 only; elsewhere one-ufunc ops keep numpy")
BIG = (300, 451)  # 135300 elements: from every ONE_UFUNC_ELEMENTS size on
EXACT = {  # exactly rounded ops: numpy's result in the same dtype, bit for bit
    "add": (eager.add, np.add), "sub": (eager.sub, np.subtract),
    "mul": (eager.mul, np.multiply), "div": (eager.div, np.divide),
    "maximum": (eager.maximum, np.maximum), "minimum": (eager.minimum, np.minimum),
}
EXACT_UNARY = {"neg": (eager.neg, np.negative), "abs": (eager.abs, np.abs),
               "sqrt": (eager.sqrt, np.sqrt)}


def _same_bits(got, want: np.ndarray):
    """got (an eager tensor) holds want's values bit for bit, in want's dtype."""
    g = got.numpy()
    assert g.dtype == want.dtype and g.shape == want.shape
    assert np.array_equal(g.view(f"u{g.itemsize}"), want.view(f"u{want.itemsize}"))


def _binary_cases(a: np.ndarray, b: np.ndarray):
    """(eager x, eager y, numpy x, numpy y): every layout pair of _layouts, a column and
    a row broadcast, and an expanded first operand."""
    cases = [(x, y, a, b) for (_, x), (_, y) in zip(_layouts(a), _layouts(b))]
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
    fn, reference = EXACT[name]
    np_dtype = DTYPES[dtype][0]
    a, b = _data(BIG, np_dtype, 12), _data(BIG, np_dtype, 13, positive=name == "div")
    for x, y, ax, by in _binary_cases(a, b):
        before = eager_pointwise.calls
        got = fn(x, y)
        assert eager_pointwise.calls == before + 1, name
        _same_bits(got, reference(ax, by))


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(EXACT_UNARY))
def test_large_exactly_rounded_unary_ops_on_two_threads_run_natively_bit_for_bit(
        name, dtype, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    fn, reference = EXACT_UNARY[name]
    a = _data(BIG, DTYPES[dtype][0], 14, positive=name == "sqrt")
    for layout, x in _layouts(a):
        before = eager_pointwise.calls
        got = fn(x)
        assert eager_pointwise.calls == before + 1, f"{name} {layout}"
        _same_bits(got, reference(a))


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", ["exp", "log"])
def test_large_exp_and_log_on_two_threads_run_natively_and_match_float64(name, dtype,
                                                                         monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    op, fn, tfn = {"exp": (Op.EXP, eager.exp, torch.exp),
                   "log": (Op.LOG, eager.log, torch.log)}[name]
    np_dtype, rtol, atol = DTYPES[dtype]
    a = _data(BIG, np_dtype, 15, positive=name == "log")
    for layout, x in _layouts(a):
        before = eager_pointwise.calls
        got = fn(x)
        assert eager_pointwise.calls == before + 1, f"{name} {layout}"
        _check(got, _reference(op, {}, [a]), tfn(torch.tensor(a)), dtype, rtol, atol, name)


@on_threads
@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_large_add_and_sub_with_alpha_keep_numpys_rounding(dtype, monkeypatch):
    """The kernel would fuse other * alpha + self into one FMA; numpy rounds the product
    first, and so do the fused optimiser steps that match eager's bit for bit. An alpha
    of 1 is no alpha."""
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    np_dtype = DTYPES[dtype][0]
    a, b = _data(BIG, np_dtype, 16), _data(BIG, np_dtype, 17)
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
    a = _data(BIG, np.float32, 18, positive=True)
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
    a, b = _data(BIG, np.float32, 20), _data(BIG, np.float32, 21)
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
    a, b = _data(BIG, np.float32, 22, positive=True), _data(BIG, np.float32, 23)
    x, y = eager.tensor(a), eager.tensor(b)
    fn, reference = {**EXACT, "log": (eager.log, np.log), "neg": (eager.neg, np.negative)}[
        name]
    unary = name in ("log", "neg")
    before = eager_pointwise.calls
    got = fn(x) if unary else fn(x, y)
    assert eager_pointwise.calls == before
    _same_bits(got, reference(a) if unary else reference(a, b))  # numpy's own result


def test_exp_and_sqrt_run_natively_on_one_thread_from_their_size(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    for name, fn in (("exp", eager.exp), ("sqrt", eager.sqrt)):
        least, threads_only = elementwise.ONE_UFUNC_ELEMENTS[getattr(Op, name.upper())]
        assert not threads_only
        for n, ran in ((least - 1, 0), (least, 1)):
            a = _data((n,), np.float64, 24, positive=True)
            before = eager_pointwise.calls
            got = fn(eager.tensor(a))
            assert eager_pointwise.calls == before + ran, (name, n)
            np.testing.assert_allclose(got.numpy(), getattr(np, name)(a), rtol=1e-15)


@on_threads
def test_integer_half_tanh_and_empty_one_ufunc_ops_keep_numpy_on_two_threads(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    ints = eager.arange(200_000)
    x = eager.randn(*BIG)
    before = eager_pointwise.calls
    assert (ints + ints).dtype == eager.int64 and (ints * 2)[7].item() == 14
    assert (x.half() + x.half()).dtype == eager.float16
    np.testing.assert_array_equal(x.tanh().numpy(), np.tanh(x.numpy()))
    assert eager_pointwise.calls == before
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
        for fn, reference in EXACT.values():
            np.testing.assert_array_equal(fn(x, y).numpy(), reference(a, b))
        for fn, reference in (*EXACT_UNARY.values(), (eager.exp, np.exp), (eager.log, np.log)):
            np.testing.assert_allclose(fn(x).numpy(), reference(a), rtol=rtol, atol=atol,
                                       equal_nan=True)
        assert np.array_equal(np.signbit((x + y).numpy()), np.signbit(a + b))
    assert eager_pointwise.calls == before + len(EXACT) + len(EXACT_UNARY) + 3
