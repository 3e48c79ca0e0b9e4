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


_loaded: dict[str, int] = {}  # a builtin's function name -> its code's address


# an array's address -----------------------------------------------------------------
@functools.cache
def address_reader():
    """A builtin `kiln_address(a)`: ndarray a's data pointer as an int, ~60 ns where
    ctypes takes ~0.35 us (eager/tensor.py reads every new CPU tensor's address through it
    once a native kernel has loaded it); None where this interpreter does not allow it.
    Its argument must be an ndarray (unchecked)."""
    if not available():
        return None
    code = _code("kiln_address", _build_address_reader)
    from_pointer = ctypes.cast(ctypes.pythonapi.PyLong_FromVoidPtr, ctypes.c_void_p).value
    return builtin(code, "kiln_address", (from_pointer,))


def _build_address_reader(module) -> None:
    from runtime.fastcall_ir import build_address_reader
    build_address_reader(module)


# kernel launchers -------------------------------------------------------------------


def launcher(address: int, count: int, offsets: int, strides: int, rows: int, inner: int):
    """The fastcall_ir.KERNEL at `address` over every row and element as a builtin of `count` data
    pointers (ints): ~0.3 us less a call than ctypes with prepared arguments. The
    addresses of the offset tables and strides must outlive it. None where this
    interpreter does not allow it (available())."""
    if not available():
        return None
    code = _launcher_code(count, parallel=False)
    return builtin(code, "kiln_launch", (_as_pointer(), address, offsets, strides, rows,
                                         inner))


def parallel_launcher(count: int, table: int, job: int, items: int, run: int, cell: int,
                      threads: int):
    """A builtin of `count` data pointers (ints) that writes them into the pointer table
    at `table` and runs the runtime.pool run_items job at `job` (kiln_pool_items at
    `items`) on `threads` threads through kiln_pool_run at `run`, on the pool that the
    word at `cell` holds (see fastcall_ir.build_parallel_launcher): ~2 us of Python and
    ctypes less a call. It holds the GIL while the job runs; the pool must already have
    `threads` threads. None where this interpreter does not allow it."""
    if not available():
        return None
    code = _launcher_code(count, parallel=True)
    return builtin(code, "kiln_launch_parallel",
                   (_as_pointer(), table, job, items, run, cell, threads))


def _launcher_code(count: int, parallel: bool) -> int:
    name = f"kiln_launch_{'parallel_' if parallel else ''}{count}"
    return _code(name, _BuildLauncher(count, parallel))


def _code(name: str, build) -> int:
    """The address of native function `name`, which `build(module)` makes: compiled once
    per machine (the disk cache keeps it), loaded once per process."""
    code = _loaded.get(name)
    if code is None:
        from runtime.jit import compiling_here, host_jit
        with compiling_here():
            code = host_jit().load_spec(name, f"{name} fastcall", build, [name])[name]
        _loaded[name] = code
    return code


def _as_pointer() -> int:
    """PyLong_AsVoidPtr's address, the word launchers convert their ints with."""
    return ctypes.cast(ctypes.pythonapi.PyLong_AsVoidPtr, ctypes.c_void_p).value


class _BuildLauncher:
    """load_spec's build of kiln_launch_<count> or kiln_launch_parallel_<count>
    (fastcall_ir's build_launcher or build_parallel_launcher, imported only when it is
    built: a launcher on disk loads without llvmlite)."""

    def __init__(self, count: int, parallel: bool):
        self.count, self.parallel = count, parallel

    def __call__(self, module) -> None:
        from runtime.fastcall_ir import build_launcher, build_parallel_launcher
        (build_parallel_launcher if self.parallel else build_launcher)(module, self.count)
