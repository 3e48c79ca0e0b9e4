"""Values at the edges that kiln got wrong or refused (issue 28), each against PyTorch, in
eager and compiled (through the interpreter and to native code). The standing table of
special values through every elementwise op is test_special_values.py."""
import math
import warnings

import numpy as np

import compiler
import eager
from runtime.jit import compiling_here
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


def assert_as_pytorch(fn, *arrays, native: bool = True):
    """fn(eager, *tensors) gives what fn(torch, *tensors) gives, on every path: the same
    NaNs, infinities and signed zeros, finite values within 4 ulp."""
    torch = require_torch()
    want = fn(torch, *(torch.from_numpy(np.asarray(a)) for a in arrays)).numpy()
    got = results(lambda *ts: fn(eager, *ts), *(eager.tensor(np.asarray(a)) for a in arrays),
                  native=native)
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
