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
from compiler.backends.native.views import LeadingViews
from compiler.passes.fusion import row_space
from eager.tensor import Tensor, empty_cpu, empty_spec
from ir.graph import Graph, Node
from ir.ops import VIEW, Op
from runtime import debugging as debug
from runtime.cpu import kernel_spec as K
from runtime.cpu.kernels import SPEED_LEVEL, KernelArtifact
from runtime.cpu.launch import Launch, OutOfRange
from runtime.layout import STRIDED, NotNative, rows_layout, stride_class
from runtime.llvm.jit import KernelPending, deferring

GATHERING = frozenset({Op.INDEX, Op.INDEX_SELECT, Op.EMBEDDING, Op.GATHER})
"""Ops an elementwise kernel runs as gathered loads (codegen/gather.py)."""

_lock = threading.Lock()
_compiled: dict[tuple, tuple] = {}  # (body text, strides) -> (address, artifact)
_requests: dict[tuple, tuple] = {}  # the same keys -> _request() of a kernel compiling
_INTERPRETED = object()  # a layout the kernel cannot run: the interpreter does


def node_problem(n: Node) -> str | None:
    """Why the pointwise code generators cannot emit node `n` inside a kernel, or None."""
    if n.op not in K.native_ops() and n.op not in K.REDUCE_OPS and n.op not in GATHERING:
        return f"no native code for {n.op.qualified_name}"
    for v in list(n.input_values()) + list(n.outputs):
        if v.type.dtype.name not in K.SUPPORTED:
            return f"{v.type.dtype.name} is not supported natively"
        if not v.type.is_static:
            return "symbolic sizes are not supported natively yet"
    # float math computes in the result's type (2 ** x is float); reductions in their
    # input's
    typed = n.input_values()[0] if n.op in K.REDUCE_OPS else n.outputs[0]
    if (n.op in K.float_only_ops() or n.op in K.REDUCE_OPS) \
            and not typed.type.dtype.is_floating_point:
        return f"{n.op.qualified_name} on integers"
    return None


class PointwiseNode:
    """One fused node as native code, compiled per pattern of operand strides."""

    def __init__(self, node: Node):
        body = node.attr["body"]
        self.kind = node.attr["kind"]
        if self.kind not in ("elementwise", "reduction"):
            raise NotNative(f"{self.kind} kernels are not generated yet")
        self.body = body
        self.views = [n for n in body.nodes if n.op in VIEW]
        self.scalars = tuple((n.outputs[0], n.attr["value"]) for n in body.nodes
                             if n.op is Op.SCALAR)
        self.nodes = tuple(n for n in body.nodes if n.op not in VIEW and n.op is not Op.SCALAR)
        view_outputs = {v for n in self.views for v in n.outputs}
        computed = {v for n in self.nodes for v in n.outputs}
        for n in self.views:
            if any(v in computed for v in n.input_values()):
                raise NotNative("a view of a computed value inside the kernel")
        operands = []
        for n in self.nodes:
            for v in n.input_values():
                if (v in body.inputs or v in view_outputs) and v not in operands:
                    operands.append(v)
        self.operands = tuple(operands)
        self._check(computed)
        self.gathers = tuple(self._gathered(n, computed) for n in self.nodes
                             if n.op in GATHERING)
        self.space = self._space()
        self.row_values = self._row_values()
        full, reduced = self.space
        self.squeezed = tuple(v in self.row_values and len(v.type.shape) < len(full)
                              for v in self.operands + tuple(self.body.outputs))
        self.fallback_reason = ""  # set when a call's layout made it run interpreted
        self.calls_while_compiling = 0  # interpreted while a worker compiled the kernel
        self.artifacts: list[KernelArtifact] = []  # one per compiled stride pattern
        self._layouts: dict = {}  # operand strides -> how to launch (shapes are the graph's)
        self._outputs = tuple(empty_spec(v.type.shape, v.type.dtype) for v in body.outputs)
        self._positions = None if self.views else [body.inputs.index(v) for v in self.operands]
        self._in_order = self._positions == list(range(len(body.inputs)))
        self._one_operand = len(self.operands) == 1  # its layout key spelled out
        self._empty = 0 in full

    def _row_values(self) -> frozenset:
        """Values with one element per row: reductions' results, the ops over only such
        values, and the operands that only those ops read (when all reduced dims have
        size 1 a row is one element, and a full-shaped value counts as full)."""
        if self.kind != "reduction":
            return frozenset()
        full, reduced = self.space
        scalars = {v for v, _ in self.scalars}
        candidates = {v for v in self.operands
                      if _is_kept(v.type.shape, full, reduced) and tuple(v.type.shape) != full}
        rows: set = set()
        for n in self.nodes:
            ins = [v for v in n.input_values() if v not in scalars]
            if n.op in K.REDUCE_OPS or (ins and all(v in rows or v in candidates
                                                   for v in ins)):
                rows.add(n.outputs[0])
        users = self.body.users()
        for v in candidates:  # (views are applied before the kernel: they are not readers)
            per_row = [n.outputs[0] in rows for n in users[v] if n.op not in VIEW]
            if all(per_row):
                rows.add(v)
            elif any(per_row):
                raise NotNative("an operand read both per row and per element")
        return frozenset(rows | scalars)

    def _check(self, computed) -> None:
        for n in self.nodes:
            problem = node_problem(n)
            if problem is not None:
                raise NotNative(problem)
        if any(v not in computed and v not in self.operands for v in self.body.outputs):
            raise NotNative("an output that is not computed by the kernel")

    def _gathered(self, n: Node, computed) -> tuple:
        """(node, source operand, index operand, indexed dim, whether negative indices
        count from the end) of a gathering node; its source and index are read by it
        alone, from memory (a source is laid out with its indexed dim stretched)."""
        source, index = n.inputs[0], n.inputs[1]
        index = index[0] if isinstance(index, tuple) else index
        if self.kind != "elementwise":
            raise NotNative(f"{n.op.qualified_name} inside a row kernel")
        if source in computed or index in computed:
            raise NotNative(f"{n.op.qualified_name} of a value computed in the kernel")
        if source == index or sum(v in (source, index) for m in self.nodes
                                  for v in m.input_values()) != 2:
            raise NotNative(f"{n.op.qualified_name}'s operands are read by other ops too")
        rank = len(source.type.shape)
        if rank == 0 or (n.op is Op.INDEX and len(n.inputs[1]) != 1):
            raise NotNative(f"{n.op.qualified_name} of this form is not generated")
        dim = 0 if n.op is Op.EMBEDDING else n.attr["dim"] % rank
        if source.type.shape[dim] == 0:
            raise NotNative("an index into an empty dim")  # the interpreter raises
        return n, self.operands.index(source), self.operands.index(index), dim, \
            n.op is Op.INDEX

    def _space(self):
        """(full shape, reduced dims) of the iteration."""
        shapes = [v.type.shape for v in self.body.outputs]
        if self.kind == "elementwise":
            if len(set(shapes)) != 1:
                raise NotNative("outputs of different shapes")
            return tuple(shapes[0]), frozenset()
        reductions = [n for n in self.nodes if n.op in K.REDUCE_OPS]
        space = row_space(reductions[0])
        if any(row_space(n) != space for n in reductions):
            raise NotNative("reductions over different rows")
        return space

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

    def operands_of(self, inputs) -> list:
        """The tensors the kernel reads: some of its inputs, or views of them (the
        kernel's leading views, applied eagerly)."""
        if self._positions is not None:
            return [inputs[i] for i in self._positions]
        return self._leading_views(inputs)

    @functools.cached_property
    def _leading_views(self) -> LeadingViews:
        return LeadingViews(Graph(self.body.inputs, tuple(self.views), self.operands, "views"))

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
        except NotNative as e:  # this memory layout, for this and later calls
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
        rows, inner, offsets, strides, outer = rows_layout(arrays, self.shapes, full, reduced,
                                                           self.squeezed, placed)
        classes = tuple(stride_class(s) for s in strides)
        columns = ()
        if self.kind == "reduction" and STRIDED in classes and len(outer) == 1 and \
                all(s in (0, 1) for s in outer[0]):
            columns = tuple(outer[0])  # rows adjacent in memory: put them in the lanes
        address = self._function(classes, columns, tuple(gathers))
        return Launch(address, offsets, strides, rows, inner, self.kind == "elementwise",
                      self._outputs, empty_cpu, Tensor.data_ptr, checked=bool(gathers))

    @property
    def shapes(self) -> list:
        """The shapes of the kernel's operands, inputs then outputs."""
        return [tuple(v.type.shape) for v in self.operands + tuple(self.body.outputs)]

    def gathers_over(self, arrays) -> tuple:
        """(gathers, placed) for operands laid out like `arrays`: each gathering node as a
        codegen Gather, and its source's and index's strides over the iteration space."""
        placed, gathers = {}, []
        for n, source, index, dim, wraps in self.gathers:
            placed.update(zip((source, index), K.strides_over_result(
                n.op, arrays[source], arrays[index], dim)))
            a = arrays[source]
            gathers.append(K.Gather(n.outputs[0], source, index, a.strides[dim] // a.itemsize,
                                    a.shape[dim], wraps))
        return tuple(gathers), placed

    def _function(self, classes, columns=(), gathers=()):
        key = (str(self.body), classes, columns, tuple(g.stride for g in gathers))
        with _lock:
            hit = _compiled.get(key)
            if hit is None:
                # a kernel handed to a background worker keeps its name and spec until
                # it is back (KernelPending leaves it in _requests)
                request = _requests.get(key)
                if request is None:
                    request = _requests[key] = self._request(classes, columns, gathers)
                hit = _compiled[key] = self._compile(*request)
                del _requests[key]
            if hit[1] not in self.artifacts:
                self.artifacts.append(hit[1])
        return hit[0]

    def _request(self, classes, columns=(), gathers=()) -> tuple:
        """(name, cache key, artifact) of the kernel for one layout."""
        from runtime.llvm.jit import host_jit, vector_width
        width = vector_width()
        # the body's text and the layout decide every field of spec (operands, nodes,
        # rows are read from the body): the kernel cache's key without building IR. The
        # name is made of it too, so that a kernel's key does not depend on which kernels
        # this process compiled before it
        key = repr((self.kind, str(self.body), classes, columns, width,
                    [(g.source, g.index, g.stride, g.size, g.wraps) for g in gathers]))
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        name = f"kiln_{'columns' if columns else self.kind}_{digest}"
        spec = K.KernelSpec(name, self.kind, self.operands, self.nodes,
                            tuple(self.body.outputs), self.scalars, self.row_values, classes,
                            columns, gathers)
        return name, f"{name} {key}", KernelArtifact(spec, width, host_jit())

    @staticmethod
    def _compile(name: str, key: str, artifact: KernelArtifact):
        address = artifact._jit.load_spec(name, key, artifact.fill, [name], SPEED_LEVEL)[name]
        if debug.level() >= 3:
            debug.banner(f"LLVM IR: {name}", artifact.llvm_ir, at_level=3)
        if debug.level() >= 4:
            debug.banner(f"assembly: {name}", artifact.assembly, at_level=4)
        return address, artifact


def _is_kept(shape, full, reduced) -> bool:
    """Whether a value of `shape` holds one element per row (a reduction's result, with
    or without its reduced dims)."""
    if not reduced:
        return False
    kept = tuple(1 if i in reduced else s for i, s in enumerate(full))
    squeezed = tuple(s for i, s in enumerate(full) if i not in reduced)
    return tuple(shape) in (kept, squeezed)


