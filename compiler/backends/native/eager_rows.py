"""Generated row kernels as eager's CPU kernels for sum, mean, var, amax and amin over
dims and for softmax and log_softmax (eager/kernels/reduction.py asks `run` from
NATIVE_ELEMENTS elements on and keeps numpy where it gets None).

Each op's body is the small graph the compiler's passes make of it (mean: a sum over
the count; softmax and log_softmax: decompose.py's max, exp, sum), over rows of any
length: the kernel is compiled once per op, dtype and pattern of strides (inner stride
1, 0 or other; rows in the lanes over a leading dim), through codegen/pointwise.py and
the kernel cache on disk, and serves every shape. A mean's count and a var's count and
divisor are operands of one element read once per row. A layout (op, shape, strides,
dims) is planned once: its offset tables and ctypes arguments are kept (runtime Launch),
so a call repeated on the same layout costs the launch alone; a layout the kernels do
not take is remembered as numpy's. While a background worker compiles the kernel, numpy
runs, and the layout is planned again only every RETRY_SECONDS (under load a niced
worker took seconds, and every call planning again cost ~0.8 ms).
"""
from __future__ import annotations

import hashlib
import threading
import time

import numpy as np

from compiler.backends.native.launch import Launch
from compiler.backends.native.pointwise import NotNative, _layout, _stride_class
from compiler.codegen import kernel_spec as K
from compiler.codegen.row_ops import row_op_graph
from eager.tensor import Size, Tensor, contiguous_strides, from_array
from ir import dtypes
from ir.ops import Op
from runtime.jit import KernelPending, deferring

OPS = frozenset({Op.SUM, Op.MEAN, Op.VAR, Op.AMAX, Op.AMIN, Op.SOFTMAX, Op.LOG_SOFTMAX})
"""The ops eager runs as generated row kernels (float32 and float64)."""
FLOATS = frozenset({dtypes.float32, dtypes.float64})
_MAX_LAYOUTS = 512  # planned layouts kept; past that the table starts again

RETRY_SECONDS = 0.05
"""How long a layout whose kernel is compiling in the background is left to numpy before
it is planned again (planning costs ~0.8 ms: the op's graph, the disk cache's lookup)."""

_lock = threading.Lock()
_layouts: dict = {}  # (op, dtype, shape, strides, dims, keepdim) -> (Launch, extra operands)
_NUMPY = object()  # in _layouts: a layout the kernels do not take, numpy's from then on
_retry_at: dict = {}  # layouts whose kernel is compiling -> when to plan them again
_kernels: dict = {}  # (op, dtype, classes, columns) -> kernel address


class _Strided:
    """A tensor's layout in numpy's terms (strides in bytes), as row_dims reads it."""
    __slots__ = ("shape", "strides", "itemsize")

    def __init__(self, shape, element_strides, itemsize: int):
        self.shape, self.itemsize = tuple(shape), itemsize
        self.strides = tuple(s * itemsize for s in element_strides)


def run(op: Op, x: Tensor, dims: tuple, keepdim: bool, numbers: tuple = ()) -> Tensor | None:
    """op over `dims` of float tensor x (softmax: dims is its one dim, the result x's
    shape) as one generated kernel; None where numpy must run it (dims that do not
    merge into one, a kernel still compiling). `numbers`: a mean's count, a var's count
    and divisor."""
    key = (op, x.dtype, x._shape, x._stride, dims, keepdim, numbers)
    planned = _layouts.get(key)
    if planned is None:
        if _retry_at.get(key, 0.0) > time.monotonic():
            return None  # its kernel was compiling a moment ago: not planned again yet
        planned = _plan(op, x, dims, keepdim, numbers)
        if planned is None:  # compiling in the background: numpy runs meanwhile
            _retry_at[key] = time.monotonic() + RETRY_SECONDS
            return None
        if len(_layouts) >= _MAX_LAYOUTS:
            _layouts.clear()
        _layouts[key] = planned
        _retry_at.pop(key, None)
    if planned is _NUMPY:
        return None
    launch, extra = planned
    return launch([x, *extra])[0]


def _plan(op: Op, x: Tensor, dims: tuple, keepdim: bool, numbers: tuple):
    full = tuple(x._shape)
    rows_op = op not in (Op.SOFTMAX, Op.LOG_SOFTMAX)  # one value a row (else x's shape)
    if not rows_op:
        out_shape = full
    elif keepdim:
        out_shape = tuple(1 if d in dims else s for d, s in enumerate(full))
    else:
        out_shape = tuple(s for d, s in enumerate(full) if d not in dims)
    item = x.dtype.itemsize
    operands = [_Strided(full, x._stride, item)]
    shapes, squeezed = [full], [False]
    extra = []
    for number in numbers:  # one element, read once per row
        extra.append(from_array(np.array(number, x.dtype.np)))
        operands.append(_Strided((), (), item))
        shapes.append(())
        squeezed.append(False)
    operands.append(_Strided(out_shape, contiguous_strides(out_shape), item))
    shapes.append(out_shape)
    squeezed.append(rows_op and not keepdim)
    try:
        rows, inner, offsets, strides, outer = _layout(operands, shapes, full, frozenset(dims),
                                                       squeezed)
    except NotNative:
        return _NUMPY
    classes = tuple(_stride_class(s) for s in strides)
    columns = ()
    if K.STRIDED in classes and len(outer) == 1 and all(s in (0, 1) for s in outer[0]):
        columns = tuple(outer[0])
    address = _kernel(op, x.dtype, classes, columns)
    if address is None:
        return None
    shape = Size(out_shape)
    outputs = ((shape, contiguous_strides(shape), shape.numel(), x.dtype),)
    return Launch(address, offsets, strides, rows, inner, False, outputs), extra


def _kernel(op: Op, dt, classes: tuple, columns: tuple):
    """The kernel's address, compiled (or loaded from the cache) once; None while a
    background worker compiles it."""
    key = (op, dt, classes, columns)
    address = _kernels.get(key)
    if address is not None:
        return address
    from compiler.backends.native.pointwise import SPEED_LEVEL, BuildKernel
    from runtime.jit import host_jit, vector_width
    width = vector_width()
    name = f"kiln_eager_{op.name.lower()}_{dt.name}_{_digest(key, width)}"
    spec = _body(op, dt, name, classes, columns)
    try:
        with _lock, deferring():
            address = host_jit().load_spec(
                name, f"{name} {key!r} {width}", BuildKernel(spec, width), [name],
                SPEED_LEVEL)[name]
    except KernelPending:
        return None
    _kernels[key] = address
    return address


def _digest(key, width: int) -> str:
    return hashlib.sha256(repr((key, width)).encode()).hexdigest()[:12]


def _body(op: Op, dt, name: str, classes: tuple, columns: tuple) -> K.KernelSpec:
    """The op over rows of x as a KernelSpec (codegen/row_ops.py's graph)."""
    graph, per_row = row_op_graph(op, dt, dt)
    return K.KernelSpec(name, "reduction", graph.inputs, graph.nodes, graph.outputs, (),
                        per_row, classes, columns)
