"""Interpreters of the decompositions written on the op records (ir/formula.py): EAGER
runs a formula in eager ops (CUDA's composed kernels and autograd's derivatives run it),
INLINED too but with a composite call (F.mean) written out as its own formula (what the
compiler's decompose pass captures: one graph, its counts one scalar each), NUMPY on
numpy arrays in the compute dtype (eager's CPU fallback kernels, which pass dims already
made non-negative by eager.shapes.reduce_dims, and cast the result themselves)."""
from __future__ import annotations

import numpy as np

from eager.shapes import reduce_dims
from eager.tensor import ops
from ir import dtypes
from ir.formula import Interpreter
from runtime.cpu.erf import erf


def _count(shape, dims, correction) -> int:
    n = 1
    for d in dims:
        n *= shape[d]
    return max(n - correction, 0)


class _Eager(Interpreter):
    """Formulas in eager ops: each call one dispatched op (so autograd records it, the
    Tracer captures it, a CUDA tensor runs it on the device)."""

    def sum(self, x, dims, keepdim=False):
        return ops.sum(x, dims, keepdim)

    def amax(self, x, dims, keepdim=False):
        return ops.amax(x, dims, keepdim)

    def mean(self, x, dims=None, keepdim=False):
        return ops.mean(x, dims, keepdim)

    def count(self, x, dims, correction=0) -> int:  # (a zero-dim x: one element)
        return _count(x._shape, reduce_dims(dims, x.dim()) if x.dim() else (), correction)

    def exp(self, x):
        return ops.exp(x)

    def log(self, x):
        return ops.log(x)

    def rsqrt(self, x):
        return ops.rsqrt(x)

    def sqrt(self, x):
        return ops.sqrt(x)

    def tanh(self, x):
        return ops.tanh(x)

    def erf(self, x):
        return ops.erf(x)

    def sigmoid(self, x):
        return ops.sigmoid(x)

    def abs(self, x):
        return ops.abs(x)

    def pow(self, x, exponent):
        return ops.pow(x, exponent)

    def amin(self, x, dims, keepdim=False):
        return ops.amin(x, dims, keepdim)

    def nonzero(self, x):
        return ops._to_copy(x != 0, dtype=x.dtype)

    def slice(self, x, dim, start, end):
        return ops.slice(x, dim, start, end)

    def mm(self, a, b):
        return ops.mm(a, b)

    def ndim(self, x) -> int:
        return x.dim()

    def reshape(self, x, shape):
        return ops.reshape(x, list(shape))

    def shape(self, x) -> tuple:
        return tuple(x.shape)

    def cast(self, x, dtype):
        return x if dtype is None or x.dtype is dtype else ops._to_copy(x, dtype=dtype)

    def stored(self, x, dtype):
        if dtype is None or x.dtype is dtype:
            return x
        return ops._to_copy(ops._to_copy(x, dtype=dtype), dtype=x.dtype)


class _Inlined(_Eager):
    mean = Interpreter.mean


def _axes(dims) -> tuple:
    return dims if dims.__class__ is tuple else (dims,) if isinstance(dims, int) else \
        tuple(dims)


def _rounded_from_float64(fn, x):
    """fn(x) of a float32 x computed in float64 and rounded back: numpy's float32 exp and
    tanh are a unit off the rounded value in 40% and a third of their results, where
    PyTorch's (Sleef's) and the generated kernels' (kiln's vmath) are rounded but at a
    few ties. gelu(approximate='tanh') turned those units into 16-bit ones where 1 + tanh
    cancels: 21/49 of 4096 bfloat16/float16 results apart from PyTorch's and from the
    generated kernels' (now 3/2, where PyTorch's tanh and the rounded one differ)."""
    if x.dtype == np.float32:
        return fn(x.astype(np.float64)).astype(np.float32)
    return fn(x)


class _Numpy(Interpreter):
    """Formulas on numpy arrays: dims are the non-negative ones the kernel reduces (a
    zero-dim array's are none), and the kernel gives the result its dtype. Reductions
    call the ufuncs' reduce, which np.sum and np.max wrap (the same values, ~1 us less
    a call)."""

    def sum(self, x, dims, keepdim=False):
        return np.add.reduce(x, axis=_axes(dims), keepdims=keepdim)

    def amax(self, x, dims, keepdim=False):
        return np.maximum.reduce(x, axis=_axes(dims), keepdims=keepdim)

    def count(self, x, dims, correction=0) -> int:
        return _count(x.shape, _axes(dims), correction)

    log = staticmethod(np.log)
    sqrt = staticmethod(np.sqrt)
    erf = staticmethod(erf)

    @staticmethod
    def exp(x):
        return _rounded_from_float64(np.exp, x)

    @staticmethod
    def tanh(x):
        return _rounded_from_float64(np.tanh, x)

    @staticmethod
    def rsqrt(x):
        return 1.0 / np.sqrt(x)

    @staticmethod
    def sigmoid(x):
        # e^x of x <= 0 only, so no overflow warning for large |x|
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e))

    abs, pow = staticmethod(np.abs), staticmethod(np.power)

    def amin(self, x, dims, keepdim=False):
        return np.minimum.reduce(x, axis=_axes(dims), keepdims=keepdim)

    @staticmethod
    def nonzero(x):
        return (x != 0).astype(x.dtype)

    @staticmethod
    def slice(x, dim, start, end):
        return x[(slice(None),) * dim + (slice(start, end),)]

    @staticmethod
    def mm(a, b):
        return np.matmul(a, b)

    @staticmethod
    def ndim(x) -> int:
        return x.ndim

    @staticmethod
    def reshape(x, shape):
        return x.reshape(shape)

    @staticmethod
    def shape(x) -> tuple:
        return x.shape

    @staticmethod
    def cast(x, dtype):
        return x

    @staticmethod
    def stored(x, dtype):
        return x if dtype is None else dtypes.cast(x, dtype).astype(x.dtype)


EAGER, INLINED, NUMPY = _Eager(), _Inlined(), _Numpy()


def numpy_function(formula):
    """A Pointwise record's numpy function `fn(*arrays, **attrs)` that runs `formula`."""
    def run(*arrays, **attrs):
        return formula(NUMPY, *arrays, **attrs)
    run.__name__ = run.__qualname__ = formula.__name__.lstrip("_")
    return run
