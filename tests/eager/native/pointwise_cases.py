"""What tests/eager/native/test_native_pointwise.py and test_eager_ufunc_threads.py share:
the dtypes with their tolerances, inputs, layouts, the float64 reference and the check
against it and PyTorch."""
import numpy as np

import eager
from ir.records import RECORDS

DTYPES = {"float32": (np.float32, 2e-6, 1e-6), "float64": (np.float64, 1e-13, 1e-14)}


def data(shape, dtype, seed, positive=False):
    a = np.random.default_rng(seed).standard_normal(shape) * 3
    return (np.abs(a) + 0.05 if positive else a).astype(dtype)


def layouts(a: np.ndarray):
    """(name, eager tensor holding a's values): contiguous, transposed, sliced."""
    yield "contiguous", eager.tensor(a)
    if a.ndim == 2:
        yield "transposed", eager.tensor(np.ascontiguousarray(a.T)).t()
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    yield "sliced", eager.tensor(wide)[..., ::2]


def reference(op, attrs, arrays):
    """The op's own numpy function in float64."""
    with np.errstate(all="ignore"):
        return RECORDS[op].pointwise.numpy(*[np.asarray(a, np.float64) for a in arrays], **attrs)


def check(got, want_f64, want_torch, dtype, rtol, atol, name=""):
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
