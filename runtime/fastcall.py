"""Native functions that Python calls the way it calls its own builtins.

A ctypes call converts each argument and lets go of the GIL and takes it back: about
0.5 us for three objects, a sixth of a whole 64^3 GEMM. A native function with CPython's
METH_FASTCALL signature

    PyObject *fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)

wrapped as a builtin function object (PyCFunction_NewEx on a PyMethodDef) is called by
the interpreter directly, for about 30 ns. runtime/fastcall_ir.py's `Entry` builds such
functions in llvmlite IR for kernels on ndarrays: it reads each array's data pointer
from the object (at runtime/addresses.py's ARRAY_DATA_OFFSET, where numpy's C API keeps
it) or an int's value,
and returns one of the arguments as a new reference. `builtin(address, name, words)`
wraps one; its `self`, an int64 ndarray,
holds what the code reads that differs between processes and so cannot be compiled in
(the kernel cache shares object code across processes): `words` (a thread pool's
address), after PyErr_SetString's address and TypeError's.

Such a function runs holding the GIL, with the arguments' types and layouts unchecked:
its caller guarantees them (runtime/cpu/gemm/plans.py does, by its request keys). Their number is
checked: a wrong one raises TypeError. `available()` says whether this interpreter
allows all this: CPython with a GIL, its object header and numpy's array layout as
probed. runtime/launchers.py makes the ones kernels are launched through. This module
imports no llvmlite: a builtin whose code is on disk costs none.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import sysconfig

import numpy as np

from runtime.addresses import ARRAY_DATA_OFFSET, calloc_forever

METH_FASTCALL = 0x0080


def available() -> bool:
    """CPython with a GIL (a reference count is then a plain word at the object's
    start) and ndarrays laid out as probed."""
    return (sys.implementation.name == "cpython" and ARRAY_DATA_OFFSET != 0
            and not sysconfig.get_config_var("Py_GIL_DISABLED"))


class _MethodDef(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("function", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


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
    self = np.array([set_error, id(TypeError), *words], np.int64)  # kept by the builtin
    return new_builtin(_immortal_method(name, address), self, None)


def _immortal_method(name: str, address: int) -> int:
    """The address of a PyMethodDef for `name` and `address`, in memory never freed: a
    builtin reads its PyMethodDef for as long as it lives, the garbage collector's last
    pass at exit included (one kept by a Python object was freed first there, and that
    pass read freed memory: 1 in ~10 exits of a 2-rank MPI run crashed)."""
    encoded = name.encode()
    memory = calloc_forever(ctypes.sizeof(_MethodDef) + len(encoded) + 1)
    ctypes.memmove(memory + ctypes.sizeof(_MethodDef), encoded, len(encoded))
    method = _MethodDef.from_address(memory)
    method.function, method.flags = address, METH_FASTCALL
    ctypes.c_void_p.from_address(memory).value = memory + ctypes.sizeof(_MethodDef)  # name
    return memory
