"""The CUDA backend's kernels: the fused nodes of a graph after the passes as CUDA kernels
(runtime/cuda/codegen) with their launch configuration. Making them needs no GPU: a
kernel is LLVM IR for NVPTX, its PTX comes from llvmlite, and where ptxas is installed
its report (registers, spills, shared memory).

    prepare(graph)   -> CudaPlan: a CudaLaunch per fused node the generators take, and
                        the others with the reason (as the native backend's
                        `native_reasons`)
    kernel_for(node) -> CudaLaunch of one fused node, for its operands' layout
    emits(node)      whether fusion may put `node` in a CUDA kernel

run.py runs graphs over CUDA tensors with these kernels (eager.compile on CUDA
inputs); LoweringBackend below makes them to be read (compiler.lower, target="cuda").

A fused node is read as the native backend reads it (backends/fused.py's FusedKernel:
operands, iteration space, per-row values, gathers, merged dims; a gemm node through
backends/gemm_plan.py, see gemm_node.py), so both backends agree on what a node
computes. Kernels are made for given operand layouts,
by default contiguous inputs (the layouts of the node's leading views follow from them).
"""
from __future__ import annotations

import itertools

import numpy as np

from compiler import interpreter
from compiler.backends.cuda.gemm_node import address_of, gemm_call
from compiler.backends.cuda.plan import CudaLaunch, CudaPlan
from compiler.backends import fused
from compiler.backends.fused import FusedKernel
from compiler.backends.gemm_plan import takes_product
from runtime.cpu import kernel_ir as K
from runtime.cuda.codegen.gemm import gemm_kernel
from runtime.cuda.codegen import VECTOR_BYTES
from runtime.cuda.codegen.kernel_ir import (MAX_BLOCKS, CudaSpec, blocks_for,
                                            build_elementwise)
from runtime.cuda.codegen.rows import build_rows
from eager.tensor import empty_cpu, empty_spec
from ir.graph import Graph, Node
from ir.ops import Op
from ir.records import RECORDS
from runtime.layout import STRIDED, CannotLower, row_dims

_names = itertools.count(1)


def emits(node: Node) -> bool:
    """Whether a CUDA kernel can hold `node`: what the native kernels hold (the narrow
    dtypes, kernel_spec.NARROW, in elementwise nodes only), but a batched product or one
    of 16-bit operands, which the CUDA GEMM does not compute, and ops whose record says
    their emitter has no CUDA form (Pointwise.not_on_cuda: no op's at present); they run
    interpreted, and the ops around them still fuse."""
    record = RECORDS.get(node.op)
    if record is not None and record.pointwise is not None and record.pointwise.not_on_cuda:
        return False
    if node.op is Op.MM and not takes_product(node, half=False):
        return False
    return node.op is not Op.BMM and fused.emits(node)


def prepare(graph: Graph) -> CudaPlan:
    """CUDA kernels for the fused nodes of `graph` (after the passes)."""
    plan = CudaPlan()
    for i, node in enumerate(graph.nodes):
        if node.op is Op.FUSED:
            try:
                plan.launches[i] = kernel_for(node)
            except CannotLower as e:
                plan.refused[str(node).split(" = ")[0]] = str(e)
    return plan


def kernel_for(node: Node, arrays: list | None = None, threads: int | None = None
               ) -> CudaLaunch:
    """The CUDA kernel of fused `node` for operands laid out like `arrays` (numpy arrays
    of the operands, inputs then outputs, or anything with their shape, strides,
    itemsize and `address`; contiguous inputs when None), with `threads` per block (the
    generator's choice when None). An elementwise node whose operands all walk its
    elements contiguously (or are one element read by all) and whose addresses are all
    16-byte aligned gets the vector kernel (runtime/cuda/codegen/kernel_ir.py)."""
    if node.attr["kind"] == "gemm":
        return _gemm_launch(node, arrays)
    reader = FusedKernel(node)
    full, reduced = reader.space
    if reader.kind == "reduction" and 0 in full:
        raise CannotLower("a reduction over no elements (the interpreter gives eager's "
                          "answer or error)")
    arrays = arrays if arrays is not None else _contiguous(node)
    gathers, placed = reader.gathers_over(arrays)
    outer, inner = row_dims(arrays, reader.shapes, full, reduced, reader.squeezed, placed)
    vector = reader.kind == "elementwise" and not gathers and not outer and \
        set(inner[1]) <= {0, 1} and inner[1][-len(reader.body.outputs):].count(0) == 0 \
        and all(address_of(a) % VECTOR_BYTES == 0 for a in arrays)
    name = f"kiln_cuda_{reader.kind}{'_vector' if vector else ''}_{next(_names)}"
    classes = tuple(s if s in (0, 1) else STRIDED for s in inner[1])
    kernel_spec = K.KernelSpec(name, reader.kind, reader.operands, reader.nodes,
                               tuple(reader.body.outputs), reader.scalars,
                               reader.row_values, classes, gathers=gathers)
    spec = CudaSpec(kernel_spec, tuple((size, tuple(col)) for size, col in outer),
                    (inner[0], tuple(inner[1])), vector=tuple(inner[1]) if vector else None)
    if reader.kind == "elementwise":
        kernel = build_elementwise(spec, threads)
        blocks = blocks_for(spec.elements, kernel.block[0], spec.lanes)
    else:
        kernel = build_rows(spec, threads)
        blocks = min(spec.rows, MAX_BLOCKS)
    return CudaLaunch(str(node).split(" = ")[0], reader.kind, kernel, (blocks, 1, 1),
                      bool(gathers))


def _gemm_launch(node: Node, arrays: list | None) -> CudaLaunch:
    """A gemm node's launch for inputs laid out like `arrays` (contiguous when None)."""
    inputs = node.attr["body"].inputs
    if arrays is None:
        arrays = [np.empty(v.type.shape, v.type.dtype.np) for v in inputs]
    call = gemm_call(node, arrays[:len(inputs)])
    return CudaLaunch(str(node).split(" = ")[0], "gemm", gemm_kernel(call.request),
                      call.grid, gemm=call)


def _contiguous(node: Node) -> list | None:
    """The operands' arrays when the node's inputs are contiguous (the layouts of its
    leading views follow)."""
    return _arrays_of(node, [empty_cpu(*empty_spec(v.type.shape, v.type.dtype))
                             for v in node.attr["body"].inputs])


class _Lowered:
    """A fused node in the interpreter's place while lowering: its CUDA kernel made for
    its operands' layout at the first call (into `plan`), its values computed by the
    interpreter (lower captures on CPU tensors)."""

    def __init__(self, node: Node, index: int, plan: CudaPlan):
        self.node, self.index, self.plan = node, index, plan
        self.interpreted = interpreter.prepare(node.attr["body"])

    def __call__(self, inputs: list) -> list:
        name = str(self.node).split(" = ")[0]
        if self.index not in self.plan.launches and name not in self.plan.refused:
            try:
                self.plan.launches[self.index] = kernel_for(self.node, _arrays_of(self.node,
                                                                                  inputs))
            except CannotLower as e:
                self.plan.refused[name] = str(e)
        return self.interpreted(inputs)


def _arrays_of(node: Node, inputs: list) -> list | None:
    """The arrays of a fused node's operands (inputs then fresh outputs) over the input
    tensors `inputs` (a gemm node's operands are its inputs); None where the node is no
    pointwise one (kernel_for says why)."""
    if node.attr["kind"] == "gemm":
        return [t._np() for t in inputs]
    try:
        reader = FusedKernel(node)
    except CannotLower:
        return None
    operands = [t._np() for t in reader.operands_of(inputs)]
    return operands + [np.empty(shape, dtype.np) for shape, _, _, dtype in
                       (empty_spec(v.type.shape, v.type.dtype) for v in reader.body.outputs)]


class LoweringBackend:
    """compiler.lower's backend for target="cuda": the passes, then each fused node's
    CUDA kernel made, to be read, for the layouts its operands have when the graph runs
    (`run.cuda`, a CudaPlan); the graph itself runs through the interpreter, since lower
    captures on CPU tensors."""
    name = "cuda-lowering"
    note = "makes CUDA kernels to read; runs the graph through the reference interpreter"

    def compile(self, graph: Graph):
        from compiler.passes import optimize
        optimized = optimize(graph, emits=emits)
        plan = CudaPlan()
        run = interpreter.prepare(optimized, replace={
            i: _Lowered(node, i, plan) for i, node in enumerate(optimized.nodes)
            if node.op is Op.FUSED})
        run.graph, run.source, run.cuda = optimized, graph, plan
        return run
