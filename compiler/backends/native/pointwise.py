"""The native backend's runner: the optimised graph's fused kernels run as generated
machine code where the code generator supports them, and through the reference
interpreter where it does not (with the reason kept for explain()).

A fused node's body starts with the views that read its inputs (transposes, expands,
slices): they run as eager view ops, which only compute strides, and the kernel reads
the viewed memory through those strides. The dims of the iteration space are merged
where every operand allows it (as PyTorch's TensorIterator does), leaving rows and one
inner dim.
"""
from __future__ import annotations

import functools
import hashlib
import threading

import numpy as np

from compiler import interpreter
from compiler.backends.fused import FusedKernel
from eager.tensor import Tensor, empty_cpu, empty_spec
from ir.graph import Node
from runtime import debugging as debug
from runtime.cpu import kernel_spec as K
from runtime.cpu.kernels import SPEED_LEVEL, KernelArtifact
from runtime.cpu.launch import Launch, OutOfRange
from runtime.layout import STRIDED, CannotLower, segmented_rows_layout, stride_class
from runtime.llvm.jit import KernelPending, deferring, host_jit, vector_width

_lock = threading.Lock()
_compiled: dict[tuple, tuple] = {}  # (body text, strides) -> (address, artifact)
_requests: dict[tuple, tuple] = {}  # the same keys -> _request() of a kernel compiling
_INTERPRETED = object()  # a layout the kernel cannot run: the interpreter does


class PointwiseNode(FusedKernel):
    """One fused node as native code, compiled per pattern of operand strides."""

    def __init__(self, node: Node):
        super().__init__(node)
        body = self.body
        full, _ = self.space
        self.fallback_reason = ""  # set when a call's layout made it run interpreted
        self.calls_while_compiling = 0  # interpreted while a worker compiled the kernel
        self.artifacts: list[KernelArtifact] = []  # one per compiled stride pattern
        self._layouts: dict = {}  # operand strides -> how to launch (shapes are the graph's)
        self._outputs = tuple(empty_spec(v.type.shape, v.type.dtype) for v in body.outputs)
        self._in_order = self._positions == list(range(len(body.inputs)))
        self._one_operand = len(self.operands) == 1  # its layout key spelled out
        self._empty = 0 in full

    # running ------------------------------------------------------------------------
    def __call__(self, inputs) -> list:
        operands = inputs if self._in_order else self.operands_of(inputs)
        launch = self._layouts.get((operands[0]._stride,) if self._one_operand else
                                   tuple([t._stride for t in operands]))
        if launch is None:  # a layout not seen yet
            return self._plan_and_run(inputs, operands)
        if launch is _INTERPRETED:  # one the kernel cannot run
            return self._interpreted(inputs)
        try:
            return launch(operands)
        except OutOfRange:  # an index the kernel refused: the op's own error
            return self._interpreted(inputs)

    @functools.cached_property
    def _interpreted(self):
        """The kernel's body through the reference interpreter, prepared once."""
        return interpreter.prepare_checked(self.body)

    def _plan_and_run(self, inputs, operands) -> list:
        """Plan the launch for the operands' strides, keep it and run it; the interpreter
        runs what the kernel cannot (no elements, a layout the generator does not take)."""
        if self._empty:  # nothing to compute: eager's answer (zeros, NaN or its error)
            return self._interpreted(inputs)
        outs = [np.empty(shape, dtype.np) for shape, _, _, dtype in self._outputs]
        key = tuple([t._stride for t in operands])
        try:
            with deferring():
                launch = self._plan_launch([t._np() for t in operands] + outs)
        except CannotLower as e:  # this memory layout, for this and later calls
            self.fallback_reason = str(e)
            self._layouts[key] = _INTERPRETED
            return self._interpreted(inputs)
        except KernelPending:  # compiling in the background: planned again next call
            self.calls_while_compiling += 1
            return self._interpreted(inputs)
        self._layouts[key] = launch
        try:
            return launch(operands)
        except OutOfRange:
            return self._interpreted(inputs)

    def _plan_launch(self, arrays):
        """How to call the kernel for operands laid out like `arrays`."""
        full, reduced = self.space
        gathers, placed = self.gathers_over(arrays)
        # reduced dims that do not merge (BatchNorm's N, H and W where H * W is short
        # and split_reductions leaves them together) are walked as segments of a row
        rows, segments, inner, offsets, strides, outer = segmented_rows_layout(
            arrays, self.shapes, full, reduced, self.squeezed, placed)
        classes = tuple(stride_class(s) for s in strides)
        columns = ()
        if self.kind == "reduction" and STRIDED in classes and len(outer) == 1 and \
                segments == 1 and all(s in (0, 1) for s in outer[0]):
            columns = tuple(outer[0])  # rows adjacent in memory: put them in the lanes
        address = self._function(classes, columns, tuple(gathers), segments)
        return Launch(address, offsets, strides, rows, inner, self.kind == "elementwise",
                      self._outputs, empty_cpu, Tensor.data_ptr, checked=bool(gathers),
                      segments=segments)

    def _function(self, classes, columns=(), gathers=(), segments=1):
        key = (str(self.body), classes, columns, tuple(g.stride for g in gathers), segments)
        with _lock:
            hit = _compiled.get(key)
            if hit is None:
                # a kernel handed to a background worker keeps its name and spec until
                # it is back (KernelPending leaves it in _requests)
                request = _requests.get(key)
                if request is None:
                    request = _requests[key] = self._request(classes, columns, gathers,
                                                             segments)
                hit = _compiled[key] = self._compile(*request)
                del _requests[key]
            if hit[1] not in self.artifacts:
                self.artifacts.append(hit[1])
        return hit[0]

    def _request(self, classes, columns=(), gathers=(), segments=1) -> tuple:
        """(name, cache key, artifact) of the kernel for one layout."""
        width = vector_width()
        # the body's text and the layout decide every field of spec (operands, nodes,
        # rows are read from the body): the kernel cache's key without building IR. The
        # name is made of it too, so that a kernel's key does not depend on which kernels
        # this process compiled before it
        key = repr((self.kind, str(self.body), classes, columns, width,
                    [(g.source, g.index, g.stride, g.size, g.wraps) for g in gathers])) + \
            (f" segments={segments}" if segments > 1 else "")
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        name = f"kiln_{'columns' if columns else self.kind}_{digest}"
        spec = K.KernelSpec(name, self.kind, self.operands, self.nodes,
                            tuple(self.body.outputs), self.scalars, self.row_values, classes,
                            columns, gathers, segments)
        return name, f"{name} {key}", KernelArtifact(spec, width, host_jit())

    @staticmethod
    def _compile(name: str, key: str, artifact: KernelArtifact):
        address = artifact._jit.load_spec(name, key, artifact.fill, [name], SPEED_LEVEL)[name]
        if debug.level() >= 3:
            debug.banner(f"LLVM IR: {name}", artifact.llvm_ir, at_level=3)
        if debug.level() >= 4:
            debug.banner(f"assembly: {name}", artifact.assembly, at_level=4)
        return address, artifact
