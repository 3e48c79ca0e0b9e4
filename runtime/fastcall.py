"""Native functions that Python calls the way it calls its own builtins.

A ctypes call converts each argument and lets go of the GIL and takes it back: about
0.5 us for three objects, a sixth of a whole 64^3 GEMM. A native function with CPython's
METH_FASTCALL signature

    PyObject *fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)

wrapped as a builtin function object (PyCFunction_NewEx on a PyMethodDef) is called by
the interpreter directly, for about 30 ns. runtime/fastcall_ir.py's `Entry` builds such
functions in llvmlite IR for kernels on ndarrays: it reads each array's data pointer
from the object (at ARRAY_DATA_OFFSET, where numpy's C API keeps it) or an int's value,
and returns one of the arguments as a new reference. `builtin(address, name, words)`
wraps one; its `self`, an int64 ndarray,
holds what the code reads that differs between processes and so cannot be compiled in
(the kernel cache shares object code across processes): `words` (a thread pool's
address), after PyErr_SetString's address and TypeError's.

Such a function runs holding the GIL, with the arguments' types and layouts unchecked:
its caller guarantees them (compiler/gemm/plans.py does, by its request keys). Their number is
checked: a wrong one raises TypeError. `available()` says whether this interpreter
allows all this: CPython with a GIL, its object header and numpy's array layout as
probed. `launcher` makes one for a native backend kernel (compiler/backends/native/
launch.py). This module imports no llvmlite: a builtin whose code is on disk costs none.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import sysconfig

import numpy as np

METH_FASTCALL = 0x0080


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


def available() -> bool:
    """CPython with a GIL (a reference count is then a plain word at the object's
    start) and ndarrays laid out as probed."""
    return (sys.implementation.name == "cpython" and ARRAY_DATA_OFFSET != 0
            and not sysconfig.get_config_var("Py_GIL_DISABLED"))


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("function", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


_kept: list = []  # a builtin points at its PyMethodDef and name; the code never goes away
HIDDEN_WORDS = 2  # PyErr_SetString, TypeError: for the wrong-count error


@functools.cache
def _c_api() -> tuple:
    """(PyCFunction_NewEx as a ctypes function, PyErr_SetString's address), looked up
    only where available() (ctypes.pythonapi is CPython's)."""
    new_builtin = ctypes.pythonapi.PyCFunction_NewEx
    new_builtin.restype = ctypes.py_object
    new_builtin.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]
    return new_builtin, ctypes.cast(ctypes.pythonapi.PyErr_SetString, ctypes.c_void_p).value


def builtin(address: int, name: str, words=()):
    """The native METH_FASTCALL function at `address` (built with fastcall_ir.Entry) as a Python
    builtin called `name`, reading `words` (ints) through Entry.words."""
    if not available():
        raise RuntimeError("runtime.fastcall: this interpreter is not CPython with a GIL "
                           "and numpy's usual array layout")
    new_builtin, set_error = _c_api()
    encoded = name.encode()
    method = _MethodDef(encoded, address, METH_FASTCALL, None)
    _kept.append((method, encoded))
    self = np.array([set_error, id(TypeError), *words], np.int64)  # kept by the builtin
    return new_builtin(ctypes.addressof(method), self, None)


# an array's address -----------------------------------------------------------------
@functools.cache
def address_reader():
    """A builtin `kiln_address(a)`: ndarray a's data pointer as an int, ~60 ns where
    ctypes takes ~0.35 us (eager/tensor.py reads every new CPU tensor's address through it
    once a native kernel has loaded it); None where this interpreter does not allow it.
    Its argument must be an ndarray (unchecked)."""
    if not available():
        return None
    from runtime.jit import compiling_here, host_jit
    name = "kiln_address"
    with compiling_here():  # once per machine: the disk cache keeps it
        code = host_jit().load_spec(name, f"{name} fastcall", _build_address_reader,
                                    [name])[name]
    from_pointer = ctypes.cast(ctypes.pythonapi.PyLong_FromVoidPtr, ctypes.c_void_p).value
    return builtin(code, name, (from_pointer,))


def _build_address_reader(module) -> None:
    from runtime.fastcall_ir import build_address_reader
    build_address_reader(module)


# kernel launchers -------------------------------------------------------------------
_launchers: dict[int, int] = {}


def launcher(address: int, count: int, offsets: int, strides: int, rows: int, inner: int):
    """The fastcall_ir.KERNEL at `address` over every row and element as a builtin of `count` data
    pointers (ints): ~0.3 us less a call than ctypes with prepared arguments. The
    addresses of the offset tables and strides must outlive it. None where this
    interpreter does not allow it (available())."""
    if not available():
        return None
    code = _launchers.get(count)
    if code is None:
        from runtime.jit import compiling_here, host_jit
        name = f"kiln_launch_{count}"
        with compiling_here():  # once per count and machine: the disk cache keeps it
            code = host_jit().load_spec(name, f"{name} fastcall", _BuildLauncher(count),
                                        [name])[name]
        _launchers[count] = code
    as_pointer = ctypes.cast(ctypes.pythonapi.PyLong_AsVoidPtr, ctypes.c_void_p).value
    return builtin(code, "kiln_launch", (as_pointer, address, offsets, strides, rows, inner))


class _BuildLauncher:
    """load_spec's build of kiln_launch_<count> (fastcall_ir.build_launcher, imported
    only when it is built: a launcher on disk loads without llvmlite)."""

    def __init__(self, count: int):
        self.count = count

    def __call__(self, module) -> None:
        from runtime.fastcall_ir import build_launcher
        build_launcher(module, self.count)
