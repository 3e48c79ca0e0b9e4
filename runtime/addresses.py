"""Where an ndarray's data starts, read as cheaply as this process allows (tensors' data
pointers, kernels' arguments); and memory that is never freed, for what native code
reads while the interpreter exits."""
from __future__ import annotations

import ctypes
import functools

import numpy as np

_addressof, _char_at = ctypes.addressof, ctypes.c_char.from_buffer


def _array_data_offset() -> int:
    """Where an ndarray object keeps its data pointer: right after the object header
    (numpy's PyArrayObject_fields, whose layout compiled extensions rely on), checked
    here on a live array; 0 if not found there."""
    offset = object.__basicsize__
    probe = np.arange(3.0)[1:]
    found = ctypes.c_void_p.from_address(id(probe) + offset).value
    return offset if found == probe.__array_interface__["data"][0] else 0


ARRAY_DATA_OFFSET = _array_data_offset()


def address(x: np.ndarray) -> int:
    """x's data pointer: read from the object where ARRAY_DATA_OFFSET says (a third of
    the ~1 us that `x.ctypes.data` or `__array_interface__` cost), else through numpy."""
    if ARRAY_DATA_OFFSET:
        return ctypes.c_void_p.from_address(id(x) + ARRAY_DATA_OFFSET).value or 0
    return x.__array_interface__["data"][0]


def array_address(a: np.ndarray) -> int:
    """Where ndarray a's data starts."""
    if _native_address is not None and type(a) is np.ndarray:
        return _native_address(a)
    try:  # three times faster than numpy's ctypes bridge
        return _addressof(_char_at(a))
    except (TypeError, ValueError):  # read-only or empty memory
        return a.ctypes.data


_native_address = None  # runtime.fastcall.address_reader() once a native kernel loaded it


def read_addresses_with(reader) -> None:
    """Read ndarrays' addresses through `reader` (runtime.fastcall's ~60 ns builtin, set
    once a native launcher is made: until then no native code is loaded) instead of
    ctypes (~0.35 us, a tenth of a small compiled call)."""
    global _native_address
    _native_address = reader


@functools.cache
def _calloc():
    calloc = ctypes.CDLL(None).calloc
    calloc.restype, calloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_size_t]
    return calloc


def calloc_forever(nbytes: int) -> int:
    """The address of `nbytes` zeroed bytes that are never freed: what native code may
    read for as long as the process lives, after the Python objects that could have
    owned it are gone (at exit the garbage collector still reads builtins' PyMethodDefs,
    and a thread pool's workers still wait on its words)."""
    memory = _calloc()(nbytes, 1)
    if not memory:
        raise MemoryError(f"calloc of {nbytes} bytes failed")
    return memory
