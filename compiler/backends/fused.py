"""What a fused elementwise or row node computes, read from its body the same way by
every backend (the CPU's runner, backends/native/pointwise.py, and CUDA's,
backends/cuda): its operands (inputs, or views of them applied before the kernel), the
ops in order, its iteration space (full shape, reduced dims), the values with one
element per row, gathered loads; and whether a kernel can hold a node at all
(`node_problem`, fusion's question). A body no generator takes raises CannotLower."""
from __future__ import annotations

import functools

from compiler.backends.gemm_plan import takes_product
from compiler.backends.views import LeadingViews
from compiler.passes.fusion import row_space
from ir import dtypes
from ir.graph import Graph, Node
from ir.ops import VIEW, Op
from ir.records import RECORDS
from runtime.cpu import kernel_spec as K
from runtime.layout import CannotLower

GATHERING = frozenset({Op.INDEX, Op.INDEX_SELECT, Op.EMBEDDING, Op.GATHER})
"""Ops an elementwise kernel runs as gathered loads (codegen/gather.py)."""

def node_problem(n: Node) -> str | None:
    """Why the pointwise code generators cannot emit node `n` inside a kernel, or None."""
    if n.op not in K.native_ops() and n.op not in K.REDUCE_OPS and n.op not in GATHERING:
        return f"no native code for {n.op.qualified_name}"
    elementwise = n.op in K.native_ops()
    record = RECORDS.get(n.op)
    if record is not None and record.pointwise is not None and record.pointwise.own_half:
        half = {v.type.dtype for v in n.outputs} & set(dtypes.HALF)
        if half:  # (the kernels compute in float32 and round once)
            return (f"{n.op.qualified_name} rounds each step in {half.pop().name}, as "
                    f"eager's kernel and PyTorch's do")
    for v in list(n.input_values()) + list(n.outputs):
        name = v.type.dtype.name
        if name not in K.SUPPORTED and not (elementwise and name in K.NARROW):
            return f"{name} is not supported natively" + (" here" if name in K.NARROW
                                                          else "")
        if not v.type.is_static:
            return "symbolic sizes are not supported natively yet"
    # float math computes in the result's type (2 ** x is float); reductions in their
    # input's
    typed = n.input_values()[0] if n.op in K.REDUCE_OPS else n.outputs[0]
    if (n.op in K.float_only_ops() or n.op in K.REDUCE_OPS) \
            and not typed.type.dtype.is_floating_point:
        return f"{n.op.qualified_name} on integers"
    return None


def emits(node: Node) -> bool:
    """Whether a kernel can hold `node` (a CPU kernel; CUDA's take a little less): fusion
    asks, so a node no code generator takes stays out of kernels (and runs interpreted)
    while its neighbours still fuse."""
    if node.op in (Op.MM, Op.BMM):
        return takes_product(node)
    return node_problem(node) is None


class FusedKernel:
    """A fused elementwise or reduction node's body, read once (see the module
    docstring)."""

    def __init__(self, node: Node):
        body = node.attr["body"]
        self.kind = node.attr["kind"]
        if self.kind not in ("elementwise", "reduction"):
            raise CannotLower(f"{self.kind} kernels are not generated yet")
        self.body = body
        self.views = [n for n in body.nodes if n.op in VIEW]
        self.scalars = tuple((n.outputs[0], n.attr["value"]) for n in body.nodes
                             if n.op is Op.SCALAR)
        self.nodes = tuple(n for n in body.nodes if n.op not in VIEW and n.op is not Op.SCALAR)
        view_outputs = {v for n in self.views for v in n.outputs}
        computed = {v for n in self.nodes for v in n.outputs}
        for n in self.views:
            if any(v in computed for v in n.input_values()):
                raise CannotLower("a view of a computed value inside the kernel")
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
        full = self.space[0]
        dropped = self._read_without_reduced_dims()
        self.row_values = self._row_values(dropped)
        self.squeezed = tuple(v in dropped for v in self.operands) + tuple(
            v in self.row_values and len(v.type.shape) < len(full) for v in self.body.outputs)
        # where the operands are among the inputs (None: some are views of them)
        self._positions = None if self.views else [body.inputs.index(v) for v in self.operands]

    def _read_without_reduced_dims(self) -> frozenset:
        """The operands that ops with the reduced dims dropped read (`x.sum(-1) * w`):
        broadcasting lines them up with the dims that are not reduced (the result's),
        not with all the dims of the rows, so they are laid out over the rows as such
        (layout.broadcast_strides' `squeezed`). One that ops with all the dims read too
        would be two layouts of one operand: that takes a shape of ones."""
        if self.kind != "reduction":
            return frozenset()
        rank = len(self.space[0])
        users = self.body.users()
        found = set()
        for v in self.operands:
            readers = [n for n in users[v] if n.op not in VIEW]
            short = [n.op not in K.REDUCE_OPS and len(n.outputs[0].type.shape) < rank
                     for n in readers]
            if any(short):
                if not all(short) and any(s != 1 for s in v.type.shape):
                    raise CannotLower("an operand read with the reduced dims and without them")
                found.add(v)
        return frozenset(found)

    def _row_values(self, dropped: frozenset) -> frozenset:
        """Values with one element per row: reductions' results, the ops over only such
        values, and the operands that only those ops read (`dropped`: those read without
        the reduced dims; when all reduced dims have size 1 a row is one element, and a
        full-shaped value counts as full). An op of a shape that is neither the rows'
        nor a row's raises CannotLower: no layout over the rows holds its result."""
        if self.kind != "reduction":
            return frozenset()
        full, reduced = self.space
        scalars = {v for v, _ in self.scalars}
        candidates = {v for v in self.operands if v in dropped or (
            _is_kept(v.type.shape, full, reduced) and tuple(v.type.shape) != full)}
        rows: set = set()
        for n in self.nodes:  # (a row's value times a row-long operand is a full value)
            shape = tuple(n.outputs[0].type.shape)
            if n.op not in K.REDUCE_OPS and shape != full and \
                    not _is_kept(shape, full, reduced):
                raise CannotLower(f"a value of shape {shape} in rows of {full}")
            ins = [v for v in n.input_values() if v not in scalars]
            if n.op in K.REDUCE_OPS or (
                    ins and all(v in rows or v in candidates for v in ins) and
                    _is_kept(shape, full, reduced)):
                rows.add(n.outputs[0])
            elif len(shape) < len(full):
                raise CannotLower(f"a value of shape {shape} that is not one per row")
        users = self.body.users()
        for v in candidates:  # (views are applied before the kernel: they are not readers)
            per_row = [n.outputs[0] in rows for n in users[v] if n.op not in VIEW]
            if all(per_row):
                rows.add(v)
            elif any(per_row):
                raise CannotLower("an operand read both per row and per element")
        return frozenset(rows | scalars)

    def _check(self, computed) -> None:
        for n in self.nodes:
            problem = node_problem(n)
            if problem is not None:
                raise CannotLower(problem)
        if any(v not in computed and v not in self.operands for v in self.body.outputs):
            raise CannotLower("an output that is not computed by the kernel")

    def _gathered(self, n: Node, computed) -> tuple:
        """(node, source operand, index operand, indexed dim, whether negative indices
        count from the end) of a gathering node; its source and index are read by it
        alone, from memory (a source is laid out with its indexed dim stretched)."""
        source, index = n.inputs[0], n.inputs[1]
        index = index[0] if isinstance(index, tuple) else index
        if self.kind != "elementwise":
            raise CannotLower(f"{n.op.qualified_name} inside a row kernel")
        if source in computed or index in computed:
            raise CannotLower(f"{n.op.qualified_name} of a value computed in the kernel")
        if source == index or sum(v in (source, index) for m in self.nodes
                                  for v in m.input_values()) != 2:
            raise CannotLower(f"{n.op.qualified_name}'s operands are read by other ops too")
        rank = len(source.type.shape)
        if rank == 0 or (n.op is Op.INDEX and len(n.inputs[1]) != 1):
            raise CannotLower(f"{n.op.qualified_name} of this form is not generated")
        dim = 0 if n.op is Op.EMBEDDING else n.attr["dim"] % rank
        if source.type.shape[dim] == 0:
            raise CannotLower("an index into an empty dim")  # the interpreter raises
        return n, self.operands.index(source), self.operands.index(index), dim, \
            n.op is Op.INDEX

    def _space(self):
        """(full shape, reduced dims) of the iteration."""
        shapes = [v.type.shape for v in self.body.outputs]
        if self.kind == "elementwise":
            if len(set(shapes)) != 1:
                raise CannotLower("outputs of different shapes")
            return tuple(shapes[0]), frozenset()
        reductions = [n for n in self.nodes if n.op in K.REDUCE_OPS]
        space = row_space(reductions[0])
        if any(row_space(n) != space for n in reductions):
            raise CannotLower("reductions over different rows")
        return space

    def operands_of(self, inputs) -> list:
        """The tensors the kernel reads: some of its inputs, or views of them (the
        kernel's leading views, applied eagerly)."""
        if self._positions is not None:
            return [inputs[i] for i in self._positions]
        return self._leading_views(inputs)

    @functools.cached_property
    def _leading_views(self) -> LeadingViews:
        return LeadingViews(Graph(self.body.inputs, tuple(self.views), self.operands, "views"))

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

def _is_kept(shape, full, reduced) -> bool:
    """Whether a value of `shape` holds one element per row (a reduction's result, with
    or without its reduced dims)."""
    if not reduced:
        return False
    kept = tuple(1 if i in reduced else s for i, s in enumerate(full))
    squeezed = tuple(s for i, s in enumerate(full) if i not in reduced)
    return tuple(shape) in (kept, squeezed)
