"""Single-op elementwise CUDA kernels for eager: one output element per grid-stride
step, its operands found through their strides, so broadcast (stride 0), transposed,
sliced and expanded views are read in place, and a strided output is written in place
(copies into views, fills, in-place ops).

    ElementwiseSpec       what one kernel computes: the op (Op.TO_COPY: a cast), the
                          operands' dtypes and which are Python numbers (passed by value),
                          the result and compute dtypes, attributes compiled in, the rank
    elementwise_kernel    spec -> CudaKernel, built once per spec
    layout(shape, views)  the iteration space with dims merged where every operand's
                          strides allow it (eager.shapes.merge_dims: a contiguous tensor
                          is one dim)

The kernel is runtime/cuda/codegen/kernel_ir.py's elementwise kernel with its sizes and strides
as launch arguments (one kernel per op, dtypes and rank serves every shape and view),
and this module's body: the op's record emitter (runtime/cpu/values.py), as in the
CPU's native kernels. Kernel parameters, in order: per operand its pointer, or its value
(a Python number, in the type it is used in), the output pointer, then the scale of the
last operand when the op's record names a scaled attribute (add's alpha: a launch
argument, so an optimiser's changing step size reuses the kernel), the sizes (rank
i64s), and each operand's strides then the output's (rank i64s each; none for a number).

The vector variant (ElementwiseSpec.vector: each operand's and the output's stride, 1 or
0, compiled in; rank 1) reads and writes 16-byte vectors (runtime/cuda/codegen/kernel_ir.py's
vector kernel) and takes the element count as its only size, no strides; pointwise.py
chooses it per call, where the dims merge into one that every tensor walks contiguously
(or holds one element for all) and every tensor's first element is 16-byte aligned.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from runtime.cpu import kernel_ir as K
from runtime.cpu import values as V
from runtime.cuda.codegen import CudaKernel
from runtime.cuda.codegen.kernel_ir import CudaSpec, KernelBuilder, build_elementwise
from ir.records import RECORDS
from runtime.layout import merge_dims
from ir import dtypes
from ir.dtypes import DType
from ir.graph import TensorType, Value
from ir.ops import Op


@dataclass(frozen=True)
class ElementwiseSpec:
    op: Op
    inputs: tuple            # (DType, by value) per operand
    out: DType
    compute: DType
    attrs: tuple = ()        # (name, value) compiled into the kernel
    rank: int = 1
    scaled: bool = False     # the last operand is multiplied by a launch argument
    vector: tuple | None = None  # the vector kernel: per operand and the output, 1 or 0

    def name(self) -> str:
        """A name for this spec's kernel, new at each call (kernels are found by name)."""
        operands = "_".join(d.name + ("s" if by_value else "") for d, by_value in self.inputs)
        shape = f"_r{self.rank}" if self.vector is None else "_vector"
        return (f"kiln_eager_{self.op.schema.name}_{operands}_to_{self.out.name}"
                f"{shape}_{next(_numbers)}")


_numbers = itertools.count(1)


def layout(shape, strides: list) -> tuple:
    """(sizes, [strides per operand]) over the fewest dims (eager.shapes.merge_dims)."""
    merged = merge_dims((n, [s[d] for s in strides]) for d, n in enumerate(shape))
    sizes = tuple(n for n, _ in merged)
    return sizes, [tuple(st[j] for _, st in merged) for j in range(len(strides))]


def operand(name: str, dt: DType) -> Value:
    """A kernel operand of dtype `dt` for a KernelSpec: its dtype is all the kernel
    generators read of it (sizes are launch arguments)."""
    return Value(name, TensorType((), dt))


@functools.lru_cache(maxsize=1024)
def elementwise_kernel(spec: ElementwiseSpec) -> CudaKernel:
    inputs = tuple(operand(f"in{j}", dt) for j, (dt, _) in enumerate(spec.inputs))
    kernel = K.KernelSpec(spec.name(), "elementwise", inputs, (), (operand("out", spec.out),),
                          (), frozenset(), ())
    by_value = frozenset(j for j, (_, number) in enumerate(spec.inputs) if number)
    extras = (("scale", spec.compute),) if spec.scaled else ()
    copy = spec.op is Op.TO_COPY and spec.inputs == ((spec.out, False),)

    def body(k: KernelBuilder, offsets: list) -> None:
        if copy:  # the words themselves: a float's NaN payloads are kept, as by memcpy
            k.store(1, offsets[1], k.load(0, offsets[0], memory=True), memory=True)
            return
        values = [k.load(j, offsets[j]) for j in range(len(inputs))]
        result = _compute(V.Lanes(k.b, None), spec, values, k.extras.get("scale"))
        k.store(len(inputs), offsets[len(inputs)], result)
    return build_elementwise(CudaSpec(kernel, rank=spec.rank, by_value=by_value,
                                      extras=extras, vector=spec.vector), body=body)


def _compute(L: V.Lanes, spec: ElementwiseSpec, values: list, scale):
    in_dts = [dt for dt, _ in spec.inputs]
    if spec.op is Op.TO_COPY:
        return L.cast(values[0], in_dts[0], spec.out)
    if scale is not None:  # (a 16-bit float's product in float32, not fused with the op)
        values = [L.cast(v, d, spec.compute) for v, d in zip(values, in_dts)]
        register = V.register_dtype(spec.compute)
        values[-1] = V.Elements(L, register, contract=register is spec.compute).mul(
            values[-1], scale)
        in_dts = [spec.compute] * len(values)
    rule = RECORDS[spec.op].pointwise.rule
    result = V.compute(L, spec.op, values, in_dts, spec.out, dict(spec.attrs), spec.compute)
    result_dt = dtypes.bool_ if rule in ("compare", "logical") else spec.compute
    return L.cast(result, result_dt, spec.out)
