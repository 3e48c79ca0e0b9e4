"""Helpers the kernel families share: type promotion over tensors, result construction,
and registration of a CPU kernel together with its Meta twin (shape arithmetic, as
broadcasting and dim normalisation, is in eager/shapes.py)."""
from __future__ import annotations

import functools
import os
import sys

import numpy as np

from eager.dispatcher import ATEN, DispatchKey
from eager.tensor import Tensor, from_array, meta_empty
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op


def promote(*tensors: Tensor) -> DType:
    """PyTorch's result type of tensors (wrapped numbers and zero-dim tensors count less)."""
    if len(tensors) == 2:
        a, b = tensors
        if a.dtype is b.dtype:
            return a.dtype
        # (dtype, tier) of each: 2 a wrapped number, 1 zero-dim, 0 with dims
        key = (a.dtype, 2 if a._wrapped else 0 if a._shape else 1,
               b.dtype, 2 if b._wrapped else 0 if b._shape else 1)
        dt = _PROMOTED.get(key)
        if dt is None:
            dt = _PROMOTED[key] = _promote(tensors)
        return dt
    return _promote(tensors)


_PROMOTED: dict = {}  # promote's answers for two tensors, by their dtypes and tiers


def _promote(tensors) -> DType:
    dim, zero, wrapped = [], [], []
    for t in tensors:
        (wrapped if t._wrapped else zero if not t._shape else dim).append(t.dtype)
    return dtypes.result_type(dim, zero, wrapped)


def type_word(dt: DType) -> str:
    """PyTorch's name for a dtype in error messages: Float, Long, Bool, ..."""
    return dtypes.TYPE_WORDS[dt.name]


def load_native(import_module):
    """`import_module()`: it imports one of the compiler's modules of eager kernels
    (generated row, pointwise and GEMM kernels) at their first use; False where numpy
    must serve: KILN_EAGER_NATIVE=0, or no llvmlite."""
    if os.environ.get("KILN_EAGER_NATIVE", "1") == "0":
        return False
    try:
        return import_module()
    except ImportError:  # no llvmlite: numpy serves
        return False


def can_cast(from_: DType, to: DType) -> bool:
    """torch.can_cast: whether an op may write a result of type `from_` into a tensor of
    type `to` (in place, out=): never floating to integral, nor other types to bool."""
    return from_.category <= to.category


def check_castable(result: DType, target: DType, op: str = "") -> None:
    """PyTorch's error where a result of type `result` may not be written into a tensor of
    type `target` (can_cast); `op` names the op first where given."""
    if not can_cast(result, target):
        raise RuntimeError(f"{op + '(): ' if op else ''}result type {type_word(result)} can't "
                           f"be cast to the desired output type {type_word(target)}")


def integral_only(kernel: str):
    """A pointwise record's check: PyTorch's `kernel` (bitwise_and_cpu) exists for
    integers and bools only."""
    def check(dt: DType, *tensors) -> None:
        if dt.is_floating_point:
            raise NotImplementedError(f"\"{kernel}\" not implemented for '{type_word(dt)}'")
    return check


def float_of(dt: DType) -> DType:
    """The type a float-valued op (exp, div, mean) computes in for inputs of type `dt`."""
    return dt if dt.is_floating_point else dtypes.get_default_dtype()


_FLOAT32 = np.dtype(np.float32)

try:  # numpy 2 keeps np.errstate's state in a context variable: set directly, it costs
    # ~0.25 us where `with np.errstate(all="ignore")` costs ~0.9
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
    _QUIET = _make_extobj(all="ignore")
    quiet_on, quiet_off = functools.partial(_extobj_contextvar.set, _QUIET), \
        _extobj_contextvar.reset
except ImportError:  # numpy 1.x
    def quiet_on():
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def quiet_off(state):
        state.__exit__(None, None, None)
quiet_on.__doc__ = """Turn numpy's floating-point warnings off (inf, nan and overflow are
results, not warnings): `token = quiet_on()`, then `quiet_off(token)` in a `finally`."""


def compute_np(dt: DType) -> np.dtype:
    """numpy type to compute in: the 16-bit floats compute in float32 and round once, as
    PyTorch's CPU kernels do."""
    return _FLOAT32 if dt in dtypes.HALF else dt.np


def computed(t: Tensor) -> Tensor:
    """t in the type its op computes in (compute_np's, for composites written in eager
    ops): a 16-bit float as float32, whose result the caller rounds back once."""
    return t.float() if t.dtype in dtypes.HALF else t


def rounded_once(composite):
    """`composite`, written in eager ops, computed as PyTorch's one kernel for it computes:
    where its floating tensor arguments are all of one 16-bit type, in float32 (computed)
    with the result rounded back to that type once, not after each op (so its gradient
    too is computed in float32 and rounded once). Mixed types it leaves as they are."""
    @functools.wraps(composite)
    def run(*args, **kwargs):
        floats = {v.dtype for v in (*args, *kwargs.values())
                  if isinstance(v, Tensor) and v.dtype.is_floating_point}
        if len(floats) != 1 or next(iter(floats)) not in dtypes.HALF:
            return composite(*args, **kwargs)
        dt = floats.pop()
        wide = lambda v: computed(v) if isinstance(v, Tensor) else v  # noqa: E731
        out = composite(*map(wide, args), **{k: wide(v) for k, v in kwargs.items()})
        return out.to(dt)
    return run


def stored_in(op: Op, dim: int, ndim: int, dt, device: str = "cpu"):
    """The 16-bit type `op` (log_softmax of a result of type dt over `dim` of `ndim`)
    keeps its row values in on the CPU, its formula's `stored`, or None."""
    if op is Op.LOG_SOFTMAX and dt in dtypes.HALF and device == "cpu" and \
            dim % max(ndim, 1) == max(ndim, 1) - 1:
        return dt
    return None


def operand(t: Tensor, np_dtype) -> np.ndarray:
    a = t._np()
    # `is` first: numpy's dtypes of one type are one object, and `==` costs more
    if a.dtype is np_dtype or a.dtype == np_dtype:
        return a
    return dtypes.cast(a, dtypes.from_numpy(np_dtype))


def result(a, dt: DType) -> Tensor:
    """A new CPU tensor holding numpy result `a` (a scalar or array) as type `dt`
    (converted as PyTorch converts: dtypes.cast; float32 -> float16 overflows to inf)."""
    if type(a) is not np.ndarray:
        a = np.asarray(a)
    if a.dtype is not dt.np and a.dtype != dt.np:
        a = dtypes.cast(a, dt)
    return from_array(a)


def register(op: Op, cpu, meta=None) -> None:
    """Register a CPU kernel and, where given, its Meta twin for `op`."""
    caller = sys._getframe(1)
    where = caller.f_code.co_filename, caller.f_lineno
    ATEN[op].register(DispatchKey.CPU, cpu, where)
    if meta is not None:
        ATEN[op].register(DispatchKey.Meta, meta, where)


def meta_from_rule(rule):
    """A Meta kernel from a rule `(*args, **kwargs) -> (shape, dtype)`, or a tuple of them
    for ops with several outputs."""
    def meta(*args, **kwargs):
        out = rule(*args, **kwargs)
        if isinstance(out[1], DType):
            return meta_empty(*out)
        return tuple(meta_empty(s, d) for s, d in out)
    meta.__name__ = rule.__name__ + "_meta"
    meta.__qualname__ = meta.__name__
    return meta


def scalar_value(v):
    """A Scalar argument as a Python number (a one-element tensor is accepted too)."""
    if isinstance(v, Tensor):
        return v.item()
    return v


def add_at(out: np.ndarray, key: tuple, values) -> None:
    """np.add.at(out, key, values) for a C-contiguous `out` and a key of integer arrays
    (broadcast together, each in its dim's range, negative ones counting from the end):
    through flat indices, numpy's fast one-dimensional path (an embedding gradient's
    512x64 rows: 677 -> 123 us), adding each element's values in the same order, so the
    same bits. Without broadcast_arrays, which cost most of a small scatter_add (nll_loss's
    backward, 128 x 10: 14 -> 11 us)."""
    if not out.flags.c_contiguous:
        np.add.at(out, key, values)
        return
    flat = np.ravel_multi_index(key, out.shape, mode="wrap")  # (it broadcasts the key)
    values = np.asarray(values)
    if values.shape != flat.shape:  # (np.broadcast_to alone costs ~3 us)
        values = np.broadcast_to(values, flat.shape)
    np.add.at(out.reshape(-1), flat.reshape(-1), values.reshape(-1))



def floating_only_check(kernel: str):
    """A pointwise record's check: PyTorch's `kernel` (hypot_cpu) exists for floats only
    (of the promoted type: hypot of an integer and a float tensor is a float's)."""
    def check(dt: DType, *tensors) -> None:
        if not dt.is_floating_point:
            raise NotImplementedError(f"\"{kernel}\" not implemented for '{type_word(dt)}'")
    return check
