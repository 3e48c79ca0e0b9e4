"""Native functions that Python calls the way it calls its own builtins.

A ctypes call converts each argument and lets go of the GIL and takes it back: about
0.5 us for three objects, a sixth of a whole 64^3 GEMM. A native function with CPython's
METH_FASTCALL signature

    PyObject *fn(PyObject *self, PyObject *const *args, Py_ssize_t nargs)

wrapped as a builtin function object (PyCFunction_NewEx on a PyMethodDef) is called by
the interpreter directly, for about 30 ns. `Entry` builds such functions in llvmlite IR
for kernels on ndarrays: it reads each array's data pointer from the object (at
ARRAY_DATA_OFFSET, where numpy's C API keeps it) and returns one of the arguments as a
new reference. `builtin(address, name, words)` wraps one; its `self`, an int64 ndarray,
holds what the code reads that differs between processes and so cannot be compiled in
(the kernel cache shares object code across processes): `words` (a thread pool's
address), after PyErr_SetString's address and TypeError's.

Such a function runs holding the GIL, with the arguments' types and layouts unchecked:
its caller guarantees them (compiler/gemm/plans.py does, by its request keys). Their number is
checked: a wrong one raises TypeError. `available()` says whether this interpreter
allows all this: CPython with a GIL, its object header and numpy's array layout as
probed.
"""
from __future__ import annotations

import ctypes
import functools
import sys
import sysconfig

import llvmlite.ir as ir
import numpy as np

from runtime.llvm_ir import I8, I8P, I64, VOID, at, define, i64

FASTCALL = ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64])
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
    """The native METH_FASTCALL function at `address` (built with an Entry) as a Python
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


class Entry:
    """A METH_FASTCALL function `name` being built (its code at `b`): `arrays(count)`
    gives the data pointers of its `count` ndarray arguments (after checking there are
    that many), `words(count)` the words given to `builtin`, `give(index)` returns
    argument `index`."""

    def __init__(self, module: ir.Module, name: str):
        self.module, self.name = module, name
        self.fn, self.b = define(module, name, FASTCALL)
        self.self_, self.args, self.count = self.fn.args

    def arrays(self, count: int) -> list:
        """The data pointers (i8*) of arguments 0 .. count-1; a call with another number
        of arguments raises TypeError here."""
        b = self.b
        wrong, right = (self.fn.append_basic_block(name) for name in ("wrong", "right"))
        b.cbranch(b.icmp_signed("!=", self.count, i64(count)), wrong, right)
        b.position_at_end(wrong)
        set_error, type_error = self._words(HIDDEN_WORDS)
        text = f"{self.name}() takes {count} arrays\0".encode()
        message = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(text)),
                                    f"{self.name}.message")
        message.global_constant, message.linkage = True, "internal"
        message.initializer = ir.Constant(message.type.pointee, bytearray(text))
        set_type = ir.FunctionType(VOID, [I8P, I8P])
        b.call(b.inttoptr(set_error, set_type.as_pointer()),
               [b.inttoptr(type_error, I8P), b.bitcast(message, I8P)])
        b.ret(ir.Constant(I8P, None))
        b.position_at_end(right)
        return [self._data(self._argument(index)) for index in range(count)]

    def words(self, count: int) -> list:
        """The first `count` words given to `builtin`, as i64."""
        return self._words(HIDDEN_WORDS + count)[HIDDEN_WORDS:]

    def _words(self, count: int) -> list:
        b = self.b
        base = b.bitcast(self._data(self.self_), I64.as_pointer())
        return [b.load(at(b, base, i)) for i in range(count)]

    def give(self, index: int) -> None:
        """Return argument `index`, its reference count incremented (a new reference)."""
        b = self.b
        obj = self._argument(index)
        count = b.bitcast(obj, I64.as_pointer())
        b.store(b.add(b.load(count), i64(1)), count)
        b.ret(obj)

    def _argument(self, index: int):
        return self.b.load(at(self.b, self.args, index))

    def _data(self, obj):
        b = self.b
        slot = at(b, obj, ARRAY_DATA_OFFSET)
        return b.load(b.bitcast(slot, I8P.as_pointer()), align=8)
