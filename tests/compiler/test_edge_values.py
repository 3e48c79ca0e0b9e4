"""Values at the edges that kiln got wrong or refused (issue 28), each against PyTorch, in
eager and compiled (through the interpreter and to native code). The standing table of
special values through every elementwise op is test_special_values.py."""
import math
import warnings

import numpy as np
import pytest

import compiler
import eager
from runtime.llvm.jit import compiling_here
from tests.compiler.value_checks import mismatches, not_native
from tests.eager.torch_parity import require_torch

INF = math.inf


def results(fn, *tensors, native: bool = True) -> dict:
    """fn's result in eager, compiled through the interpreter and compiled to native code
    (asserting that it ran as generated code, unless native=False)."""
    out = {"eager": fn(*tensors), "interpreted": compiler.compile(fn, backend="eager")(*tensors)}
    cf = compiler.compile(fn, backend="native")
    lowered = compiler.lower(cf, *tensors)
    with compiling_here():
        out["native"] = cf(*tensors)
    if native:
        assert not not_native(cf, lowered), not_native(cf, lowered)
    return out


def assert_as_pytorch(fn, *arrays, native: bool = True, elementwise: bool = True):
    """fn(eager, *tensors) gives what fn(torch, *tensors) gives, on every path: the same
    NaNs, infinities and signed zeros, finite values within 4 ulp. For an elementwise fn,
    PyTorch's answer for each element alone (its scalar loop: its vectorised loops break
    ties of signed zeros otherwise, see test_special_values.py)."""
    torch = require_torch()
    arrays = [np.asarray(a) for a in arrays]
    if elementwise:
        flat = np.broadcast_arrays(*arrays)
        want = np.concatenate([fn(torch, *(torch.from_numpy(a.reshape(-1)[i:i + 1].copy())
                                           for a in flat)).numpy().reshape(-1)
                               for i in range(flat[0].size)]).reshape(flat[0].shape)
    else:
        want = fn(torch, *(torch.from_numpy(a) for a in arrays)).numpy()
    got = results(lambda *ts: fn(eager, *ts), *(eager.tensor(a) for a in arrays), native=native)
    for path, t in got.items():
        bad = mismatches(t.numpy(), want)
        assert t.dtype.name == str(want.dtype) and not bad.any(), \
            f"{path}: {t.numpy()[bad]}, PyTorch {want[bad]}"


def test_maximum_and_minimum_give_their_first_operand_where_zeros_of_two_signs_tie():
    a, b = np.array([-0.0, 0.0, -0.0, np.nan]), np.array([0.0, -0.0, -1.0, 0.0])
    for dtype in (np.float32, np.float64):
        assert_as_pytorch(lambda lib, x, y: lib.maximum(x, y), a.astype(dtype), b.astype(dtype))
        assert_as_pytorch(lambda lib, x, y: lib.minimum(x, y), a.astype(dtype), b.astype(dtype))
    out = results(lambda x, y: eager.maximum(x, y), eager.tensor(a), eager.tensor(b))
    assert all(np.signbit(t.numpy()[:2]).tolist() == [True, False] for t in out.values())


def test_clamp_keeps_x_where_it_ties_with_a_zero_bound():
    x = np.array([-0.0, 0.0, np.nan, -1.0, 1.0], np.float32)
    for bound in (0.0, -0.0):
        assert_as_pytorch(lambda lib, t: lib.clamp_min(t, bound), x)
        assert_as_pytorch(lambda lib, t: lib.clamp_max(t, bound), x)
        assert_as_pytorch(lambda lib, t: lib.clamp(t, bound, 1.0), x)


def test_add_and_sub_of_infinities_and_overflow_give_values_not_warnings():
    x = eager.tensor([INF, 3e38, -INF])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_as_pytorch(lambda lib, t: t - t, x.numpy())
        assert_as_pytorch(lambda lib, t: t + t, x.numpy())
        assert_as_pytorch(lambda lib, t: lib.add(t, t, alpha=2), x.numpy())
        assert_as_pytorch(lambda lib, t: lib.sub(t, t, alpha=-3), x.numpy())


def test_log1p_of_huge_and_infinite_values():
    assert_as_pytorch(lambda lib, t: lib.log1p(t), np.array([INF, 3e38, -1.0, -INF], np.float32))
    assert_as_pytorch(lambda lib, t: t.log1p(), np.array([1e308, INF, 1e-300, -0.0]))
    assert eager.tensor([INF, 3e38]).log1p()[1].item() == np.log1p(np.float32(3e38))


def test_expm1_of_large_small_and_infinite_values():
    assert_as_pytorch(lambda lib, t: lib.expm1(t), np.array([INF, 88.0, 89.0, -INF, -1e-30,
                                                             -0.0, 1e-45], np.float32))
    assert_as_pytorch(lambda lib, t: t.expm1(), np.array([709.0, 710.0, -800.0, 1e-300]))


SIGNED = np.array([-0.0, 0.0, np.nan, -1e-45, 1e-45, -1.0, 1.0, -INF, INF], np.float32)


@pytest.mark.parametrize("name", ["relu", "elu", "celu", "selu", "relu6", "hardtanh",
                                  "leaky_relu", "softshrink", "hardshrink", "logsigmoid",
                                  "softplus", "mish"])
def test_activations_keep_signed_zeros_subnormals_and_nan(name):
    assert_as_pytorch(lambda lib, t: getattr(lib.nn.functional, name)(t), SIGNED)
    assert_as_pytorch(lambda lib, t: getattr(lib.nn.functional, name)(t),
                      SIGNED.astype(np.float64))


def test_threshold_keeps_nan():
    assert_as_pytorch(lambda lib, t: lib.nn.functional.threshold(t, 0.5, -2.0), SIGNED)


def test_hardtanh_and_relu6_have_no_gradient_at_their_bounds():
    torch = require_torch()
    x = np.array([-1.0, 1.0, -0.0, 0.0, 6.0, 0.5], np.float64)
    for fn in (lambda lib, t: lib.nn.functional.hardtanh(t),
               lambda lib, t: lib.nn.functional.relu6(t)):
        grads = []
        for lib in (eager, torch):
            t = lib.tensor(x, requires_grad=True)
            fn(lib, t).sum().backward()
            grads.append(t.grad.numpy())
        np.testing.assert_array_equal(*grads)


def test_logsigmoid_is_accurate_far_from_zero_and_its_gradient_at_zero_is_a_half():
    torch = require_torch()
    x = np.array([7.0, 20.0, -7.0, -25.0, -40.0], np.float32)
    wide = x.astype(np.float64)
    exact = np.minimum(wide, 0) - np.log1p(np.exp(-np.abs(wide)))  # PyTorch's formula
    for dtype in (np.float32, np.float64):
        got = eager.nn.functional.logsigmoid(eager.tensor(x.astype(dtype))).numpy()
        assert not mismatches(got, exact.astype(dtype), ulps=1).any(), (got, exact)
    t = eager.tensor([0.0], requires_grad=True)
    eager.nn.functional.logsigmoid(t).backward()
    w = torch.tensor([0.0], requires_grad=True)
    torch.nn.functional.logsigmoid(w).backward()
    assert t.grad.item() == w.grad.item() == 0.5


def test_logsumexp_over_an_empty_dim_is_minus_inf():
    for shape, dim, keepdim in [((2, 0), 1, False), ((0, 3), 0, True), ((2, 0, 3), (1, 2), False),
                                ((0, 3), 1, False)]:
        assert_as_pytorch(lambda lib, t: lib.logsumexp(t, dim, keepdim=keepdim),
                          np.zeros(shape, np.float32), native=False, elementwise=False)


@pytest.mark.parametrize("exponent", [0.5, -0.5, 2, 3, -1, -2, 1.5, 0])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_of_a_number_as_pytorch_half_is_sqrt(exponent, dtype):
    """pow.Tensor_Scalar runs x ** 0.5 as sqrt and x ** -0.5 as rsqrt: NaN at -inf, -0.0
    and -inf at -0.0, where C's pow gives inf, 0.0 and 0.0, inf."""
    x = np.array([-INF, -0.0, 0.0, 4.0, np.nan, -2.0, INF, 1e-45], dtype)
    assert_as_pytorch(lambda lib, t: t ** exponent, x)
    assert_as_pytorch(lambda lib, t: lib.pow(t, exponent), np.tile(x, 200))  # eager's kernels


def test_pow_with_a_tensor_exponent_of_a_half_is_cs_pow():
    x = np.array([-INF, -0.0, 4.0], np.float32)
    assert_as_pytorch(lambda lib, t: lib.pow(t, lib.tensor(0.5)), x, elementwise=False)
    assert_as_pytorch(lambda lib, t, e: lib.pow(t, e), x.reshape(3, 1),
                      np.array([[0.5, -0.5]], np.float32), elementwise=False)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_pow_of_integers_by_a_number_compiles(dtype):
    x = np.array([3, -4, 0], dtype)
    # pow of integers has no generated code: its kernel runs through the interpreter
    for exponent in (2, 3, 0):
        assert_as_pytorch(lambda lib, t: t ** exponent, x, native=False)
    for backend in ("eager", "native"):
        compiled = compiler.compile(lambda t: t ** -1, backend=backend)
        with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
            compiled(eager.tensor(x))


@pytest.mark.parametrize("name, fn", [
    ("sum", lambda b: b.sum().sum(0)), ("sum-keepdim", lambda b: b.sum().sum(-1, keepdim=True)),
    ("amax", lambda b: b.sum().amax(-1)), ("amin", lambda b: b.sum().amin(0)),
    ("mean", lambda b: b.sum().mean(0)), ("mean-keepdim", lambda b: b.sum().mean(0, True)),
    ("var", lambda b: b.sum().var(0, correction=0)), ("softmax", lambda b: b.sum().softmax(0)),
    ("log_softmax", lambda b: b.sum().log_softmax(-1)),
    ("exp-sum", lambda b: (b.sum() * 0.5).exp().sum(0) + 1)])
def test_reductions_of_a_zero_dim_value_over_its_dim_compile(name, fn):
    assert_as_pytorch(lambda lib, b: fn(b), np.arange(3.0, dtype=np.float32), elementwise=False)


def test_max_over_the_dim_of_a_zero_dim_value_compiles():
    # max.dim's two results have no generated code (test_native_coverage.NOT_NATIVE)
    assert_as_pytorch(lambda lib, b: b.sum().max(0)[0], np.arange(3.0, dtype=np.float32),
                      elementwise=False, native=False)
