"""Generated elementwise kernels as eager's CPU kernels for float pointwise ops: float32,
float64 and the 16-bit floats, which compute in float32 and round once, as numpy's path
does (`run` takes uint8, int8 and int16 too). eager/kernels/elementwise.py asks `run`,
and keeps numpy where it gets None; which ops it offers, and from which size, is its
choice: NATIVE_ELEMENTS and ONE_UFUNC_ELEMENTS, with the measurements; most one-ufunc
ops only where `threaded`.

A kernel is one node, the op's record emitter (runtime/cpu/values.py, as in the
compiled path's kernels and eager CUDA's), over its operands each cast to the compute
type in the kernel, as numpy's path casts them first (where's bool condition, an int
tensor in a float op); zero-dim tensors and Python numbers are made the type numpy's
path computes in (the result's dtype; float32 for a 16-bit float) and read once per
row. A scaled operand (add's and sub's alpha) is multiplied by one
more such operand inside the kernel, so a changing number never makes a new kernel. A
kernel is compiled once per op, dtypes, string attributes (gelu's approximate) and
pattern of inner strides (1, 0 or other), through runtime/cpu/kernel_ir.py and the kernel
cache on disk (eager_rows.load_kernel), and serves every shape; contiguous, broadcast,
transposed and sliced operands are read in place through the row kernels' layout
machinery (backends/native/pointwise.py `_layout`), and the result is contiguous. A
layout (op, shapes, strides) is planned once and its Launch kept. While a background
worker compiles the kernel, numpy runs, and the layout is planned again only every
eager_rows.RETRY_SECONDS. Numbers the emitter would compile in (clamp's bounds) keep
numpy.
"""
from __future__ import annotations

import numpy as np

from eager.backends.native import rows as eager_rows
from eager.backends.native.rows import NUMPY, _Strided, load_kernel, planned
from runtime.cpu.launch import PARALLEL_ELEMENTS, Launch, thread_count
from runtime.layout import CannotLower, rows_layout, stride_class
from runtime.cpu import kernel_spec as K
from eager.kernels._common import scalar_value
from ir.records import OpRecord
from eager.tensor import Tensor, contiguous_strides, empty_cpu, empty_spec, from_array
from ir import dtypes
from ir.graph import GraphBuilder, TensorType
from ir.ops import Op

# layouts (op, dtype, attrs, scaled, shape, operands' layouts) -> Launch, kept in
# eager_rows.layouts with the row kernels' (eager_rows.planned)
calls = 0  # kernels launched (tests check that the native path ran)


def threaded() -> bool:
    """Whether a kernel over PARALLEL_ELEMENTS elements or more runs on several threads
    (KILN_NUM_THREADS or the cores, where runtime.pool runs), read now (a layout's Launch
    keeps the count it was planned with)."""
    return thread_count(PARALLEL_ELEMENTS) > 1


def run(record: OpRecord, tensors, attrs: dict, shape, dt) -> object:
    """record's op over `tensors` (broadcast to `shape`, the result of dtype `dt`) as one
    generated kernel; None where numpy must run it."""
    global calls
    pointwise = record.pointwise
    op, scale = record.op, None
    if attrs:
        attrs = dict(attrs)
        if pointwise.scaled:
            scale = attrs.pop(pointwise.scaled, 1)
            if isinstance(scale, (int, float)) and scale == 1:
                scale = None
        if any(not isinstance(v, str) for v in attrs.values()):
            return None  # a number the emitter compiles in (clamp's bounds)
    operands, computes = [], K.register_dtype(dt)
    for t in tensors:
        if not t._shape:  # a number (its memory float64 when wrapped), read in the
            value = t._np()  # type numpy computes in (float32 for the 16-bit floats)
            if value.dtype != computes.np or t.dtype is not computes:
                t = from_array(dtypes.cast(value, computes))
        elif t.dtype is not dt and t.dtype.name not in K.SUPPORTED | K.NARROW:
            return None
        operands.append(t)
    if scale is not None:
        operands.append(from_array(np.asarray(scalar_value(scale), dt.np)))
    key = (op, dt, tuple(attrs.items()), scale is not None, shape,
           tuple([(t.dtype, t._shape, t._stride) for t in operands]))
    launch = eager_rows.layouts.get(key)
    if launch is None:
        launch = planned(key, lambda: _plan(op, dt, attrs, scale is not None, operands, shape))
    if launch is None or launch is NUMPY:
        return None
    calls += 1
    return launch(operands)[0]


def _plan(op: Op, dt, attrs: dict, scaled: bool, operands: list, shape):
    shape = tuple(shape)
    arrays = [_Strided(t._shape, t._stride, t.dtype.itemsize) for t in operands]
    arrays.append(_Strided(shape, contiguous_strides(shape), dt.itemsize))
    shapes = [tuple(t._shape) for t in operands] + [shape]
    try:
        rows, inner, offsets, strides, _ = rows_layout(arrays, shapes, shape, frozenset(),
                                                   [False] * len(arrays))
    except CannotLower:
        return NUMPY
    classes = tuple(stride_class(s) for s in strides)
    address = _kernel(op, dt, tuple(attrs.items()), scaled,
                      tuple(t.dtype for t in operands), classes)
    if address is None:
        return None
    return Launch(address, offsets, strides, rows, inner, True, (empty_spec(shape, dt),),
                  empty_cpu, Tensor.data_ptr)


def _kernel(op: Op, dt, attrs: tuple, scaled: bool, reads: tuple, classes: tuple):
    return load_kernel((op, dt, attrs, scaled, reads, classes), f"{op.name.lower()}_{dt.name}",
                       lambda name: _body(op, dt, name, dict(attrs), scaled, reads, classes))


def _body(op: Op, dt, name: str, attrs: dict, scaled: bool, reads: tuple,
          classes: tuple) -> K.KernelSpec:
    """op over operands of dtypes `reads` (the last one the scale when `scaled`), its
    result of dtype dt, as a KernelSpec."""
    g = GraphBuilder()
    full = TensorType(("n",), dt)
    xs = [g.input(TensorType(("n",), read), f"x{j}") for j, read in enumerate(reads)]
    if scaled:  # the last tensor times the scale, before the op sees it
        scale = xs.pop()
        (xs[-1],) = g.add(Op.MUL, (xs[-1], scale), {}, full)
    (result,) = g.add(op, tuple(xs), attrs, full)
    graph = g.build([result])
    return K.KernelSpec(name, "elementwise", graph.inputs, graph.nodes, graph.outputs, (),
                        frozenset(), classes)
