"""Algebraic simplification: a table of rules keyed by op, each looking at one node (and
the producers of its inputs) and naming the value that can stand for its result.

Every rule keeps results bit-identical to eager execution:
- x * 1, 1 * x, x / 1, x + 0, x - 0 -> x (only when x already has the result's type,
  so no broadcast or promotion is lost; -0.0 + 0 = 0.0, so `+ 0` is dropped only for
  integer and boolean x);
- neg(neg(x)) -> x; t(t(x)) -> x; transpose(transpose(x, a, b), a, b) -> x;
  permute(permute(x, p), q) -> one permute (or x);
- view / expand / _to_copy to the type x already has -> x; view(view(x)) -> one view
  when x is a freshly computed (contiguous) value; a view that drops the kept dims of a
  sum, amax or amin with keepdim=True -> that reduction with keepdim=False;
- x / c -> x * (1 / c) only when c is a power of two, where the reciprocal is exact;
- op(x, number) -> the op its record names for that number (records.Pointwise's
  number_forms: pow(x, 0.5) -> sqrt(x), pow(x, -0.5) -> rsqrt(x)) for float32 and
  float64 results, as eager's kernel runs it (sqrt(-inf) is NaN, C's pow gives inf);
- an elementwise op reads x instead of expand(x) where its other operands alone give
  the result's shape: broadcasting repeats x as the expand did (x keeps at least one
  dim, so type promotion is unchanged). A row kernel then holds a reduction's result
  as one value per row instead of a view of a value it computes (which it cannot run).
- op(view(x)) -> view(op(x)) for an elementwise op of one tensor where x is freshly
  computed (contiguous): the op then reads its producer's shape, so a matrix product's
  epilogue takes it (a convolution's activation after its output is reshaped);
One rule is exact up to the sign of zero:
- the sum of two slice_backward over adjacent ranges of one dim -> slice_backward of
  their cat (their cat alone where the ranges cover the dim): the gradient of `split`
  or of slices such as q, k, v of one product, written once instead of padded with
  zeros and added. Eager adds zeros, turning a -0.0 into +0.0; the cat keeps -0.0, as
  PyTorch's SplitBackward0 (a cat) does.
Not done, because results would change: x - x -> 0 and x * 0 -> 0 (NaN and inf inputs),
division by other constants (rounding).
"""
from __future__ import annotations

import math

from compiler.passes.rewrite import Rewriter
from ir.records import pointwise_ops
from eager.kernels.shape import slice_bounds
from eager.shapes import broadcast_shapes, wrap_dim
from ir.graph import Graph, TensorType, Value
from ir.ops import VIEW, Op


def _is_number(rw: Rewriter, v, number) -> bool:
    return v in rw.scalars and rw.scalars[v] == number and not isinstance(rw.scalars[v], bool)


def _identity_operand(rw, node, ins, number, exact_zero=False):
    """The operand x of `x op number` (or `number op x` when commutative) whose type is
    already the result's."""
    out = node.outputs[0].type
    candidates = [(0, 1)] + ([(1, 0)] if node.op in (Op.MUL, Op.ADD) else [])
    for keep, const in candidates:
        x, c = ins[keep], ins[const]
        if x is not None and _is_number(rw, c, number) and x.type == out:
            if exact_zero and x.type.dtype.is_floating_point:
                continue  # -0.0 + 0 is +0.0: not the identity for floats
            return x
    return None


def _mul(rw, node, ins):
    return _identity_operand(rw, node, ins, 1)


def _add_sub(rw, node, ins):
    return _identity_operand(rw, node, ins, 0, exact_zero=True)


def _div(rw, node, ins):
    x, c = ins
    if _is_number(rw, c, 1) and x.type == node.outputs[0].type:
        return x
    value = rw.scalars.get(c)
    if isinstance(value, float) and value != 0 and math.isfinite(value) and \
            math.frexp(abs(value))[0] == 0.5 and node.outputs[0].type.dtype.is_floating_point:
        (r,) = rw.emit(Op.SCALAR, [], {"value": 1.0 / value})
        return rw.emit(Op.MUL, [x, r], {}, [node.outputs[0].type])[0]
    return None


def _number_form(rw, node, ins):
    out = node.outputs[0].type
    for position, number, form, kinds in pointwise_ops()[node.op].number_forms:
        if out.dtype.name in kinds and _is_number(rw, ins[position], number):
            (x,) = [v for k, v in enumerate(ins) if k != position]
            if isinstance(form, Op):
                return rw.emit(form, [x], {}, [out])[0]

            def apply(op, *operands):
                values = [rw.emit(Op.SCALAR, [], {"value": v})[0]
                          if isinstance(v, (int, float)) else v for v in operands]
                return rw.emit(op, values, {}, [out])[0]
            return form(apply, x)
    return None


def _involution(rw, node, ins):
    """neg(neg(x)), t(t(x)), transpose(transpose(x, a, b), a, b) -> x."""
    p = rw.producers.get(ins[0])
    if p is None or p[0] is not node.op:
        return None
    if node.op is Op.TRANSPOSE:
        rank = max(len(ins[0].type.shape), 1)
        mine = {node.attr["dim0"] % rank, node.attr["dim1"] % rank}
        theirs = {dict(p[2])["dim0"] % rank, dict(p[2])["dim1"] % rank}
        return p[1][0] if mine == theirs else None
    return p[1][0]


def _permute(rw, node, ins):
    p = rw.producers.get(ins[0])
    dims = dict(node.attrs)["dims"]
    n = len(dims)
    if list(d % n for d in dims) == list(range(n)):
        return ins[0]
    if p is not None and p[0] is Op.PERMUTE:
        inner = [d % n for d in dict(p[2])["dims"]]
        combined = tuple(inner[d % n] for d in dims)
        if list(combined) == list(range(n)):
            return p[1][0]
        return rw.emit(Op.PERMUTE, [p[1][0]], {"dims": combined}, [node.outputs[0].type])[0]
    return None


def _same_type(rw, node, ins):
    x = ins[0]
    if x.type == node.outputs[0].type:
        if node.op is Op.TO_COPY and dict(node.attrs).get("device") not in (None, "cpu"):
            return None
        return x
    if node.op is Op.VIEW:
        p = rw.producers.get(x)
        if p is not None and p[0] is Op.VIEW:
            base = rw.producers.get(p[1][0])
            if base is not None and base[0] not in VIEW:  # fresh, contiguous memory
                return rw.emit(Op.VIEW, [p[1][0]], node.attrs, [node.outputs[0].type])[0]
    return None


def _broadcast_expands(rw, node, ins):
    """op(expand(x), y) -> op(x, y) where y gives the result's shape without the expand."""
    shape = tuple(node.outputs[0].type.shape)
    reads, changed = list(ins), False
    for k, v in enumerate(ins):
        p = rw.producers.get(v) if isinstance(v, Value) else None
        if p is None or p[0] is not Op.EXPAND or not p[1][0].type.shape:
            continue
        trial = reads[:k] + [p[1][0]] + reads[k + 1:]
        if broadcast_shapes(*(tuple(w.type.shape) for w in trial
                              if isinstance(w, Value))) == shape:
            reads, changed = trial, True
    if not changed:
        return None
    return rw.emit(node.op, reads, node.attrs, [node.outputs[0].type])[0]


def _slice_grad(rw, v):
    """(grad, input sizes, dim, start, end) of a value made by slice_backward with step 1."""
    p = rw.producers.get(v)
    if p is None or p[0] is not Op.SLICE_BACKWARD:
        return None
    a = dict(p[2])
    sizes = tuple(a["input_sizes"])
    dim = wrap_dim(a["dim"], len(sizes))
    start, end, step = slice_bounds(sizes[dim], a["start"], a["end"], a["step"])
    return None if step != 1 else (p[1][0], sizes, dim, start, end)


def _cat_parts(rw, v, dim) -> list:
    """What a cat of `v` along `dim` reads: v, or the parts of the cat that made it."""
    p = rw.producers.get(v)
    if p is not None and p[0] is Op.CAT and dict(p[2])["dim"] == dim:
        return list(p[1][0])
    return [v]


def _join_slice_grads(rw, node, ins):
    """slice_backward(a, r1) + slice_backward(b, r2), r1 just before r2 -> one of cat(a, b)."""
    a, b = (_slice_grad(rw, v) for v in ins)
    out = node.outputs[0].type
    if a is None or b is None or node.attr["alpha"] != 1 or a[1:3] != b[1:3] or \
            ins[0].type != out or ins[1].type != out:
        return None
    if b[4] == a[3]:
        a, b = b, a
    if a[4] != b[3]:
        return None
    _, sizes, dim, start, end = a[0], a[1], a[2], a[3], b[4]
    parts = _cat_parts(rw, a[0], dim) + _cat_parts(rw, b[0], dim)
    (joined,) = rw.emit(Op.CAT, [tuple(parts)], {"dim": dim})
    if (start, end) == (0, sizes[dim]):
        return joined
    return rw.emit(Op.SLICE_BACKWARD, [joined], {"input_sizes": sizes, "dim": dim,
                                                  "start": start, "end": end, "step": 1},
                   [out])[0]


def _through_view(rw, node, ins):
    """op(view(x)) -> view(op(x)) for an op of one tensor (numbers aside) where x is a
    freshly computed value: an elementwise op commutes with a reshape of contiguous
    memory, and the op then reads the value in its producer's shape, so a product's
    epilogue can take it (a convolution's activation after its output is reshaped)."""
    tensors = [k for k, v in enumerate(ins) if isinstance(v, Value) and v not in rw.scalars]
    if len(tensors) != 1:
        return None
    p = rw.producers.get(ins[tensors[0]])
    if p is None or p[0] is not Op.VIEW:
        return None
    x = p[1][0]
    base = rw.producers.get(x)
    if base is None or base[0] in VIEW or x.type.shape == ins[tensors[0]].type.shape:
        return None
    out = node.outputs[0].type
    reads = list(ins)
    reads[tensors[0]] = x
    (inner,) = rw.emit(node.op, reads, node.attrs, [TensorType(x.type.shape, out.dtype,
                                                               out.device)])
    return rw.emit(Op.VIEW, [inner], p[2], [out])[0]


def _view_of_kept_dims(rw, node, ins):
    """view(reduce(x, dims, keepdim=True)) -> reduce(x, dims, keepdim=False) where the
    view only drops the kept dims (a bias's gradient: the sum over the batch, then its
    view to the bias's shape): the same values, which the reduction's kernel then
    writes in the view's shape, so no view runs after it."""
    p = rw.producers.get(ins[0])
    if p is None or p[0] not in (Op.SUM, Op.AMAX, Op.AMIN) or not dict(p[2])["keepdim"]:
        return None
    attrs = dict(p[2])
    shape = tuple(p[1][0].type.shape)
    dims = attrs["dim"]
    dims = range(len(shape)) if dims is None or dims == () else \
        ((dims,) if isinstance(dims, int) else dims)
    reduced = {d % max(len(shape), 1) for d in dims}
    out = node.outputs[0].type
    if tuple(out.shape) != tuple(n for d, n in enumerate(shape) if d not in reduced):
        return None
    attrs["keepdim"] = False
    return rw.emit(p[0], p[1], attrs, [out])[0]


def _first_of(*rules):
    def rule(rw, node, ins):
        for r in rules:
            replacement = r(rw, node, ins)
            if replacement is not None:
                return replacement
        return None
    return rule


RULES = {Op.MUL: _mul, Op.ADD: _first_of(_join_slice_grads, _add_sub), Op.SUB: _add_sub, Op.DIV: _div,
         Op.NEG: _involution, Op.T: _involution, Op.TRANSPOSE: _involution,
         Op.PERMUTE: _permute, Op.VIEW: _first_of(_same_type, _view_of_kept_dims),
         Op.EXPAND: _same_type,
         Op.TO_COPY: _same_type}
RULES.update({op: _number_form for op, p in pointwise_ops().items() if p.number_forms})
RULES.update({op: _first_of(RULES[op], _broadcast_expands, _through_view) if op in RULES
              else _first_of(_broadcast_expands, _through_view) for op in pointwise_ops()})


class _Tracking(Rewriter):
    """A rewriter that remembers what made each new value (rules look one node back)."""

    def __init__(self, graph):
        super().__init__(graph)
        self.producers: dict[Value, tuple] = {}

    def emit(self, op, inputs, attrs, types=None):
        outs = super().emit(op, inputs, attrs, types)
        attrs = tuple(attrs.items()) if isinstance(attrs, dict) else tuple(attrs)
        for v in outs:
            self.producers[v] = (op, list(inputs), attrs)
        return outs


def simplify(graph: Graph) -> Graph:
    rw = _Tracking(graph)
    for node in graph.nodes:
        rule = RULES.get(node.op)
        if rule is not None and len(node.outputs) == 1:
            replacement = rule(rw, node, [rw.map(i) for i in node.inputs])
            if replacement is not None:
                rw.alias(node.outputs[0], replacement)
                continue
        rw.copy(node)
    return rw.finish()
