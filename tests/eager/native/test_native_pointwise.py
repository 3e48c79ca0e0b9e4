"""Eager float32 and float64 pointwise ops whose numpy function is composed (gelu,
gelu_backward, sigmoid, silu, erf, ...) run from NATIVE_ELEMENTS elements on as generated
kernels (eager/backends/native/pointwise.py): values against the op's own numpy
function in float64 and against PyTorch, over sizes, layouts, Python numbers, NaN and
inf; which path ran (eager_pointwise.calls); numpy where it must; gradients by finite
differences. One-ufunc ops (add, exp, ...) are checked here through eager_pointwise.run
itself (small ones keep numpy in eager); test_eager_ufunc_threads.py has them in eager."""
import numpy as np
import pytest

import eager
from eager.backends.native import pointwise as eager_pointwise, rows as eager_rows
from eager.kernels import elementwise
from ir.records import RECORDS
from eager.tensor import ops, wrap_scalar
from ir.ops import Op
from runtime.llvm import compile_service
from tests.eager.native.pointwise_cases import DTYPES, check, data, layouts, reference

torch = pytest.importorskip("torch", reason="PyTorch (the compare extra) is the reference "
                                              "these kernels are checked against")

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
    "frac": (Op.FRAC, eager.frac, torch.frac, {}),
    "sgn": (Op.SGN, eager.sgn, torch.sgn, {}),
    "deg2rad": (Op.DEG2RAD, eager.deg2rad, torch.deg2rad, {}),
    "rad2deg": (Op.RAD2DEG, eager.rad2deg, torch.rad2deg, {}),
}
BINARY = {
    "gelu_backward": (Op.GELU_BACKWARD, lambda g, x: ops.gelu_backward(g, x),
                      lambda g, x: torch.ops.aten.gelu_backward(g, x), {}),
    "gelu_backward_tanh": (Op.GELU_BACKWARD,
                           lambda g, x: ops.gelu_backward(g, x, approximate="tanh"),
                           lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh"),
                           {"approximate": "tanh"}),
    "pow": (Op.POW, eager.pow, torch.pow, {}),
    "logaddexp": (Op.LOGADDEXP, eager.logaddexp, torch.logaddexp, {}),
    "logaddexp2": (Op.LOGADDEXP2, eager.logaddexp2, torch.logaddexp2, {}),
    "xlogy": (Op.XLOGY, eager.xlogy, torch.xlogy, {}),
    "fmod": (Op.FMOD, eager.fmod, torch.fmod, {}),
    "remainder": (Op.REMAINDER, eager.remainder, torch.remainder, {}),
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
    "floor": (Op.FLOOR, _natively(Op.FLOOR, eager.floor), torch.floor, {}),
    "ceil": (Op.CEIL, _natively(Op.CEIL, eager.ceil), torch.ceil, {}),
    "trunc": (Op.TRUNC, _natively(Op.TRUNC, eager.trunc), torch.trunc, {}),
    "round": (Op.ROUND, _natively(Op.ROUND, eager.round), torch.round, {}),
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
    "hypot": (Op.HYPOT, _natively(Op.HYPOT, eager.hypot), torch.hypot, {}),
    "copysign": (Op.COPYSIGN, _natively(Op.COPYSIGN, eager.copysign), torch.copysign, {}),
    "nextafter": (Op.NEXTAFTER, _natively(Op.NEXTAFTER, eager.nextafter), torch.nextafter, {}),
}
POSITIVE = {"rsqrt", "log", "sqrt", "pow"}  # compared on positive inputs (their domain)
def _native(shape) -> int:
    """Kernels one op launches on operands of `shape`: 1 from NATIVE_ELEMENTS on (1023
    elements run numpy)."""
    return int(np.prod(shape) >= elementwise.NATIVE_ELEMENTS)


def _run_unary(table, name, dtype, shape):
    op, fn, tfn, attrs = table[name]
    np_dtype, rtol, atol = DTYPES[dtype]
    a = data(shape, np_dtype, 1, name in POSITIVE)
    for layout, x in layouts(a):
        before = eager_pointwise.calls
        got = fn(x)
        assert eager_pointwise.calls == before + _native(shape), f"{name} {layout}"
        check(got, reference(op, attrs, [a]), tfn(torch.tensor(a)), dtype, rtol, atol, name)


def _run_binary(table, name, dtype, shape):
    op, fn, tfn, attrs = table[name]
    np_dtype, rtol, atol = DTYPES[dtype]
    a, b = data(shape, np_dtype, 2, name in POSITIVE), data(shape, np_dtype, 3)
    cases = [(x, y, a, b) for (_, x), (_, y) in zip(layouts(a), layouts(b))]
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
            want = reference(op, attrs, np.broadcast_arrays(ax, by))
        tx, ty = (torch.tensor(np.ascontiguousarray(v)) for v in np.broadcast_arrays(ax, by))
        check(got, want, tfn(tx, ty), dtype, rtol, atol, name)


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
    x + x, x * 0.5, x.exp(), x.tanh(), x - 1, x.floor(), x.round()
    assert eager_pointwise.calls == before


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_python_numbers_and_zero_dim_operands_give_pytorchs_dtypes(dtype):
    np_dtype, rtol, atol = DTYPES[dtype]
    a = data((4099,), np_dtype, 4, positive=True)
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
    a = data((2048,), np_dtype, 5)
    a[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 88.9]
    x, t = eager.tensor(a), torch.tensor(a)
    for name, (op, fn, tfn, attrs) in {**UNARY, **UFUNCS}.items():
        if name in ("rsqrt", "log", "sqrt"):
            continue  # negative inputs: NaN both ways, compared below on |x|
        want = tfn(t)
        if name == "gelu":  # PyTorch's float32 gelu(inf) is NaN, numpy's (and kiln's) inf
            want[1] = np.inf
        try:
            check(fn(x), reference(op, attrs, [a]), want, dtype, rtol, atol, name)
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


def test_small_empty_and_integer_tensors_keep_numpy():
    before = eager_pointwise.calls
    assert F.gelu(eager.randn(64)).shape == (64,)
    assert F.gelu(eager.randn(64).half()).shape == (64,)
    assert F.gelu(eager.randn(5000, 0)).shape == (5000, 0)
    assert eager.sign(eager.arange(5000)).dtype == eager.int64
    assert eager.sign(eager.arange(5000).to(eager.int8)).dtype == eager.int8
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
        a = data((53, 71), np.float64, 6)
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
    x = data((48, 67), np.float64, 7)
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
    a = data((70001, 3), np.float32, 10)
    for x in (eager.tensor(a), eager.tensor(np.ascontiguousarray(a.T)).t()):
        before = eager_pointwise.calls
        got = F.gelu(x)
        assert eager_pointwise.calls == before + 1
        np.testing.assert_allclose(got.numpy(), reference(Op.GELU, {}, [a]), rtol=2e-6,
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
    a = data((4096, 5), np.float32, 11)
    x = eager.tensor(a)
    before = eager_pointwise.calls
    for _ in range(3):
        np.testing.assert_allclose(F.silu(x).numpy(), reference(Op.SILU, {}, [a]),
                                   rtol=2e-6, atol=1e-6)
    assert len(planned) == 1 and eager_pointwise.calls == before
    clock[0] += eager_rows.RETRY_SECONDS
    F.silu(x)
    assert len(planned) == 2
