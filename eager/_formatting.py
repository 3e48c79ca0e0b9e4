"""PyTorch's tensor repr, after torch/_tensor_str.py: one formatter per tensor (integer,
fixed or scientific notation, and one width, chosen from the nonzero finite values),
rows wrapped at 80 columns, tensors over 1000 elements summarised with `...`, then the
suffixes (device, size, dtype, grad_fn) wrapped the same way:
`tensor([[ 58.,  64.], [139., 154.]], grad_fn=<MmBackward0>)`."""
from __future__ import annotations

import math

import numpy as np

from ir import dtypes

_PRECISION = 4
_THRESHOLD = 1000  # more elements than this are summarised
_EDGE = 3  # elements kept at each end of a summarised dim
_LINEWIDTH = 80


class _Formatter:
    """How every element of one tensor prints (PyTorch's _Formatter)."""

    def __init__(self, values: np.ndarray):
        self.floating = values.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        flat = values.reshape(-1)
        if not self.floating:
            self.width = max((len(str(v)) for v in flat.tolist()), default=1)
            return
        flat = flat.astype(np.float64)
        nonzero = flat[np.isfinite(flat) & (flat != 0)]
        if nonzero.size == 0:
            return
        big, small = np.abs(nonzero).max(), np.abs(nonzero).min()
        self.int_mode = bool(np.all(nonzero == np.ceil(nonzero)))
        self.sci_mode = bool(big / small > 1000.0 or big > 1.0e8 or
                             (not self.int_mode and small < 1.0e-4))
        self.width = max(len(self._text(v)) for v in nonzero.tolist())

    def _text(self, v) -> str:
        if not self.floating:
            return str(v)
        if self.sci_mode:
            return f"{v:.{_PRECISION}e}"
        if self.int_mode:  # integer-valued floats keep a dot to show they are floats
            return f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        return f"{v:.{_PRECISION}f}"

    def format(self, v) -> str:
        return self._text(v).rjust(self.width)


def _summary(a: np.ndarray) -> np.ndarray:
    """The elements a summarised repr shows: _EDGE at each end of every dim."""
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * _EDGE:
        a = np.concatenate([a[:_EDGE], a[-_EDGE:]])
    return a if a.ndim == 1 else np.stack([_summary(row) for row in a])


def _vector(a: np.ndarray, indent: int, summarise: bool, fmt: _Formatter) -> str:
    per_line = max(1, (_LINEWIDTH - indent) // (fmt.width + 2))
    values = a.tolist()
    if summarise and len(values) > 2 * _EDGE:
        cells = [fmt.format(v) for v in values[:_EDGE]] + [" ..."] + \
                [fmt.format(v) for v in values[-_EDGE:]]
    else:
        cells = [fmt.format(v) for v in values]
    lines = [", ".join(cells[i:i + per_line]) for i in range(0, len(cells), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(a: np.ndarray, indent: int, summarise: bool, fmt: _Formatter) -> str:
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector(a, indent, summarise, fmt)
    rows = list(range(a.shape[0]))
    if summarise and a.shape[0] > 2 * _EDGE:
        rows = rows[:_EDGE] + [None] + rows[-_EDGE:]
    parts = ["..." if r is None else _nested(a[r], indent + 1, summarise, fmt) for r in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _body(a: np.ndarray, indent: int) -> str:
    summarise = a.size > _THRESHOLD
    return _nested(a, indent, summarise, _Formatter(_summary(a) if summarise else a))


def _add_suffixes(text: str, suffixes: list, indent: int) -> str:
    parts = [text]
    last_line = len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if last_line + len(suffix) + 2 > _LINEWIDTH:
            parts.append(",\n" + " " * indent + suffix)
            last_line = indent + len(suffix)
        else:
            parts.append(", " + suffix)
            last_line += len(suffix) + 2
    return "".join(parts) + ")"


def tensor_repr(t) -> str:
    prefix = "tensor("
    suffixes = []
    if t.device.type != "cpu":
        suffixes.append(f"device='{t.device}'")
    default = dtypes.get_default_dtype()
    if t.device.type == "meta" or t.numel() == 0:
        # no elements to show: the size (unless it is (0,)) and any non-default dtype say it
        if t.device.type == "meta" or t.dim() != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype is not default:
            suffixes.append(f"dtype={t.dtype!r}")
        body = "..." if t.device.type == "meta" else "[]"
    else:
        if t.dtype not in (default, dtypes.int64, dtypes.bool_):
            suffixes.append(f"dtype={t.dtype!r}")
        values = t.detach()._host_np()
        if t.dtype is dtypes.bfloat16:  # (ml_dtypes' kind is "V"); float32 holds it exactly
            values = values.astype(np.float32)
        body = _body(values, len(prefix))
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _add_suffixes(prefix + body, suffixes, len(prefix))
