"""The CPU and Meta kernels of pointwise ops, made from their records (ir/records.py):
an op's record gives its numpy function and dtype rule, and `register_pointwise` makes
the rule (broadcast shape, result dtype, the op's own checks) and the kernel (numpy in
the compute type, float16 computing in float32 and rounded once). In-place variants
compute as their out-of-place twin and write `self`. The records themselves are in
unary.py and binary.py."""
from __future__ import annotations

from math import prod

import numpy as np

from eager.dispatcher import ATEN, DispatchKey
from eager.kernels._common import (check_castable, compute_np, float_of, load_native,
                                   meta_from_rule, operand, promote, quiet_off, quiet_on,
                                   register, result, scalar_value, type_word)
from ir.records import OpRecord
from eager.shapes import broadcast_shapes
from eager.tensor import Tensor, from_array, wrap_scalar
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
    dtype_of, check, check_attrs, float_only = p.dtype, p.check, p.check_attrs, p.float_only
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
            elif not check_attrs:
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
kernels (eager/backends/native/pointwise.py, loaded at the first such call; set
KILN_EAGER_NATIVE=0 to keep numpy). Ops numpy runs as one ufunc have their own sizes,
ONE_UFUNC_ELEMENTS. Measured on one thread, numpy / native in us, float32, a layout seen
before: gelu at 1024 elements 81 / 5.8, at 256K 12186 / 137; sigmoid at 1024 8.0 / 4.7;
relu at 1024 4.6 / 4.3, at 256K 998 / 26. Below 1024 a layout's first sight (a plan,
~25 us) costs more than numpy's cheaper composed ops."""
ONE_UFUNC_ELEMENTS = {  # op: (from this many elements in an operand, only on threads)
    Op.ADD: (96 << 10, True), Op.SUB: (96 << 10, True), Op.MUL: (96 << 10, True),
    Op.DIV: (96 << 10, True), Op.MAXIMUM: (96 << 10, True), Op.MINIMUM: (96 << 10, True),
    Op.LOG: (64 << 10, True), Op.NEG: (128 << 10, True), Op.ABS: (128 << 10, True),
    Op.EXP: (32 << 10, False), Op.SQRT: (16 << 10, False),
    # numpy's one pass, as neg's (not timed apart: numpy 5 us, native 12 at 4K elements)
    Op.FLOOR: (128 << 10, True), Op.CEIL: (128 << 10, True), Op.TRUNC: (128 << 10, True),
    Op.ROUND: (128 << 10, True),
}
"""Ops numpy runs as one ufunc, run as generated kernels from this many elements in an
operand, most only where the kernel runs on more than one thread (KILN_NUM_THREADS or the
cores, and runtime.pool; a kernel goes on threads from launch.PARALLEL_ELEMENTS, 64K, on):
on one thread numpy's loop is at memory bandwidth or faster. exp and sqrt win alone too.
tanh stays with numpy: vmath's float32 tanh is slower even on two threads. add and sub
with an alpha other than 1 do too: the kernel would fuse other * alpha + self into one
FMA, where numpy (and the fused optimiser steps, bit for bit with eager's per-tensor
ones) rounds the product first. Measured: the eager op, numpy / native in us, best of 20
alternating runs, a layout seen before, on two cores shared with other jobs (at a time
the other core was free):

    float32    threads  16K      64K      96K      128K     256K     1M
    add        2        3.5/5.7  7.4/7.6  12/8.8   17/12    34/21    106/66
    x * 0.5    2        4.1/6.9  6.0/9.7  9.8/9.7  13/10    25/18    91/57
    div        2        3.7/5.5  8.0/7.6  13/8.7   17/11    35/21    109/71
    maximum    2        3.3/5.4  7.2/8.6  11/9.1   15/12    31/22    112/75
    neg        2        2.8/4.6  4.6/6.8  6.7/7.2  11/8.0   23/15    84/51
    log        2        6.0/7.8  18/13    27/16    33/20    69/36    272/138
    tanh       2        4.7/11   13/19    19/26    23/32    46/59    180/232
    add        1        3.5/5.9  8.2/11                     34/38    133/151
    log        1        5.8/7.9  19/19                      69/64    284/254
    exp        1        6.9/7.2  21/16                      77/53    303/205
    sqrt       1        6.8/5.3  20/8.8                     76/26    301/125
    float64
    add        2        4.1/6.4  16/11    24/16    33/21    67/39    392/237
    x * 0.5    2        4.6/7.7  12/11    17/13    23/16    48/31    162/106
    neg        2        3.5/5.2  10/7.0   16/9.7   22/13    44/25    188/159
    tanh       2        15/23    54/43    81/63    104/82   203/162  864/643
    add        1        4.3/6.7  17/20                      58/60    367/429
    log        1        11/13    35/41                      143/152  807/624
    exp        1        11/12    38/37                      153/137  809/559
    sqrt       1        17/8.0   63/20                      242/69   986/308

sub, mul and minimum went as add, div and maximum; abs as neg; exp and sqrt on two
threads as on one below 64K and faster above. At 32K on one thread exp is 11/10 (float32)
and 21/20 (float64). The native side includes ~0.7 us of asking whether there are threads
(eager_pointwise.threaded). A layout's first call costs ~50 us more than numpy's (the
plan; the kernel runs alone), its second ~15 us (the launcher is made)."""
_NATIVE_DTYPES = frozenset({dtypes.float32, dtypes.float64, *dtypes.HALF})
"""Result types offered to the generated kernels: the floats. Integer results keep
numpy, which runs them in one ufunc at memory speed (int8 add: 3.0 / 3.0 us at 1K
elements, 5.3 / 7.4 at 16K, 17.5 / 19.1 at 256K, numpy / native). The 16-bit floats
compute in float32 there as here and round once, bit for bit with numpy's path where the
op is exact (vmath's float math within a unit of the type); numpy's path converts every
operand to float32 and the result back, so every op with an emitter goes native from
NATIVE_ELEMENTS on, one-ufunc ops too, on one thread. Measured on one thread, best of
20-30, numpy / native in us: bfloat16 add at 1K 17 / 5.4, at 256K 538 / 46; exp at 16K
38 / 16; gelu at 1K 198 / 9.5, at 256K 22042 / 351; float16 add at 16K 103 / 5.4; exp at
16K 954 / 12."""
_native_pointwise = None  # that module once loaded, False where it cannot be


def _import_pointwise():
    from eager.backends.native import pointwise as eager_pointwise
    return eager_pointwise


def _native(record: OpRecord, tensors, attrs: dict, shape, dt, threads_only: bool):
    """The op from a generated kernel, or None: numpy runs it."""
    global _native_pointwise
    if _native_pointwise is None:
        _native_pointwise = load_native(_import_pointwise)
    if _native_pointwise is False or (threads_only and not _native_pointwise.threaded()):
        return None
    scaled = record.pointwise.scaled
    if scaled and attrs and scalar_value(attrs.get(scaled, 1)) != 1:
        return None  # numpy rounds other * alpha before adding; the kernel makes one FMA
    return _native_pointwise.run(record, tensors, attrs, shape, dt)


def _native_elements(record: OpRecord) -> dict:
    """result dtype -> (from how many elements in an operand the op is offered to the
    generated kernels, and whether only where they run on threads); a dtype not there
    keeps numpy."""
    p = record.pointwise
    if p.emit is None or p.rule in ("compare", "logical"):
        return {}
    # (an op computing in the 16-bit type itself, own_half, keeps numpy for it)
    halves = {} if p.own_half else dict.fromkeys(dtypes.HALF, (NATIVE_ELEMENTS, False))
    if record.op in ONE_UFUNC_ELEMENTS:
        wide = ONE_UFUNC_ELEMENTS[record.op]
    elif isinstance(p.numpy, np.ufunc):
        return halves
    else:
        wide = NATIVE_ELEMENTS, False
    return {dtypes.float32: wide, dtypes.float64: wide, **halves}


def in_common_type(tensors, common: dtypes.DType, wide_scalar: bool = False):
    """`tensors`, each that dtypes.rounded_first says is rounded to `common` first (a
    16-bit float type) rounded: a Python number, a zero-dim tensor of another type, an
    int16 tensor. With `wide_scalar` (mul, div) a zero-dim second operand stays as it is."""
    out = None
    for i, t in enumerate(tensors):
        if dtypes.rounded_first(t.dtype, common) and not (wide_scalar and i == 1 and
                                                          not t._shape):
            if out is None:
                out = list(tensors)
            out[i] = _rounded_number(t, common) if t._wrapped else \
                from_array(dtypes.cast(t._np(), common))
    return tensors if out is None else tuple(out)


def _rounded_number(t: Tensor, common: dtypes.DType) -> Tensor:
    """A wrapped number rounded to `common`, kept per number: a number's array is one
    object per value (tensor.wrap_scalar's), and the kernels only read it (a new tensor
    at each call cost ~3 us of a bfloat16 add's ~9 at 1K elements)."""
    a = t._np()
    key = id(a), common
    kept = _ROUNDED_NUMBERS.get(key)
    if kept is None or kept[0] is not a:
        if len(_ROUNDED_NUMBERS) >= 256:
            _ROUNDED_NUMBERS.clear()
        kept = _ROUNDED_NUMBERS[key] = a, from_array(dtypes.cast(a, common))
    return kept[1]


_ROUNDED_NUMBERS: dict = {}  # (id of a number's array, type) -> (that array, rounded)


def _pointwise_kernel(record: OpRecord, split, shape_and_dtype):
    numpy, compare = record.pointwise.numpy, record.pointwise.rule == "compare"
    quiet, scaled = record.pointwise.quiet, record.pointwise.scaled
    wide_scalar = record.pointwise.wide_scalar
    count = _tensor_count(record)
    offered = _native_elements(record)
    half = frozenset() if record.pointwise.own_half else dtypes.HALF
    half_computes_in = compute_np(dtypes.float16)

    def kernel(*args, **attrs):
        if attrs or len(args) != count:
            args, attrs = split(args, attrs)
        shape, dt = shape_and_dtype(args, attrs)
        if compare:
            common = _promoted(args)
            ct = compute_np(common)
            if common in dtypes.HALF:
                args = in_common_type(args, common)
        elif dt in half:  # compute_np(dt), inlined
            ct = half_computes_in
            args = in_common_type(args, dt, wide_scalar)
        else:
            ct = dt.np
        if count == 2:  # spelled out for the common cases: operand() inlined
            a, b = args[0]._np(), args[1]._np()
            at = offered.get(dt)
            if at is not None and (a.size >= at[0] or b.size >= at[0]):
                out = _native(record, args, attrs, shape, dt, at[1])
                if out is not None:
                    return out
            arrays = (a if a.dtype is ct else operand(args[0], ct),
                      b if b.dtype is ct else operand(args[1], ct))
        elif count == 1:
            a = args[0]._np()
            at = offered.get(dt)
            if at is not None and a.size >= at[0]:
                out = _native(record, args, attrs, shape, dt, at[1])
                if out is not None:
                    return out
            arrays = a if a.dtype is ct else operand(args[0], ct),
        else:
            at = offered.get(dt)
            if at is not None and prod(shape) >= at[0]:
                out = _native(record, args, attrs, shape, dt, at[1])
                if out is not None:
                    return out
            arrays = [operand(t, ct) for t in args]
        scale = 1
        if attrs:
            attrs = {k: scalar_value(v) for k, v in attrs.items()}
            if scaled:
                scale = attrs.pop(scaled, 1)
        if quiet:
            out = numpy(*arrays, **attrs) if attrs else numpy(*arrays)
        else:  # inf, nan and overflow are results, not warnings
            token = quiet_on()
            try:
                if scale != 1:  # (a scaled op is never quiet: records.declare)
                    if dt in half:  # PyTorch's alpha is of the tensors' type: 0.3 rounds
                        scale = float(np.asarray(scale, dt.np))
                    elif not dt.is_floating_point:  # uint8 takes -2 as 254; 300 refused
                        scale = dtypes.checked_scalar(scale, dt)[()]
                    arrays = *arrays[:-1], arrays[-1] * scale
                out = numpy(*arrays, **attrs)
            finally:
                quiet_off(token)
        if out is arrays[0]:  # given back (floor of integers): the result is a new tensor
            out = out.copy()
        # result(out, dt), its common case first
        return from_array(out) if type(out) is np.ndarray and out.dtype is dt.np else \
            result(out, dt)
    kernel.__name__ = record.op.schema.name + "_cpu"
    return kernel


def _with_number_forms(record: OpRecord, kernel, shape_and_dtype):
    """`kernel`, handing the call to other ops' kernels where a tensor is a Python number
    the record names (records.Pointwise.number_forms: pow(x, 0.5) is sqrt(x))."""
    forms = record.pointwise.number_forms

    def dispatch(*args, **attrs):
        for position, number, form, kinds in forms:
            t = args[position] if len(args) > position else None
            if t is not None and t._wrapped and t._np() == number and \
                    shape_and_dtype(args, attrs)[1].name in kinds:
                (x,) = [a for i, a in enumerate(args) if i != position]
                if isinstance(form, Op):
                    return _cpu(form, x)
                return form(_cpu, x)
        return kernel(*args, **attrs)
    dispatch.__name__ = kernel.__name__
    return dispatch


def _cpu(op: Op, *operands):
    """op's CPU kernel over `operands` (Python numbers wrapped)."""
    return ATEN[op].kernels[DispatchKey.CPU][0](*(
        v if isinstance(v, Tensor) else wrap_scalar(v) for v in operands))


def register_pointwise(record: OpRecord) -> None:
    """The CPU and Meta kernels of a pointwise record."""
    split, shape_and_dtype = _split_arguments(record), _shape_and_dtype(record)
    kernel = _pointwise_kernel(record, split, shape_and_dtype)
    if record.pointwise.number_forms:
        kernel = _with_number_forms(record, kernel, shape_and_dtype)
    register(record.op, kernel, meta_from_rule(_pointwise_rule(record, split, shape_and_dtype)))


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
    check_castable(out.dtype, self.dtype)


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
