"""What a CPU pointwise kernel is and what the code generators take, known without
building IR: the runner (backends/native/pointwise.py) plans launches and keys the kernel
cache from these alone, so a process whose kernels come from the disk cache imports
neither llvmlite nor the emitters (pointwise.py, values.py, gather.py and
accumulators.py, which import these names from here)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ir import dtypes
from ir.dtypes import DType
from ir.records import float_only, pointwise_ops
from ir.graph import Node, Value
from ir.ops import Op

STRIDED = None  # an operand's inner-stride class when it is neither 1 nor 0

SUPPORTED = frozenset({"float32", "float64", "int32", "int64", "bool"})
"""The dtypes kernels read, compute and write (values.py gives each its LLVM type)."""
NARROW = frozenset({"uint8", "int8", "int16", "float16", "bfloat16"})
"""The dtypes elementwise kernels take besides SUPPORTED (values.py: the 16-bit floats
compute in float32 registers and round once per op), not yet reductions' or gathers'."""


def register_dtype(dt: DType) -> DType:
    """The type a value of `dt` computes in: float32 for the 16-bit floats."""
    return dtypes.float32 if dt in dtypes.HALF else dt
COPIES = frozenset({Op.CLONE, Op.TO_COPY})
"""Copies run in kernels as casts to their result type."""


def native_ops() -> frozenset:
    """The elementwise ops kernels can emit: the pointwise records with an emitter, and
    copies."""
    return frozenset(op for op, p in pointwise_ops().items() if p.emit is not None) | COPIES


float_only_ops = float_only
"""Ops whose emitter computes in floats only."""


REDUCE_OPS = {Op.SUM: "sum", Op.AMAX: "max", Op.AMIN: "min", Op.ARGMAX: "argmax",
              Op.ARGMIN: "argmin"}
"""The reductions row kernels accumulate (accumulators.py), by accumulator kind."""


@dataclass(frozen=True)
class KernelSpec:
    """What a kernel computes: `nodes` (elementwise and reductions, in order) over the
    operands `inputs`, writing `outputs`; `per_row` marks values with one element per
    row (reduced values, and inputs broadcast along the inner dim)."""
    name: str
    kind: str                    # "elementwise" or "reduction"
    inputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    scalars: tuple[tuple[Value, object], ...]
    per_row: frozenset
    strides: tuple               # per operand: 1, 0 or STRIDED
    row_strides: tuple = ()      # column mode: per operand 1 (rows adjacent) or 0
    gathers: tuple = ()          # elementwise: values loaded at an index (codegen/gather.py)
    segments: int = 1            # reduction: inner runs a row is made of (kernel_ir.py)

    def width(self, host_lanes: int) -> int:
        sizes = [v.type.dtype.itemsize for v in self.inputs + self.outputs] + \
            [n.outputs[0].type.dtype.itemsize for n in self.nodes]
        return max(4, min(16, host_lanes * 4 // max(sizes)))


def nonpositive_exps(spec: KernelSpec) -> frozenset:
    """The exps of a row kernel whose argument is a value minus its maximum over the
    row, reduced in this kernel (softmax's exp(x - max)): every argument is <= 0 or
    nan (x <= max, and rounding keeps x - max <= 0), which vmath's exp_nonpositive
    computes as exp does, in fewer operations."""
    if spec.kind != "reduction":
        return frozenset()
    producer = {n.outputs[0]: n for n in spec.nodes}
    found = set()
    for node in spec.nodes:
        shift = producer.get(node.inputs[0]) if node.op is Op.EXP else None
        if shift is None or shift.op is not Op.SUB or shift.attr.get("alpha", 1) != 1:
            continue
        x, top = shift.inputs
        peak = producer.get(top)
        types = {v.type.dtype for v in (x, top, shift.outputs[0], node.outputs[0])}
        if peak is not None and peak.op is Op.AMAX and peak.inputs[0] == x and \
                len(types) == 1 and x.type.dtype.is_floating_point:
            found.add(node)
    return frozenset(found)


@dataclass(frozen=True)
class Gather:
    value: Value   # the gathered result
    source: int    # operand number of the source
    index: int     # operand number of the index
    stride: int    # source elements between neighbours along the indexed dim
    size: int      # the indexed dim's size (> 0)
    wraps: bool    # negative indices count from the end (t[i]); else only [0, size)


def strides_over_result(op: Op, source: np.ndarray, index: np.ndarray, dim: int):
    """The element strides, over a gathering op's result, of its source (the indexed dim
    stretched over the index's dims with stride 0: every element addressed at index 0)
    and of its index (placed at the indexed dim)."""
    src = [s // source.itemsize for s in source.strides]
    idx = [0 if size == 1 else s // index.itemsize
           for size, s in zip(index.shape, index.strides)]
    if op is Op.GATHER:  # the result has the index's shape: the source's dims apart
        return src[:dim] + [0] + src[dim + 1:], idx
    if op is Op.INDEX_SELECT:
        idx = idx or [0]  # a 0-d index selects one element: a dim of size 1
    return src[:dim] + [0] * len(idx) + src[dim + 1:], [0] * dim + idx + [0] * (
        len(src) - dim - 1)
