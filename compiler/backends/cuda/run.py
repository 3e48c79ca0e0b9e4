"""Running a graph on CUDA tensors: each fused node as its CUDA kernel on the device, the
other nodes through the reference interpreter (eager ops on CUDA tensors, eager's CUDA
backend: eager/backends/cuda).

    CudaBackend().compile(graph)   the passes with this backend's `emits`, then the graph
                                   as a callable over CUDA tensors (`run.kernels`: a
                                   CudaNode per fused node)

A CudaNode makes its kernel for the layout of the operands it is called with (their
strides, and whether each is 16-byte aligned: a GEMM's and an elementwise node's vector
loads need it), keeps it per layout, and
launches it through eager/backends/cuda/device.py: the module loaded once per kernel
and device, the operands' device addresses as pointers, outputs fresh CUDA tensors, the
grid from the sizes. What has no kernel runs the node's body through the interpreter:
a node the generators do not take (`refused`), or a layout they do not take
(`fallback_reason`); a gather that meets an index out of range runs interpreted too,
which raises the op's own error.
"""
from __future__ import annotations

import time

import numpy as np

from compiler import interpreter
from compiler.backends.cuda import emits, kernel_for
from compiler.backends.cuda.gemm_node import check_plan
from compiler.backends.fused import FusedKernel
from runtime.layout import Layout, CannotLower
from runtime.cuda.codegen import VECTOR_BYTES
from ir.graph import Graph
from ir.ops import Op

_INTERPRETED = object()  # a layout the kernels do not take


class CudaNode:
    """A fused node run as its CUDA kernel, made per layout of its operands (see the
    module docstring). `refused` says why the node has no kernel at all (the backend
    then lets the interpreter run it)."""

    def __init__(self, node):
        self.node, self.body = node, node.attr["body"]
        self.kind = node.attr["kind"]
        self.refused = ""
        self.fallback_reason = ""
        self.launches: dict = {}  # layout key -> CudaLaunch, or _INTERPRETED
        self._interpreted = interpreter.prepare(self.body)
        self._reader = None
        try:
            if self.kind == "gemm":
                check_plan(node)
            else:
                self._reader = FusedKernel(node)
        except CannotLower as e:
            self.refused = str(e)

    def __call__(self, inputs: list) -> list:
        operands = inputs if self._reader is None else self._reader.operands_of(inputs)
        key = tuple((t._stride, t.data_ptr() % VECTOR_BYTES == 0) for t in operands)
        launch = self.launches.get(key)
        if launch is None:
            launch = self.launches[key] = self._launch_for(operands)
        if launch is _INTERPRETED:
            return self._interpreted(inputs)
        outputs = [_empty(v, operands[0].device) for v in self.body.outputs]
        if launch.gemm is not None:
            (out,) = outputs
            _launch(launch, launch.gemm.arguments(operands, out), out.device)
            return outputs
        if launch.grid[0] == 0:  # no elements
            return outputs
        dev = outputs[0].device
        if not launch.checked:
            _launch(launch, operands + outputs, dev)
            return outputs
        status = _status_word(dev)
        _launch(launch, operands + outputs + [status], dev)
        if status.cpu().numpy()[0]:
            return self._interpreted(inputs)  # an index out of range: the op's error
        return outputs

    def _launch_for(self, operands: list):
        """The launch for operands laid out like these, or _INTERPRETED (with the
        reason in fallback_reason)."""
        layouts = [Layout.of(t) for t in operands]
        if self._reader is not None:
            layouts += [Layout(tuple(v.type.shape), _contiguous(v.type.shape,
                                                                v.type.dtype.itemsize),
                               v.type.dtype.itemsize, 0) for v in self.body.outputs]
        try:
            return kernel_for(self.node, layouts)
        except CannotLower as e:
            self.fallback_reason = str(e)
            return _INTERPRETED


def _contiguous(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.insert(0, step)
        step *= max(size, 1)
    return tuple(strides)


def _empty(value, dev):
    from eager.backends.cuda import device
    return device.empty(value.type.shape, value.type.dtype, dev)


def _status_word(dev):
    from eager.backends.cuda import device
    return device.from_host(np.zeros(1, np.int64), dev)


def _launch(launch, args: list, dev) -> None:
    from eager.backends.cuda import device
    device.launch(launch.kernel, launch.grid, args, dev)


class CudaBackend:
    """The CUDA backend for graphs over CUDA tensors (the native backend hands them
    here): the passes with `emits`, then fused nodes as CUDA kernels."""
    name = "cuda"
    note = ("optimises graphs over CUDA tensors and runs their fused elementwise, row and "
            "GEMM nodes as CUDA kernels; other nodes run through the reference "
            "interpreter (eager ops on CUDA tensors)")

    def compile(self, graph: Graph):
        from compiler.passes import optimize
        start = time.perf_counter()
        optimized = optimize(graph, emits=emits)
        passes = time.perf_counter() - start
        nodes = {i: CudaNode(node) for i, node in enumerate(optimized.nodes)
                 if node.op is Op.FUSED}
        kernels = {i: k for i, k in nodes.items() if not k.refused}
        run = interpreter.prepare(optimized, replace=kernels)
        run.graph, run.source, run.kernels = optimized, graph, kernels
        run.phase_seconds = {"passes": passes}
        run.native_reasons = {str(optimized.nodes[i]).split(" = ")[0]: k.refused
                              for i, k in nodes.items() if k.refused}
        run.kernels_are = "CUDA kernels"
        return run
