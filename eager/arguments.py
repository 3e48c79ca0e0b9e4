"""Checks of the arguments that are not tensors (sizes, dims, counts, dtypes, numbers),
shared by the factories and the shape ops. A value of the wrong type is a TypeError that
names the function, the argument and the value, as PyTorch's argument parser does.

numpy integers and one-element integer tensors count as ints, as in PyTorch; bools do not
(PyTorch refuses them too, except as the second or later of several sizes), nor do
floats, strings or None.
"""
from __future__ import annotations

import numbers
import operator
from typing import NoReturn

import numpy as np

from eager._missing import NotSupportedYet
from ir import dtypes
from ir.dtypes import DType

# PyTorch takes these Python types as dtypes
_PYTHON_DTYPES = {float: dtypes.float64, int: dtypes.int64, bool: dtypes.bool_}


def shown(value) -> str:
    """`value` as an error message names it: its type, then itself, shortened."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray) or _is_tensor(value):  # its shape, not its values
        return f"{type(value).__name__} of shape {list(value.shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _is_tensor(value) -> bool:
    """Whether `value` is a Tensor, known as the dispatcher knows one: by its dispatch key
    bits (eager/tensor.py imports this module, so this one cannot import it)."""
    return hasattr(value, "_keys")


def _as_int(value) -> int | None:
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def int_arg(fn: str, name: str, value) -> int:
    """`value` as a Python int (`fn` may be "" where the op is not known, as for a dim)."""
    if value.__class__ is int:
        return value
    as_int = _as_int(value)
    if as_int is None:
        raise TypeError(f"{fn + '(): ' if fn else ''}argument '{name}' must be int, not "
                        f"{shown(value)}")
    return as_int


def int_list(fn: str, name: str, values) -> tuple[int, ...]:
    """`values`, a tuple or list, as a tuple of Python ints."""
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"{fn}(): argument '{name}' must be a tuple of ints, not "
                        f"{shown(values)}")
    ints = tuple(v if v.__class__ is int else _as_int(v) for v in values)
    if None in ints:
        i = ints.index(None)
        raise TypeError(f"{fn}(): argument '{name}' must be a tuple of ints, but element {i} "
                        f"is {shown(values[i])}")
    return ints


def size_args(fn: str, args: tuple, name: str = "size") -> tuple[int, ...]:
    """Sizes given as varargs, `zeros(2, 3)`, or as one tuple or list, `zeros((2, 3))`."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = args[0]
    return int_list(fn, name, args)


def tensor_list(fn: str, tensors) -> list:
    """`tensors`, a tuple or list of Tensors, as a list."""
    if not isinstance(tensors, (tuple, list)):
        raise TypeError(f"{fn}(): argument 'tensors' must be a tuple of Tensors, not "
                        f"{shown(tensors)}")
    for i, t in enumerate(tensors):
        if not _is_tensor(t):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got "
                            f"{shown(t)}")
    return list(tensors)


def dtype_arg(fn: str, dtype) -> DType | None:
    """An eager dtype, None, or the Python type float, int or bool (float64, int64, bool).
    A dtype kiln names but has no kernels for (bfloat16, uint8, ...) is NotSupportedYet."""
    if dtype is None:
        return dtype
    if isinstance(dtype, DType):
        if not dtype.has_kernels:
            refuse_dtype(fn, dtype)
        return dtype
    if isinstance(dtype, type) and dtype in _PYTHON_DTYPES:
        return _PYTHON_DTYPES[dtype]
    raise TypeError(f"{fn}(): argument 'dtype' must be an eager dtype such as eager.float32, "
                    f"not {shown(dtype)}")


def array_dtype(fn: str, np_dtype) -> DType:
    """The dtype of a tensor made from a numpy array of `np_dtype`."""
    named_only = dtypes.named_only_of_numpy(np_dtype)
    if named_only is not None:
        refuse_dtype(fn, named_only)
    return dtypes.from_numpy(np_dtype)


def refuse_dtype(fn: str, dtype: DType) -> NoReturn:
    """Raise for a dtype kiln names but has no kernels for yet, naming it and the op."""
    raise NotSupportedYet(f"{fn}(): dtype torch.{dtype.name} is not supported by kiln yet "
                          f"(kiln names it, but has no kernels for it; kiln's dtypes are "
                          f"{', '.join(d.name for d in dtypes.ALL)})")


def number_arg(fn: str, name: str, value):
    """A bool, int or float (numpy's included)."""
    if isinstance(value, (numbers.Real, np.bool_)):
        return value
    raise TypeError(f"{fn}(): argument '{name}' must be a real number, not {shown(value)}")


def bool_arg(fn: str, name: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{fn}(): argument '{name}' must be bool, not {shown(value)}")
