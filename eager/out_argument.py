"""PyTorch's `out=` keyword on every dispatched op (`torch.add(x, y, out=z)`).

The op runs as without it; its result is then written into `out` (converted to out's
dtype where PyTorch allows the cast, out resized where its shape differs, with PyTorch's
warning when it held elements), and `out` is returned. An op with several results
(`max(x, 0, out=(values, indices))`) takes a tuple. As in PyTorch, out= does not record
autograd: a call where an argument requires grad, in grad mode, is an error.

The dispatcher sends a call here when its keyword arguments name `out` and the op's
schema has no argument of that name (eager/dispatcher.py: set_out_writer)."""
from __future__ import annotations

import functools
import os
import sys
import warnings

from eager import dispatcher, factories
from eager.kernels._common import check_castable
from eager.tensor import Tensor, ops


def call_with_out(handle, args: tuple, kwargs: dict):
    """`handle`'s call with `out=` in `kwargs`: out, the result written into it."""
    kwargs = dict(kwargs)
    out = kwargs.pop("out")
    return into(out, handle.schema.name, handle.entry, args, kwargs)


def takes_out(fn):
    """out= on a module-level function that is not one dispatched op (eager.max)."""
    @functools.wraps(fn)
    def with_out(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        return into(out, fn.__name__, fn, args, kwargs)
    return with_out


def into(out, name: str, fn, args: tuple, kwargs: dict):
    """fn(*args, **kwargs) written into `out` (a tensor, or a tuple of them for several
    results); out returned."""
    if out is None:
        return fn(*args, **kwargs)
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise TypeError(f"{name}(): argument 'out' must be Tensor or a tuple of Tensors, "
                        f"not {_type_name(out)}")
    if dispatcher.tls.grad_enabled and any(
            t.requires_grad for t in (*outs, *_tensors(args), *_tensors(kwargs.values()))):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires "
                           "grad.")
    result = fn(*args, **kwargs)
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if len(results) != len(outs):
        raise TypeError(f"{name}(): argument 'out' must be {len(results)} Tensor"
                        f"{'s' if len(results) > 1 else ''}, got {len(outs)}")
    for target, value in zip(outs, results):
        _write(name, target, value)
    if not isinstance(result, (tuple, list)):
        return outs[0]
    return type(result)(*outs) if hasattr(result, "_fields") else outs  # max's (values, indices)


def _write(name: str, target: Tensor, value: Tensor) -> None:
    if target.device != value.device:
        raise RuntimeError(f"{name}(): Expected out tensor to have device {value.device}, "
                           f"but got {target.device} instead")
    check_castable(value.dtype, target.dtype, name)
    if target._shape != value._shape:
        if target.numel():
            warnings.warn(f"An output with one or more elements was resized since it had "
                          f"shape {list(target._shape)}, which does not match the required "
                          f"output shape {list(value._shape)}. This behavior is deprecated, "
                          "and in a future PyTorch release outputs will not be resized unless "
                          "they have zero elements.", UserWarning, stacklevel=_outside_eager())
        _take_fresh_memory(target, value._shape)
    ops.copy_(target, value)


def _take_fresh_memory(target: Tensor, shape) -> None:
    """Give `target` new contiguous memory of `shape` (what PyTorch's resize_ leaves an
    out= tensor; views made of `target` before keep its old memory)."""
    fresh = factories.empty(shape, dtype=target.dtype, device=target.device)
    target._storage, target._shape, target._stride = fresh._storage, fresh._shape, \
        fresh._stride
    target._offset = 0
    target._base = None
    target._np_cache = None


def _outside_eager() -> int:
    """The warnings stack level of the innermost frame outside the eager package (the
    caller of `_write`'s caller is level 2)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_EAGER):
        frame, level = frame.f_back, level + 1
    return level


_EAGER = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _tensors(values):
    for v in values:
        if isinstance(v, Tensor):
            yield v
        elif isinstance(v, (tuple, list)):
            yield from (t for t in v if isinstance(t, Tensor))


def _type_name(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of " + ", ".join(type(v).__name__ for v in value)
    return type(value).__name__


dispatcher.set_out_writer(call_with_out)
