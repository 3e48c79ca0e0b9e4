"""The CPU and Meta kernels of pointwise ops, made from their records (eager/records.py):
an op's record gives its numpy function and dtype rule, and `register_pointwise` makes
the rule (broadcast shape, result dtype, the op's own checks) and the kernel (numpy in
the compute type, float16 computing in float32 and rounded once). In-place variants
compute as their out-of-place twin and write `self`. The records themselves are in
unary.py and binary.py."""
from __future__ import annotations

import os
from math import prod

import numpy as np

from eager.dispatcher import ATEN, DispatchKey
from eager.kernels._common import (compute_np, float_of, meta_from_rule, operand, promote,
                                   quiet_off, quiet_on, register, result, scalar_value,
                                   type_word)
from eager.records import OpRecord
from eager.shapes import broadcast_shapes
from eager.tensor import Tensor, from_array
from ir import dtypes
from ir.ops import Op


def floating_only(t: Tensor, kernel_name: str) -> None:
    """PyTorch has no integer kernel for activations such as silu and gelu."""
    if not t.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel_name}\" not implemented for "
                                  f"'{type_word(t.dtype)}'")


def _promoted(tensors):
    return tensors[0].dtype if len(tensors) == 1 else promote(*tensors)


def _tensor_count(record: OpRecord) -> int:
    """A pointwise schema lists its tensors first (self, other; condition, self, other),
    then its scalars."""
    return sum(a.type.base == "Tensor" for a in record.op.schema.arguments)


def _split_arguments(record: OpRecord):
    """A function (args, kwargs) -> (tensors, attributes)."""
    count = _tensor_count(record)
    names = [a.name for a in record.op.schema.arguments[count:]]

    def split(args, attrs):
        if len(args) > count:
            attrs = {**dict(zip(names, args[count:])), **attrs}
        return args[:count], attrs
    return split


def _shape_and_dtype(record: OpRecord):
    """(tensors, attributes) -> (result shape, result dtype), raising for bad input."""
    p = record.pointwise
    dtype_of, check, float_only = p.dtype, p.check, p.float_only
    to_float, to_bool = p.rule in ("float", "divide"), p.rule in ("compare", "logical")

    def shape_and_dtype(tensors, attrs):
        if dtype_of is not None:
            dt = dtype_of(*tensors, **attrs)
        elif to_bool:
            dt = dtypes.bool_
        else:
            first = tensors[0]
            if len(tensors) == 1 or (len(tensors) == 2 and first.dtype is tensors[1].dtype):
                dt = first.dtype
            else:
                dt = promote(*tensors)
            if to_float:
                dt = float_of(dt)
        if check is not None:
            if attrs:
                check(dt, *tensors, **attrs)
            else:
                check(dt, *tensors)
        if float_only:  # the op's input: its last tensor (gelu_backward's self)
            floating_only(tensors[-1], float_only)
        shape = tensors[0]._shape
        for t in tensors:  # equal shapes, and zero-dim tensors, which take any shape
            s = t._shape
            if s != shape:
                if not shape:
                    shape = s
                elif s:
                    return broadcast_shapes(*(t._shape for t in tensors)), dt
        return shape, dt
    return shape_and_dtype


def _pointwise_rule(record: OpRecord, split, shape_and_dtype):
    def rule(*args, **attrs):
        return shape_and_dtype(*split(args, attrs))
    rule.__name__ = record.op.schema.name
    return rule


NATIVE_ELEMENTS = 1024
"""From this many elements in an operand, float32 and float64 pointwise ops whose record
has an emitter and whose numpy function is composed of several numpy calls (gelu,
gelu_backward, sigmoid, silu, relu, erf, pow, where, ...) run as the compiler's generated
kernels (compiler/backends/native/eager_pointwise.py, loaded at the first such call; set
KILN_EAGER_NATIVE=0 to keep numpy). Ops numpy runs as one ufunc have their own sizes,
ONE_UFUNC_ELEMENTS. Measured on one thread, numpy / native in us, float32, a layout seen
before: gelu at 1024 elements 81 / 5.8, at 256K 12186 / 137; sigmoid at 1024 8.0 / 4.7;
relu at 1024 4.6 / 4.3, at 256K 998 / 26. Below 1024 a layout's first sight (a plan,
~25 us) costs more than numpy's cheaper composed ops."""
ONE_UFUNC_ELEMENTS = {  # op: (from this many elements in an operand, only on threads)
    Op.ADD: (1 << 16, True), Op.SUB: (1 << 16, True), Op.MUL: (1 << 16, True),
    Op.DIV: (1 << 16, True), Op.MAXIMUM: (1 << 16, True), Op.MINIMUM: (1 << 16, True),
    Op.LOG: (1 << 16, True), Op.NEG: (1 << 17, True), Op.ABS: (1 << 17, True),
    Op.EXP: (1 << 14, False), Op.SQRT: (1 << 14, False),
}
"""Ops numpy runs as one ufunc, run as generated kernels from this many elements in an
operand, most only where the kernel runs on more than one thread (KILN_NUM_THREADS or the
cores, and runtime.pool; a kernel goes on threads from launch.PARALLEL_ELEMENTS, 64K, on):
on one thread numpy's loop is at memory bandwidth or faster. exp and sqrt win alone too.
tanh stays with numpy: vmath's float32 tanh is slower even on two threads. add and sub
with an alpha other than 1 do too: the kernel would fuse other * alpha + self into one
FMA, where numpy (and the fused optimiser steps, bit for bit with eager's per-tensor
ones) rounds the product first. Measured
numpy / native in us, best of 25 alternating runs, a layout seen before, on two cores
shared with other jobs (two-thread figures from a run while the other core was free):

                      float32                          float64
    op       threads  64K      256K     1M             64K      256K     1M
    add      1        7.9/8.8  32/33    102/108        17/18    54/55    282/291
    add      2        7.5/5.7  33/18    102/60         16/8.9   56/34    270/177
    mul      2        7.6/5.8  33/17    106/64         19/12    59/34    285/189
    x * 0.5  2        6.8/6.4  24/14    78/51          12/7.5   44/24    149/107
    div      1        8.5/9.3  33/34    104/108        20/17    66/56    291/308
    div      2        8.3/5.7  34/18    104/63         20/9.3   72/35    297/179
    maximum  2        7.2/5.8  31/18    105/70         16/9.9   54/56    312/192
    neg      2        4.7/4.8  22/12    69/48          11/6.7   43/23    141/85
    abs      2        5.4/5.0  21/12    75/52          11/6.8   43/23    150/95
    log      1        17/18    64/62    253/242        33/39    130/147  527/585
    log      2        17/11    62/32    242/128        33/21    131/75   551/316
    tanh     1        13/29    43/106   169/421        49/74    192/287  805/1165
    tanh     2        13/16    45/55    162/216        49/38    189/144  811/607
    exp      1        23/15    85/51    336/195        36/36    138/133  590/529
    exp      2        22/9.2   84/27    332/107        34/20    136/68   569/275
    sqrt     1        20/7.9   74/23    288/80         60/18    234/65   948/252

sub and minimum measured as add and maximum; on one thread the ops not listed lose as add
does (1.0-1.27x numpy). neg and abs at 128K on two threads: 11/6.3 and 11/7.0 (float32).
On one thread at 16K exp is 7.2/6.0 (float32; float64 even up to 256K) and sqrt 6.6/4.3
and 17/6.8; at 4K numpy is as fast or faster."""
_NATIVE_DTYPES = frozenset({dtypes.float32, dtypes.float64})
_native_pointwise = None  # that module once loaded, False where it cannot be


def _native(record: OpRecord, tensors, attrs: dict, shape, dt, threads_only: bool):
    """The op from a generated kernel, or None: numpy runs it."""
    global _native_pointwise
    if _native_pointwise is None:
        _native_pointwise = False
        if os.environ.get("KILN_EAGER_NATIVE", "1") == "0":
            return None
        try:
            from compiler.backends.native import eager_pointwise
        except ImportError:  # no llvmlite: numpy serves
            return None
        _native_pointwise = eager_pointwise
    if _native_pointwise is False or (threads_only and not _native_pointwise.threaded()):
        return None
    scaled = record.pointwise.scaled
    if scaled and attrs and scalar_value(attrs.get(scaled, 1)) != 1:
        return None  # numpy rounds other * alpha before adding; the kernel makes one FMA
    return _native_pointwise.run(record, tensors, attrs, shape, dt)


def _native_elements(record: OpRecord):
    """(from how many elements in an operand the op is offered to the generated kernels,
    or None, and whether only where they run on threads)."""
    p = record.pointwise
    if p.emit is None or p.rule in ("compare", "logical"):
        return None, False
    if isinstance(p.numpy, np.ufunc):
        return ONE_UFUNC_ELEMENTS.get(record.op, (None, False))
    return NATIVE_ELEMENTS, False


def _pointwise_kernel(record: OpRecord, split, shape_and_dtype):
    numpy, compare = record.pointwise.numpy, record.pointwise.rule == "compare"
    quiet, scaled = record.pointwise.quiet, record.pointwise.scaled
    count = _tensor_count(record)
    least, threads_only = _native_elements(record)
    native = least is not None
    half, half_computes_in = dtypes.float16, compute_np(dtypes.float16)

    def kernel(*args, **attrs):
        if attrs or len(args) != count:
            args, attrs = split(args, attrs)
        shape, dt = shape_and_dtype(args, attrs)
        if compare:
            ct = compute_np(_promoted(args))
        else:  # compute_np(dt), inlined
            ct = half_computes_in if dt is half else dt.np
        if count == 2:  # spelled out for the common cases: operand() inlined
            a, b = args[0]._np(), args[1]._np()
            if native and (a.size >= least or b.size >= least) and dt in _NATIVE_DTYPES:
                out = _native(record, args, attrs, shape, dt, threads_only)
                if out is not None:
                    return out
            arrays = (a if a.dtype is ct else operand(args[0], ct),
                      b if b.dtype is ct else operand(args[1], ct))
        elif count == 1:
            a = args[0]._np()
            if native and a.size >= least and dt in _NATIVE_DTYPES:
                out = _native(record, args, attrs, shape, dt, threads_only)
                if out is not None:
                    return out
            arrays = a if a.dtype is ct else operand(args[0], ct),
        else:
            if native and dt in _NATIVE_DTYPES and prod(shape) >= least:
                out = _native(record, args, attrs, shape, dt, threads_only)
                if out is not None:
                    return out
            arrays = [operand(t, ct) for t in args]
        if attrs:
            attrs = {k: scalar_value(v) for k, v in attrs.items()}
            if scaled and attrs.get(scaled, 1) != 1:
                arrays = *arrays[:-1], arrays[-1] * attrs.pop(scaled)
            else:
                attrs.pop(scaled, None)
        if quiet:
            out = numpy(*arrays, **attrs) if attrs else numpy(*arrays)
        else:  # inf, nan and overflow are results, not warnings
            token = quiet_on()
            try:
                out = numpy(*arrays, **attrs)
            finally:
                quiet_off(token)
        # result(out, dt), its common case first
        return from_array(out) if type(out) is np.ndarray and out.dtype is dt.np else \
            result(out, dt)
    kernel.__name__ = record.op.schema.name + "_cpu"
    return kernel


def register_pointwise(record: OpRecord) -> None:
    """The CPU and Meta kernels of a pointwise record."""
    split, shape_and_dtype = _split_arguments(record), _shape_and_dtype(record)
    register(record.op, _pointwise_kernel(record, split, shape_and_dtype),
             meta_from_rule(_pointwise_rule(record, split, shape_and_dtype)))


# in place: compute as the out-of-place op, check the result fits `self`, write it
def _inplace(out_of_place):
    def kernel(self, *args, **kwargs):
        out = out_of_place(self, *args, **kwargs)
        _check_inplace(self, out)
        np.copyto(self._np(), out._np(), casting="unsafe")
        return self
    kernel.__name__ = out_of_place.__name__.replace("_cpu", "_inplace_cpu")
    return kernel


def check_no_internal_overlap(self: Tensor) -> None:
    """An expanded tensor (stride 0) cannot take a computed result: its elements alias."""
    if any(stride == 0 and size > 1 for size, stride in zip(self._shape, self._stride)):
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the "
                           "tensor before performing the operation.")


def _check_inplace(self: Tensor, out: Tensor) -> None:
    check_no_internal_overlap(self)
    if out._shape != self._shape:
        raise RuntimeError(f"output with shape {list(self._shape)} doesn't match the broadcast "
                           f"shape {list(out._shape)}")
    if dtypes.promote_types(self.dtype, out.dtype) is not self.dtype and \
            out.dtype.category > self.dtype.category:
        raise RuntimeError(f"result type {type_word(out.dtype)} can't be cast to the desired "
                           f"output type {type_word(self.dtype)}")


def _inplace_meta(out_of_place_meta):
    def meta(self, *args, **kwargs):
        _check_inplace(self, out_of_place_meta(self, *args, **kwargs))
        return self
    return meta


def register_inplace(record: OpRecord) -> None:
    """The kernels of an in-place twin of a pointwise op (add_ of add)."""
    twin = ATEN[record.inplace_of].kernels
    register(record.op, _inplace(twin[DispatchKey.CPU][0]),
             _inplace_meta(twin[DispatchKey.Meta][0]))
