"""16-bit log_softmax as PyTorch's CPU kernel computes it: over the last dim it keeps a
row's sum of exponentials and that sum's log in the 16-bit type (each rounded), over
another dim it rounds only the result. Against a numpy model of that rule, on eager's
numpy and generated-kernel paths and compiled, and against PyTorch where installed."""
import time

import numpy as np
import pytest

import compiler
import eager
from eager.backends.native import rows as eager_rows
from eager.kernels import reduction
from ir import dtypes
from tests.eager.native.narrow_cases import numpy_kernels


def _model(x: np.ndarray, dim: int, dt) -> np.ndarray:
    """log_softmax of float32 x (16-bit values) over dim, as float32."""
    def rounded(a):
        return dtypes.cast(a.astype(np.float32), dt).astype(np.float32)
    shifted = x - x.max(dim, keepdims=True)
    total = np.exp(shifted).sum(dim, keepdims=True, dtype=np.float32)
    last = dim % x.ndim == x.ndim - 1
    if last:
        total = rounded(np.log(rounded(total)))
    else:
        total = np.log(total)
    return rounded(shifted - total)


def _input(dt, shape=(40, 301), seed=3):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3
    return eager.tensor(a).to(getattr(eager, dt.name))


def _count_apart(got, want) -> int:
    return int((got != want).sum())


def _assert_model(got: np.ndarray, want: np.ndarray, dt, dim: int) -> None:
    """got is the model's, but for at most one row (or column) a 16-bit ulp apart: a
    float32 sum in the generated kernel's lane order can round the other way where the
    model's (numpy's pairwise) sits at a 16-bit tie (equal on Zen 4 over these rows)."""
    apart = got != want
    lines = apart.any(axis=dim)  # (one per row the op reduces)
    assert lines.sum() <= 1, (int(apart.sum()), int(lines.sum()))
    ulp = np.abs(want) * (2.0 ** -7 if dt is dtypes.bfloat16 else 2.0 ** -10)
    assert (np.abs(got - want)[apart] <= ulp[apart] + 1e-30).all()


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
@pytest.mark.parametrize("dim", [-1, 0])
def test_16_bit_log_softmax_rounds_the_rows_sum_and_log_over_the_last_dim(dt, dim, monkeypatch):
    ran = []
    original = eager_rows.run
    monkeypatch.setattr(reduction._native_rows or eager_rows, "run",
                        lambda *a: ran.append(original(*a) is not None) or original(*a))
    x = _input(dt)
    want = _model(x.float().numpy(), dim, dt)
    with numpy_kernels():
        np.testing.assert_array_equal(eager.log_softmax(x, dim).float().numpy(), want)
    for _ in range(200):  # the generated kernel, once it is compiled
        got = eager.log_softmax(x, dim)
        if ran and ran[-1]:
            break
        time.sleep(0.05)
    assert ran and ran[-1], "the row kernel did not run"
    _assert_model(got.float().numpy(), want, dt, dim)
    if dim == -1:  # rounding only the result is another answer: the test can fail
        once = dtypes.cast(np.asarray(eager.log_softmax(x.float(), dim).numpy()), dt)
        assert _count_apart(once.astype(np.float32), want) > 100


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
@pytest.mark.parametrize("dim", [-1, 0])
def test_a_compiled_16_bit_log_softmax_is_eagers(dt, dim):
    x = _input(dt, (33, 130), seed=4)
    f = compiler.compile(lambda v: eager.log_softmax(v, dim))
    f(x)
    compiler.wait_for_kernels(60)
    _assert_model(f(x).float().numpy(), _model(x.float().numpy(), dim, dt), dt, dim)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_16_bit_log_softmax_and_cross_entropy_are_pytorchs(dt):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(6).standard_normal((64, 257)).astype(np.float32) * 3
    target = np.random.default_rng(7).integers(0, 257, 64)
    for dim in (-1, 0):
        want = torch.log_softmax(torch.tensor(a).to(getattr(torch, dt)), dim).float().numpy()
        got = eager.log_softmax(eager.tensor(a).to(getattr(eager, dt)), dim).float().numpy()
        np.testing.assert_array_equal(got, want)
    want = torch.nn.functional.cross_entropy(torch.tensor(a).to(getattr(torch, dt)),
                                             torch.tensor(target), reduction="none")
    got = eager.nn.functional.cross_entropy(eager.tensor(a).to(getattr(eager, dt)),
                                            eager.tensor(target), reduction="none")
    np.testing.assert_array_equal(got.float().numpy(), want.float().numpy())
