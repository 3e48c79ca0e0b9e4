"""PyTorch-style tensor repr: `tensor([[ 58.,  64.], [139., 154.]], grad_fn=<MmBackward0>)`."""
from __future__ import annotations

import numpy as np

from ir import dtypes

_PRECISION = 4
_THRESHOLD = 1000
_EDGE = 3


def _float_format(values: np.ndarray):
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return lambda v: _special(v) or f"{v:.{_PRECISION}f}"
    nonzero = np.abs(finite[finite != 0])
    if np.all(finite == np.round(finite)) and (nonzero.size == 0 or nonzero.max() < 1e8):
        return lambda v: _special(v) or f"{v:.0f}."
    big, small = (nonzero.max(), nonzero.min()) if nonzero.size else (0.0, 0.0)
    if nonzero.size and (big / small > 1000.0 or big > 1e8 or small < 1e-4):
        return lambda v: _special(v) or f"{v:.{_PRECISION}e}"
    return lambda v: _special(v) or f"{v:.{_PRECISION}f}"


def _special(v) -> str:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return ""


def _formatter(a: np.ndarray):
    if a.dtype == np.bool_:
        return lambda v: "True" if v else "False"
    if a.dtype.kind == "f":
        return _float_format(a.astype(np.float64).ravel())
    return lambda v: str(int(v))


def _summarised(a: np.ndarray) -> bool:
    return a.size > _THRESHOLD


def _body(a: np.ndarray, fmt, width: int, indent: int, summarise: bool) -> str:
    if a.ndim == 0:
        return fmt(a.item()).rjust(width)
    if a.ndim == 1:
        items = list(a)
        if summarise and len(items) > 2 * _EDGE:
            cells = [fmt(v).rjust(width) for v in items[:_EDGE]] + ["..."] + \
                    [fmt(v).rjust(width) for v in items[-_EDGE:]]
        else:
            cells = [fmt(v).rjust(width) for v in items]
        return "[" + ", ".join(cells) + "]"
    rows = range(a.shape[0])
    if summarise and a.shape[0] > 2 * _EDGE:
        rows = list(range(_EDGE)) + [None] + list(range(a.shape[0] - _EDGE, a.shape[0]))
    sep = "," + "\n" * (a.ndim - 1) + " " * (indent + 1)
    parts = ["..." if r is None else _body(a[r], fmt, width, indent + 1, summarise) for r in rows]
    return "[" + sep.join(parts) + "]"


def tensor_repr(t) -> str:
    suffix = []
    if t.device.type != "cpu":
        suffix.append(f"device='{t.device}'")
    if t.device.type == "meta":
        body = "..."
        suffix.insert(0, f"size={tuple(t.shape)}")
    else:
        a = t.detach()._host_np()
        fmt = _formatter(a)
        summarise = _summarised(a)
        shown = a.ravel() if a.size else a
        width = max((len(fmt(v)) for v in shown), default=0)
        body = _body(a, fmt, width, len("tensor("), summarise)
        if a.size == 0 and a.ndim > 1:
            suffix.insert(0, f"size={tuple(t.shape)}")
            body = "[]"
    default_types = (dtypes.get_default_dtype(), dtypes.int64, dtypes.bool_)
    if t.dtype not in default_types or (t.dtype is not dtypes.get_default_dtype()
                                        and t.numel() == 0 and t.dtype is not dtypes.int64):
        suffix.append(f"dtype={t.dtype!r}")
    if t.grad_fn is not None:
        suffix.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffix.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + s for s in suffix) + ")"
