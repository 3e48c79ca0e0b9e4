"""Tensor factories: tensor, zeros, ones, full, empty, arange, linspace, rand, randn,
the *_like variants, from_numpy, and the seeded random generator."""
from __future__ import annotations

import numbers

import numpy as np

from eager.device import as_device
from eager.kernels._common import meta_empty
from eager.tensor import Tensor, from_array, share_array
from ir import dtypes

_rng = np.random.default_rng()

# Graph capture watches tensor creation: `hook(tensor, random)` (see compiler/capture.py).
_creation_hook = None


def set_creation_hook(hook) -> None:
    global _creation_hook
    _creation_hook = hook


def manual_seed(seed: int):
    global _rng
    _rng = np.random.default_rng(int(seed))
    return _rng


def _shape(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    shape = tuple(int(s) for s in size)
    if any(s < 0 for s in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: "
                           f"{list(shape)}")
    return shape


def _place(a: np.ndarray, dtype, device, requires_grad: bool, random: bool = False) -> Tensor:
    """A fresh tensor from host array `a`, on `device`."""
    dt = dtype or dtypes.from_numpy(a.dtype)
    dev = as_device(device)
    if dev.type == "cpu":
        t = from_array(a.astype(dt.np, copy=False))
    elif dev.type == "meta":
        t = meta_empty(a.shape, dt)
    else:
        from eager.backends import backend_for
        t = backend_for(dev).from_host(a.astype(dt.np, copy=False), dev)
    if requires_grad:
        t.requires_grad_(True)
    if _creation_hook is not None:
        _creation_hook(t, random)
    return t


def _infer_dtype(data):
    """The dtype PyTorch gives a nested Python list: bool < int64 < default float."""
    kinds = set()
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, Tensor):
            kinds.add(x.dtype)
        else:
            kinds.add(dtypes.scalar_dtype(x))
    if not kinds:
        return dtypes.get_default_dtype()
    return dtypes.result_type(kinds)


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor copying `data` (numbers, nested lists, numpy arrays or tensors)."""
    if isinstance(data, Tensor):
        a = data.detach()._host_np().copy()
        dt = dtype or data.dtype
    elif isinstance(data, np.ndarray):
        a = data.copy()
        dt = dtype or dtypes.from_numpy(a.dtype)
    else:
        dt = dtype or _infer_dtype(data)
        _check_ragged(data)
        a = np.array(_to_numbers(data), dtype=dt.np)
    return _place(a, dt, device, requires_grad)


def _to_numbers(data):
    if isinstance(data, (list, tuple)):
        return [_to_numbers(x) for x in data]
    if isinstance(data, Tensor):
        return data.tolist()
    if not isinstance(data, (numbers.Number, np.generic)):
        raise TypeError(f"Could not infer dtype of {type(data).__name__}")
    return data


def _check_ragged(data, depth=0):
    """PyTorch's errors for nested lists that do not form a rectangular array."""
    if not isinstance(data, (list, tuple)) or not data:
        return
    first = data[0]
    for x in data:
        if isinstance(x, (list, tuple)) != isinstance(first, (list, tuple)):
            raise TypeError(f"expected a sequence at dim {depth + 1} for every element or for "
                            f"none, got both {type(first).__name__} and {type(x).__name__}")
        if isinstance(x, (list, tuple)) and len(x) != len(first):
            raise ValueError(f"expected sequence of length {len(first)} at dim {depth + 1} "
                             f"(got {len(x)})")
    for x in data:
        _check_ragged(x, depth + 1)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing memory with numpy array `a`."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(a).__name__})")
    return share_array(a)


def _filled(size, value, dtype, device, requires_grad):
    shape = _shape(size)
    dt = dtype or dtypes.get_default_dtype()
    if as_device(device).type == "meta":
        t = meta_empty(shape, dt)
        return t.requires_grad_(True) if requires_grad else t
    return _place(np.full(shape, value, dtype=dt.np), dt, device, requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(size, 0, dtype, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(size, 1, dtype, device, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(size, 0, dtype, device, requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if dtype is None:
        dtype = dtypes.scalar_dtype(fill_value)
    return _filled((tuple(size),) if not isinstance(size, int) else (size,), fill_value, dtype,
                   device, requires_grad)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype is None:
        dtype = dtypes.result_type(wrapped_dtypes=[dtypes.scalar_dtype(v)
                                                   for v in (start, end, step)])
    n = max(int(np.ceil((end - start) / step)), 0)
    a = (start + step * np.arange(n, dtype=np.float64)) if dtype.is_floating_point else \
        np.arange(start, end, step, dtype=np.int64)
    return _place(np.asarray(a), dtype, device, requires_grad)


def linspace(start, end, steps: int, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = dtype or dtypes.get_default_dtype()
    return _place(np.linspace(start, end, steps), dt, device, requires_grad)


def rand(*size, dtype=None, device=None, requires_grad=False, generator=None) -> Tensor:
    dt = dtype or dtypes.get_default_dtype()
    return _place((generator or _rng).random(_shape(size)), dt, device, requires_grad,
                  random=True)


def randn(*size, dtype=None, device=None, requires_grad=False, generator=None) -> Tensor:
    dt = dtype or dtypes.get_default_dtype()
    return _place((generator or _rng).standard_normal(_shape(size)), dt, device, requires_grad,
                  random=True)


def randint(low, high=None, size=(), *, dtype=None, device=None, generator=None) -> Tensor:
    if high is None:
        low, high = 0, low
    a = (generator or _rng).integers(low, high, size=_shape((size,)))
    return _place(a, dtype or dtypes.int64, device, False, random=True)


def randperm(n: int, *, dtype=None, device=None, generator=None) -> Tensor:
    return _place((generator or _rng).permutation(n), dtype or dtypes.int64, device, False,
                  random=True)


def _like(fn):
    def like(t: Tensor, *, dtype=None, device=None, requires_grad=False) -> Tensor:
        return fn(t.shape, dtype=dtype or t.dtype, device=device or t.device,
                  requires_grad=requires_grad)
    like.__name__ = fn.__name__ + "_like"
    return like


zeros_like = _like(zeros)
ones_like = _like(ones)
empty_like = _like(empty)
rand_like = _like(rand)
randn_like = _like(randn)


def full_like(t: Tensor, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=device or t.device,
                requires_grad=requires_grad)
