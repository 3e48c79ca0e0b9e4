"""Derivative rules, one per differentiable op (our derivatives.yaml).

    @derivative(Op.MM, "MmBackward0", inputs="self mat2", save="self mat2")
    def _(ctx, g):
        return ops.mm(g, ops.t(ctx.mat2)), ops.mm(ops.t(ctx.self), g)

`inputs` names the differentiable arguments; the formula returns one gradient (or None)
for each, in order (a Tensor[] argument contributes one per element). `save` names what
backward needs: arguments, `result` (the output), `result1` (a second output), or
`<arg>_sizes` / `<arg>_dtype` / `<arg>_device` when only that fact is needed. Formulas
are written in eager ops, so backward is itself a run of ordinary ops: it can be
differentiated again (create_graph=True) and traced by the compiler.

Where one kiln op stands for several PyTorch overloads (`x.sum()` and `x.sum(1)`), the
node takes the name PyTorch gives the overload: `overloads` maps such a name to a test of
the bound arguments. In-place ops use their out-of-place twin's rule (`INPLACE_TWIN`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from eager.factories import arange, zeros, zeros_like
from eager.shapes import reduce_dims
from eager.tensor import ops
from ir.ops import Op


@dataclass(frozen=True)
class Derivative:
    op: Op
    name: str
    inputs: tuple[str, ...]
    save: tuple[str, ...]
    formula: Callable
    overloads: tuple[tuple[str, Callable[[dict], bool]], ...] = ()


DERIVATIVES: dict[Op, Derivative] = {}

NOT_DIFFERENTIABLE = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.LOGICAL_AND,
                                Op.ARGMAX, Op.ARGMIN, Op.DETACH, Op.NONZERO})
"""Ops whose outputs never carry a gradient (integer or boolean results, detach)."""

INPLACE_TWIN = {Op.ADD_: Op.ADD, Op.SUB_: Op.SUB, Op.MUL_: Op.MUL, Op.DIV_: Op.DIV,
                Op.CLAMP_: Op.CLAMP, Op.INDEX_PUT_: Op.INDEX_PUT}
"""In-place ops differentiated by their out-of-place twin's rule."""


def derivative(op: Op, name: str, inputs: str, save: str = "",
               overloads: dict[str, Callable[[dict], bool]] | None = None):
    def register(formula):
        DERIVATIVES[op] = Derivative(op, name, tuple(inputs.split()), tuple(save.split()),
                                     formula, tuple((overloads or {}).items()))
        return formula
    return register


def rule_for(op: Op) -> Derivative:
    """The rule that differentiates `op` (for an in-place op, perhaps its twin's)."""
    return DERIVATIVES[INPLACE_TWIN.get(op, op)]


# helpers ------------------------------------------------------------------------------
def sum_to(g, shape):
    """Undo broadcasting: sum `g` down to `shape`."""
    shape = tuple(shape)
    if g is None or tuple(g._shape) == shape:
        return g
    lead = g.dim() - len(shape)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape)
                                if s == 1 and g._shape[lead + i] != 1]
    r = ops.sum(g, dims, True) if dims else g
    return ops.view(r, shape) if tuple(r._shape) != shape else r


def expand_reduced(g, sizes, dim, keepdim):
    """Broadcast a reduction's gradient back over the reduced dims."""
    if not keepdim:
        for d in reduce_dims(dim, len(sizes)):
            g = ops.unsqueeze(g, d)
    return ops.expand(g, list(sizes))


def _numel_over(sizes, dim) -> int:
    n = 1
    for d in reduce_dims(dim, len(sizes)):
        n *= sizes[d]
    return n


# unary --------------------------------------------------------------------------------
@derivative(Op.NEG, "NegBackward0", "self")
def _(ctx, g):
    return ops.neg(g)


@derivative(Op.EXP, "ExpBackward0", "self", save="result")
def _(ctx, g):
    return g * ctx.result


@derivative(Op.LOG, "LogBackward0", "self", save="self")
def _(ctx, g):
    return g / ctx.self


@derivative(Op.SQRT, "SqrtBackward0", "self", save="result")
def _(ctx, g):
    return g / (2 * ctx.result)


@derivative(Op.RSQRT, "RsqrtBackward0", "self", save="result")
def _(ctx, g):
    r = ctx.result
    return g * r * r * r * -0.5


@derivative(Op.ABS, "AbsBackward0", "self", save="self")
def _(ctx, g):
    return g * ops.sign(ctx.self)


@derivative(Op.SIGN, "SignBackward0", "self")
def _(ctx, g):
    return g * 0


@derivative(Op.TANH, "TanhBackward0", "self", save="result")
def _(ctx, g):
    r = ctx.result
    return g * (1 - r * r)


@derivative(Op.SIGMOID, "SigmoidBackward0", "self", save="result")
def _(ctx, g):
    r = ctx.result
    return g * r * (1 - r)


@derivative(Op.RELU, "ReluBackward0", "self", save="result")
def _(ctx, g):
    return g * ops.gt(ctx.result, 0)


@derivative(Op.SILU, "SiluBackward0", "self", save="self")
def _(ctx, g):
    x = ctx.self
    s = ops.sigmoid(x)
    return g * s * (1 + x * (1 - s))


@derivative(Op.ERF, "ErfBackward0", "self", save="self")
def _(ctx, g):
    x = ctx.self
    return g * (2 / math.sqrt(math.pi)) * ops.exp(ops.neg(x * x))


@derivative(Op.GELU, "GeluBackward0", "self", save="self approximate")
def _(ctx, g):
    return ops.gelu_backward(g, ctx.self, approximate=ctx.approximate)


@derivative(Op.GELU_BACKWARD, "GeluBackwardBackward0", "grad_output self",
            save="grad_output self approximate")
def _(ctx, gg):
    x = ctx.self
    if ctx.approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        t = ops.tanh(k * (x + c * x * x * x))
        d_inner = k * (1 + 3 * c * x * x)
        second = (1 - t * t) * (d_inner - x * t * d_inner * d_inner + 0.5 * x * (6 * k * c * x))
    else:
        pdf = ops.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        second = pdf * (2 - x * x)
    return (ops.gelu_backward(gg, x, approximate=ctx.approximate),
            sum_to(gg * ctx.grad_output * second, x._shape))


@derivative(Op.CLAMP, "ClampBackward1", "self", save="self min max")
def _(ctx, g):
    x, mask = ctx.self, None
    if ctx.min is not None:
        mask = ops.ge(x, ctx.min)
    if ctx.max is not None:
        upper = ops.le(x, ctx.max)
        mask = upper if mask is None else ops.logical_and(mask, upper)
    return g * mask


# binary -------------------------------------------------------------------------------
@derivative(Op.ADD, "AddBackward0", "self other", save="self_sizes other_sizes alpha")
def _(ctx, g):
    return sum_to(g, ctx.self_sizes), sum_to(g if ctx.alpha == 1 else g * ctx.alpha,
                                             ctx.other_sizes)


@derivative(Op.SUB, "SubBackward0", "self other", save="self_sizes other_sizes alpha")
def _(ctx, g):
    return sum_to(g, ctx.self_sizes), sum_to(ops.neg(g) if ctx.alpha == 1 else g * -ctx.alpha,
                                             ctx.other_sizes)


@derivative(Op.MUL, "MulBackward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return (sum_to(g * b, a._shape) if ctx.needs_input_grad(0) else None,
            sum_to(g * a, b._shape) if ctx.needs_input_grad(1) else None)


@derivative(Op.DIV, "DivBackward0", "self other", save="self other")
def _(ctx, g):
    a, b = ctx.self, ctx.other
    return (sum_to(g / b, a._shape) if ctx.needs_input_grad(0) else None,
            sum_to(ops.neg(g) * a / (b * b), b._shape) if ctx.needs_input_grad(1) else None)


@derivative(Op.POW, "PowBackward1", "self exponent", save="self exponent result",
            overloads={"PowBackward0": lambda a: a["exponent"]._wrapped,
                       "PowBackward2": lambda a: a["self"]._wrapped})
def _(ctx, g):
    a, e = ctx.self, ctx.exponent
    grad_a = grad_e = None
    if ctx.needs_input_grad(0):
        grad_a = ops.where(ops.eq(e, 0), 0.0, g * e * ops.pow(a, e - 1))
        grad_a = sum_to(grad_a, a._shape)
    if ctx.needs_input_grad(1):
        safe = ops.where(ops.logical_and(ops.eq(a, 0), ops.ge(e, 0)), 1.0, a)
        grad_e = sum_to(g * ctx.result * ops.log(safe), e._shape)
    return grad_a, grad_e


def _extremum_pair(name, op, wins):
    @derivative(op, name, "self other", save="self other")
    def _(ctx, g):
        a, b = ctx.self, ctx.other
        tie = ops.eq(a, b)
        half = g * 0.5
        return (sum_to(ops.where(tie, half, g * wins(a, b)), a._shape),
                sum_to(ops.where(tie, half, g * wins(b, a)), b._shape))


_extremum_pair("MaximumBackward0", Op.MAXIMUM, ops.gt)
_extremum_pair("MinimumBackward0", Op.MINIMUM, ops.lt)


@derivative(Op.WHERE, "WhereBackward0", "self other", save="condition self_sizes other_sizes")
def _(ctx, g):
    c = ctx.condition
    return (sum_to(ops.where(c, g, 0.0), ctx.self_sizes),
            sum_to(ops.where(c, 0.0, g), ctx.other_sizes))


# reductions ---------------------------------------------------------------------------
@derivative(Op.SUM, "SumBackward1", "self", save="self_sizes dim keepdim",
            overloads={"SumBackward0": lambda a: a["dim"] is None})
def _(ctx, g):
    return expand_reduced(g, ctx.self_sizes, ctx.dim, ctx.keepdim)


@derivative(Op.MEAN, "MeanBackward1", "self", save="self_sizes dim keepdim",
            overloads={"MeanBackward0": lambda a: a["dim"] is None})
def _(ctx, g):
    n = _numel_over(ctx.self_sizes, ctx.dim)
    return expand_reduced(g, ctx.self_sizes, ctx.dim, ctx.keepdim) / n


def _amax_amin(name, op):
    @derivative(op, name, "self", save="self result dim keepdim")
    def _(ctx, g):
        x = ctx.self
        value = expand_reduced(ctx.result, x._shape, ctx.dim, ctx.keepdim)
        mask = ops.eq(x, value)
        count = ops.sum(mask, list(reduce_dims(ctx.dim, x.dim())), True)
        return expand_reduced(g, x._shape, ctx.dim, ctx.keepdim) * mask / count


_amax_amin("AmaxBackward0", Op.AMAX)
_amax_amin("AminBackward0", Op.AMIN)


def _value_selecting(name, op):
    @derivative(op, name, "self", save="self_sizes dim keepdim result1")
    def _(ctx, g):
        sizes, indices = ctx.self_sizes, ctx.result1
        if not sizes:
            return g
        d = reduce_dims(ctx.dim, len(sizes))[0]
        shape = [1] * len(sizes)
        shape[d] = sizes[d]
        position = ops.view(arange(sizes[d], device=g.device), shape)
        if not ctx.keepdim:
            indices = ops.unsqueeze(indices, d)
        hit = ops.eq(position, indices)
        return expand_reduced(g, sizes, ctx.dim, ctx.keepdim) * hit


_value_selecting("MaxBackward0", Op.MAX_DIM)
_value_selecting("MinBackward0", Op.MIN_DIM)


@derivative(Op.VAR, "VarBackward0", "self", save="self dim correction keepdim")
def _(ctx, g):
    x = ctx.self
    dof = _numel_over(x._shape, ctx.dim) - (1 if ctx.correction is None else ctx.correction)
    scale = 2.0 / dof if dof > 0 else math.inf  # forward divides by max(dof, 0) too
    centred = x - ops.mean(x, list(reduce_dims(ctx.dim, x.dim())), True)
    return expand_reduced(g, x._shape, ctx.dim, ctx.keepdim) * centred * scale


@derivative(Op.SOFTMAX, "SoftmaxBackward0", "self", save="result dim")
def _(ctx, g):
    y = ctx.result
    return y * (g - ops.sum(g * y, [ctx.dim], True))


@derivative(Op.LOG_SOFTMAX, "LogSoftmaxBackward0", "self", save="result dim")
def _(ctx, g):
    return g - ops.exp(ctx.result) * ops.sum(g, [ctx.dim], True)


# linear algebra -----------------------------------------------------------------------
@derivative(Op.DOT, "DotBackward0", "self tensor", save="self tensor")
def _(ctx, g):
    return g * ctx.tensor, g * ctx.self


@derivative(Op.MV, "MvBackward0", "self vec", save="self vec")
def _(ctx, g):
    return (ops.mm(ops.unsqueeze(g, 1), ops.unsqueeze(ctx.vec, 0)),
            ops.mv(ops.t(ctx.self), g))


@derivative(Op.MM, "MmBackward0", "self mat2", save="self mat2")
def _(ctx, g):
    return (ops.mm(g, ops.t(ctx.mat2)) if ctx.needs_input_grad(0) else None,
            ops.mm(ops.t(ctx.self), g) if ctx.needs_input_grad(1) else None)


@derivative(Op.BMM, "BmmBackward0", "self mat2", save="self mat2")
def _(ctx, g):
    return (ops.bmm(g, ops.transpose(ctx.mat2, 1, 2)) if ctx.needs_input_grad(0) else None,
            ops.bmm(ops.transpose(ctx.self, 1, 2), g) if ctx.needs_input_grad(1) else None)


@derivative(Op.ADDMM, "AddmmBackward0", "self mat1 mat2",
            save="self_sizes mat1 mat2 beta alpha")
def _(ctx, g):
    alpha, beta = ctx.alpha, ctx.beta
    grad_self = sum_to(g if beta == 1 else g * beta, ctx.self_sizes)
    grad_1 = grad_2 = None
    if ctx.needs_input_grad(1):
        grad_1 = ops.mm(g, ops.t(ctx.mat2))
        grad_1 = grad_1 if alpha == 1 else grad_1 * alpha
    if ctx.needs_input_grad(2):
        grad_2 = ops.mm(ops.t(ctx.mat1), g)
        grad_2 = grad_2 if alpha == 1 else grad_2 * alpha
    return grad_self, grad_1, grad_2


# views and copies ---------------------------------------------------------------------
@derivative(Op.VIEW, "ViewBackward0", "self", save="self_sizes")
def _(ctx, g):
    return ops.reshape(g, ctx.self_sizes)


@derivative(Op.TRANSPOSE, "TransposeBackward0", "self", save="dim0 dim1")
def _(ctx, g):
    return ops.transpose(g, ctx.dim0, ctx.dim1)


@derivative(Op.T, "TBackward0", "self")
def _(ctx, g):
    return ops.t(g)


@derivative(Op.PERMUTE, "PermuteBackward0", "self", save="dims")
def _(ctx, g):
    n = len(ctx.dims)
    dims = [d % n for d in ctx.dims]
    inverse = [0] * n
    for i, d in enumerate(dims):
        inverse[d] = i
    return ops.permute(g, inverse)


@derivative(Op.EXPAND, "ExpandBackward0", "self", save="self_sizes")
def _(ctx, g):
    return sum_to(g, ctx.self_sizes)


@derivative(Op.UNSQUEEZE, "UnsqueezeBackward0", "self", save="dim")
def _(ctx, g):
    return ops.squeeze(g, [ctx.dim])


@derivative(Op.SQUEEZE, "SqueezeBackward2", "self", save="self_sizes",
            overloads={"SqueezeBackward0": lambda a: a["dim"] is None,
                       "SqueezeBackward1": lambda a: isinstance(a["dim"], int)})
def _(ctx, g):
    return ops.reshape(g, ctx.self_sizes)


@derivative(Op.SELECT, "SelectBackward0", "self", save="self_sizes dim index")
def _(ctx, g):
    return ops.select_backward(g, ctx.self_sizes, ctx.dim, ctx.index)


@derivative(Op.SLICE, "SliceBackward0", "self", save="self_sizes dim start end step")
def _(ctx, g):
    return ops.slice_backward(g, ctx.self_sizes, ctx.dim, ctx.start, ctx.end, ctx.step)


@derivative(Op.SELECT_BACKWARD, "SelectBackwardBackward0", "grad_output", save="dim index")
def _(ctx, gg):
    return ops.select(gg, ctx.dim, ctx.index)


@derivative(Op.SLICE_BACKWARD, "SliceBackwardBackward0", "grad_output",
            save="dim start end step")
def _(ctx, gg):
    return ops.slice(gg, ctx.dim, ctx.start, ctx.end, ctx.step)


@derivative(Op.CLONE, "CloneBackward0", "self")
def _(ctx, g):
    return g


@derivative(Op.TO_COPY, "ToCopyBackward0", "self", save="self_dtype self_device")
def _(ctx, g):
    return ops._to_copy(g, dtype=ctx.self_dtype, device=ctx.self_device)


@derivative(Op.CAT, "CatBackward0", "tensors", save="tensors_sizes dim")
def _(ctx, g):
    sizes = ctx.tensors_sizes
    ref = next((s for s in sizes if not (len(s) == 1 and s[0] == 0)), sizes[0])
    d = ctx.dim % len(ref)
    grads, start = [], 0
    for s in sizes:
        if len(s) == 1 and s[0] == 0 and len(ref) != 1:
            grads.append(None)
            continue
        grads.append(ops.slice(g, d, start, start + s[d]))
        start += s[d]
    return tuple(grads)


@derivative(Op.INDEX_SELECT, "IndexSelectBackward0", "self", save="self_sizes dim index")
def _(ctx, g):
    base = zeros(ctx.self_sizes, dtype=g.dtype, device=g.device)
    return ops.index_add(base, ctx.dim, ctx.index, g)


@derivative(Op.INDEX_ADD, "IndexAddBackward0", "self source", save="dim index alpha")
def _(ctx, g):
    picked = ops.index_select(g, ctx.dim, ctx.index)
    return g, picked if ctx.alpha == 1 else picked * ctx.alpha


@derivative(Op.EMBEDDING, "EmbeddingBackward0", "weight", save="weight_sizes indices padding_idx")
def _(ctx, g):
    rows, width = ctx.weight_sizes
    flat_idx = ops.reshape(ctx.indices, [-1])
    flat_g = ops.reshape(g, [-1, width])
    if ctx.padding_idx is not None and ctx.padding_idx >= 0:
        flat_g = flat_g * ops.unsqueeze(ops.ne(flat_idx, ctx.padding_idx), 1)
    return ops.index_add(zeros([rows, width], dtype=g.dtype, device=g.device), 0, flat_idx,
                         flat_g)


@derivative(Op.INDEX, "IndexBackward0", "self", save="self_sizes dim indices")
def _(ctx, g):
    base = zeros(ctx.self_sizes, dtype=g.dtype, device=g.device)
    return ops.index_put(base, ctx.dim, ctx.indices, g, True)


@derivative(Op.INDEX_PUT, "IndexPutBackward0", "self values",
            save="dim indices values_sizes accumulate")
def _(ctx, g):
    grad_self = g if ctx.accumulate else ops.index_put(
        g, ctx.dim, ctx.indices, zeros((), dtype=g.dtype, device=g.device))
    return grad_self, sum_to(ops.index(g, ctx.dim, ctx.indices), ctx.values_sizes)


def _grown(g, sizes):
    """`g` in the leading corner of zeros of `sizes` (a scatter's src may be larger than its
    index: only the corner the index covers was read)."""
    for d, (n, size) in enumerate(zip(g._shape, sizes)):
        if n != size:
            g = ops.slice_backward(g, list(g._shape[:d]) + [size] + list(g._shape[d + 1:]), d,
                                   0, n, 1)
    return g


@derivative(Op.GATHER, "GatherBackward0", "self", save="self_sizes dim index")
def _(ctx, g):
    base = zeros(ctx.self_sizes, dtype=g.dtype, device=g.device)
    return ops.scatter_add(base, ctx.dim, ctx.index, g)


@derivative(Op.SCATTER, "ScatterBackward0", "self src", save="dim index src_sizes")
def _(ctx, g):
    cleared = ops.scatter(g, ctx.dim, ctx.index,
                          zeros(ctx.index.shape, dtype=g.dtype, device=g.device))
    return cleared, _grown(ops.gather(g, ctx.dim, ctx.index), ctx.src_sizes)


@derivative(Op.SCATTER_ADD, "ScatterAddBackward0", "self src", save="dim index src_sizes")
def _(ctx, g):
    return g, _grown(ops.gather(g, ctx.dim, ctx.index), ctx.src_sizes)


# in place, with no out-of-place twin --------------------------------------------------
@derivative(Op.ZERO_, "ZeroBackward0", "self")
def _(ctx, g):
    return zeros_like(g)


@derivative(Op.FILL_, "FillBackward2", "self")
def _(ctx, g):
    return zeros_like(g)


@derivative(Op.COPY_, "CopyBackwards", "self src", save="src_sizes src_dtype src_device")
def _(ctx, g):
    grad_src = None
    if ctx.needs_input_grad(1):
        grad_src = ops._to_copy(sum_to(g, ctx.src_sizes), dtype=ctx.src_dtype,
                                device=ctx.src_device)
    return zeros_like(g), grad_src
