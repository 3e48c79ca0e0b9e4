"""Generated row kernels as eager's CPU kernels: sum, mean, var, amax and amin over
dims, softmax and log_softmax (eager/kernels/reduction.py asks `run` from
NATIVE_ELEMENTS elements on and keeps numpy where it gets None), and layer norm forward
and backward and softmax's and log_softmax's backward (eager/kernels/normalization.py
asks `run_graph`).

Each body is a small graph of eager/backends/row_ops.py, made from the op's record's
formula (mean: a sum over the count; softmax and log_softmax: max, exp, sum; layer norm:
mean, the mean of squares about it, the normalised, scaled and shifted output), as the
compiler's decompose pass makes its graphs from it, over rows of any length: the
kernel is compiled once per graph, dtype and pattern of strides (inner stride 1, 0 or
other; rows in the lanes over a leading dim, as layer norm's grad_weight and grad_bias
sum over the batch), through runtime/cpu/kernel_ir.py and the kernel cache on disk, and
serves every shape. Counts, divisors and epsilons are operands of one element read once
per row. A layout (graph, shapes, strides, dims) is planned once: its offset tables and
ctypes arguments are kept (runtime Launch), so a call repeated on the same layout costs
the launch alone; a layout the kernels do not take is remembered as numpy's. While a
background worker compiles the kernel, numpy runs, and the layout is planned again only
every RETRY_SECONDS (under load a niced worker took seconds, and every call planning
again cost ~0.8 ms).
"""
from __future__ import annotations

import hashlib
import threading
import time

import numpy as np

from runtime.cpu.launch import Launch
from runtime.layout import STRIDED, CannotLower, rows_layout, stride_class
from runtime.cpu import kernel_spec as K
from eager.backends import row_ops
from eager.tensor import Tensor, contiguous_strides, empty_cpu, empty_spec, from_array
from ir import dtypes
from eager.kernels._common import stored_in
from ir.ops import Op
from runtime.llvm import compile_service
from runtime.llvm.jit import KernelPending, deferring, host_jit, vector_width

OPS = frozenset({Op.SUM, Op.MEAN, Op.VAR, Op.AMAX, Op.AMIN, Op.SOFTMAX, Op.LOG_SOFTMAX})
"""The ops eager runs as generated row kernels (float32, float64, and float16 and bfloat16
computed in float32 and rounded once)."""
FLOATS = frozenset({dtypes.float32, dtypes.float64})
_MAX_LAYOUTS = 512  # planned layouts kept; past that the table starts again

RETRY_SECONDS = 0.05
"""How long a layout whose kernel is compiling in the background is left to numpy before
it is planned again (planning costs ~0.8 ms: the op's graph, the disk cache's lookup)."""

_lock = threading.Lock()
layouts: dict = {}  # (op, dtype, shape, strides, dims, keepdim, numbers) or (graph
#                     name, dtype, dims, outputs, numbers, shapes and strides)
#                     -> (Launch, extra operands), or NUMPY
NUMPY = object()  # in layouts: a layout the kernels do not take, numpy's from then on
_retry_at: dict = {}  # layouts whose kernel is compiling -> when to plan them again
_kernels: dict = {}  # a kernel's key (load_kernel) -> its address


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
    found = layouts.get(key)  # (a plain key: a repeated call costs the launch alone)
    if found is None:
        stored = stored_in(op, dims[0], len(x._shape), x.dtype) if op is Op.LOG_SOFTMAX \
            else None
        name = op if stored is None else "log_softmax_lastdim"
        found = planned(key, lambda: _plan(name, _OpGraph(op, x.dtype, stored), [x], numbers,
                                           dims, (_op_output(op, x, dims, keepdim),)))
    if found is None or found is NUMPY:
        return None
    launch, extra = found
    return launch([x, *extra])[0]


def _op_output(op: Op, x: Tensor, dims: tuple, keepdim: bool) -> tuple:
    """(shape, whether the reduced dims are dropped) of op's result."""
    full = tuple(x._shape)
    if op in (Op.SOFTMAX, Op.LOG_SOFTMAX):  # x's shape
        return full, False
    if keepdim:
        return tuple(1 if d in dims else s for d, s in enumerate(full)), False
    return tuple(s for d, s in enumerate(full) if d not in dims), True


class _OpGraph:
    """row_op_graph of one op and dtype, as run_graph's `graph` (a plain callable
    class: its key is (op, dtype), with no closure made per call)."""
    __slots__ = ("op", "dtype", "stored")

    def __init__(self, op: Op, dtype, stored=None):
        self.op, self.dtype, self.stored = op, dtype, stored

    def __call__(self):
        return row_ops.row_op_graph(self.op, self.dtype, self.dtype, stored=self.stored)


def run_graph(name, graph, tensors: list, numbers: tuple, dims: tuple, outputs: tuple
              ) -> list | None:
    """A row graph (eager/backends/row_ops.py: `graph()` gives (graph, per-row values);
    `name` keys it with the dtype) over `tensors` (the first one's shape is the
    iteration's; the others broadcast to it or hold one value per row, its reduced
    `dims` kept as 1s) and zero-dim `numbers`, writing `outputs`, each (shape, whether
    the reduced dims are dropped from it), as one generated kernel; None where numpy must
    run it (dims that do not merge into one, a kernel still compiling)."""
    key = (name, tensors[0].dtype, dims, outputs, numbers,
           *[(t._shape, t._stride) for t in tensors])
    found = layouts.get(key)
    if found is None:
        found = planned(key, lambda: _plan(name, graph, tensors, numbers, dims, outputs))
    if found is None or found is NUMPY:
        return None
    launch, extra = found
    return launch([*tensors, *extra])


def planned(key, plan):
    """The layout `key` planned by `plan()` and kept in `layouts` (NUMPY: one the kernels
    do not take); None while its kernel compiles in the background (planned again
    RETRY_SECONDS later, or as soon as the workers have nothing pending: numpy runs
    meanwhile). eager_pointwise.py's layouts are kept here too."""
    if _retry_at.get(key, 0.0) > time.monotonic() and compile_service.pending():
        return None  # its kernel was compiling a moment ago: not planned again yet
    made = plan()
    if made is None:
        _retry_at[key] = time.monotonic() + RETRY_SECONDS
        return None
    if len(layouts) >= _MAX_LAYOUTS:
        layouts.clear()
    layouts[key] = made
    _retry_at.pop(key, None)
    return made


def _plan(name, graph, tensors: list, numbers: tuple, dims: tuple, outputs: tuple):
    x = tensors[0]
    full, item = tuple(x._shape), x.dtype.itemsize
    operands = [_Strided(t._shape, t._stride, t.dtype.itemsize) for t in tensors]
    shapes, squeezed = [tuple(t._shape) for t in tensors], [False] * len(tensors)
    extra = []
    computed = K.register_dtype(x.dtype)  # (a 16-bit float's row computes in float32)
    for number in numbers:  # one element, read once per row
        extra.append(from_array(np.array(number, computed.np)))
        operands.append(_Strided((), (), computed.itemsize))
        shapes.append(())
        squeezed.append(False)
    for shape, dropped in outputs:
        operands.append(_Strided(shape, contiguous_strides(shape), item))
        shapes.append(shape)
        squeezed.append(dropped)
    try:
        rows, inner, offsets, strides, outer = rows_layout(operands, shapes, full, frozenset(dims),
                                                       squeezed)
    except CannotLower:
        return NUMPY
    classes = tuple(stride_class(s) for s in strides)
    columns = ()
    if STRIDED in classes and len(outer) == 1 and all(s in (0, 1) for s in outer[0]):
        columns = tuple(outer[0])
    address = _kernel(name, graph, x.dtype, classes, columns)
    if address is None:
        return None
    specs = tuple(empty_spec(shape, x.dtype) for shape, _ in outputs)
    return Launch(address, offsets, strides, rows, inner, False, specs, empty_cpu,
                  Tensor.data_ptr), extra


def _kernel(name, graph, dt, classes: tuple, columns: tuple):
    label = name.name.lower() if isinstance(name, Op) else name
    return load_kernel((name, dt, classes, columns), f"{label}_{dt.name}",
                       lambda symbol: _body(graph, symbol, classes, columns))


def load_kernel(key: tuple, label: str, body) -> int | None:
    """The address of eager's generated kernel `key` (named after `label`; `body(name)`
    makes its KernelSpec), compiled (or loaded from the cache) once; None while a
    background worker compiles it. eager_pointwise.py's kernels are loaded here too."""
    address = _kernels.get(key)
    if address is not None:
        return address
    from runtime.cpu.kernels import SPEED_LEVEL, BuildKernel
    width = vector_width()
    name = f"kiln_eager_{label}_{_digest(key, width)}"
    try:
        with _lock, deferring():
            address = host_jit().load_spec(
                name, f"{name} {key!r} {width}", BuildKernel(body(name), width), [name],
                SPEED_LEVEL)[name]
    except KernelPending:
        return None
    _kernels[key] = address
    return address


def _digest(key, width: int) -> str:
    return hashlib.sha256(repr((key, width)).encode()).hexdigest()[:12]


def _body(graph, name: str, classes: tuple, columns: tuple) -> K.KernelSpec:
    """A row graph (eager/backends/row_ops.py's) as a KernelSpec."""
    graph, per_row = graph()
    return K.KernelSpec(name, "reduction", graph.inputs, graph.nodes, graph.outputs, (),
                        per_row, classes, columns)
