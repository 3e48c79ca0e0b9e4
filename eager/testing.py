"""`eager.testing.assert_close`, as PyTorch's: default tolerances by dtype."""
from __future__ import annotations

import numpy as np

from eager.tensor import Tensor

_TOLERANCES = {"float16": (1e-3, 1e-5), "float32": (1.3e-6, 1e-5), "float64": (1e-7, 1e-7)}


def _as_array(x):
    if isinstance(x, Tensor):
        return x.detach()._host_np(), x.dtype.name
    a = np.asarray(x)
    return a, a.dtype.name


def assert_close(actual, expected, *, rtol=None, atol=None, equal_nan=False,
                 check_dtype=True, msg=None) -> None:
    a, adt = _as_array(actual)
    e, edt = _as_array(expected)
    if check_dtype and adt != edt:
        raise AssertionError(msg or f"The values for attribute 'dtype' do not match: "
                             f"{adt} != {edt}.")
    if a.shape != e.shape:
        raise AssertionError(msg or f"The values for attribute 'shape' do not match: "
                             f"{a.shape} != {e.shape}.")
    default_rtol, default_atol = _TOLERANCES.get(adt, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    close = np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    if not close.all():
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        raise AssertionError(msg or f"Tensor-likes are not close!\n\nMismatched elements: "
                             f"{int((~close).sum())} / {a.size}\n"
                             f"Greatest absolute difference: {np.nanmax(diff)}")
