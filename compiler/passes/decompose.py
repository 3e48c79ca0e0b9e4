"""Decompositions to a small core, so fusion sees primitives: softmax -> amax, sub, exp,
sum, div; log_softmax; their backward (_softmax_backward_data, ...) -> sum, mul, sub;
native_layer_norm -> mean, var, rsqrt and elementwise ops; mean -> sum / n; var;
addmm -> mm + bias; gelu_backward -> elementwise primitives. gelu and silu stay whole:
elementwise kernels emit them as they are, and a GEMM's store takes them as its
activation. (A compiled backward captures NativeLayerNormBackward0's formula in ops,
eager/kernels/normalization.py; native_layer_norm_backward decomposes when called itself.)

Each decomposition is written in eager ops and captured into a graph (the same capture
compile() uses), then inlined. Only float32 and float64 ops decompose: eager computes
float16 ops in float32 and rounds once, which a chain of float16 ops would not match.
Ops over empty tensors stay whole: their own rules say what an empty softmax or var is;
so do ops over symbolic sizes (a mean's count is a size's value, and the kernels run
symbolic graphs node by node anyway).
"""
from __future__ import annotations

import math

from compiler.capture import trace_to_graph
from compiler.passes.rewrite import Rewriter
from eager.kernels.normalization import layer_norm_backward_ops
from eager.tensor import ops
from ir.graph import Graph
from ir.ops import Op

_SQRT1_2 = 1.0 / math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _reduced_count(x, dim) -> int:
    if x.dim() == 0:  # one element, whichever dim (0 or -1) names it
        return 1
    dims = range(x.dim()) if dim is None or dim == () or dim == [] else \
        ([dim] if isinstance(dim, int) else dim)
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def softmax(x, dim, dtype=None):
    x = x if dtype is None else ops._to_copy(x, dtype=dtype)
    e = ops.exp(x - ops.amax(x, [dim], True))
    return e / ops.sum(e, [dim], True)


def log_softmax(x, dim, dtype=None):
    x = x if dtype is None else ops._to_copy(x, dtype=dtype)
    shifted = x - ops.amax(x, [dim], True)
    return shifted - ops.log(ops.sum(ops.exp(shifted), [dim], True))


def mean(x, dim=None, keepdim=False, dtype=None):
    x = x if dtype is None else ops._to_copy(x, dtype=dtype)
    return ops.sum(x, dim, keepdim) / _reduced_count(x, dim)


def var(x, dim=None, *, correction=None, keepdim=False):
    n = _reduced_count(x, dim)
    correction = 1 if correction is None else correction
    centred = x - mean(x, dim, True)
    return ops.sum(centred * centred, dim, keepdim) / max(n - correction, 0)


def native_layer_norm(x, normalized_shape, weight, bias, eps):
    """The ops layer_norm was written in before it was one op, which fusion makes one
    row kernel (mean and rstd among its outputs where backward saves them)."""
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    m = mean(x, dims, True)
    rstd = ops.rsqrt(var(x, dims, correction=0, keepdim=True) + eps)
    out = (x - m) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, m, rstd


def native_layer_norm_backward(grad, x, normalized_shape, mean, rstd, weight, bias,
                               output_mask):
    """As NativeLayerNormBackward0 computes under capture (a graph's node has every output
    defined: capture breaks at an undefined one)."""
    return layer_norm_backward_ops(grad, x, normalized_shape, mean, rstd, weight, output_mask)


def softmax_backward(grad, out, dim, input_dtype):
    return _cast(out * (grad - ops.sum(grad * out, [dim], True)), input_dtype)


def log_softmax_backward(grad, out, dim, input_dtype):
    return _cast(grad - ops.exp(out) * ops.sum(grad, [dim], True), input_dtype)


def _cast(t, dtype):
    return t if t.dtype is dtype else ops._to_copy(t, dtype=dtype)


def addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    product = ops.mm(mat1, mat2)
    product = product if alpha == 1 else product * alpha
    if beta == 0:
        return product
    return product + (bias if beta == 1 else bias * beta)


def gelu_backward(grad, x, *, approximate="none"):
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * _SQRT_2_OVER_PI
        t = ops.tanh(inner)
        d_inner = (x * x * (3 * 0.044715) + 1.0) * _SQRT_2_OVER_PI
        return grad * ((t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * d_inner)
    cdf = (ops.erf(x * _SQRT1_2) + 1.0) * 0.5
    pdf = ops.exp(x * x * -0.5) * _INV_SQRT_2PI
    return grad * (cdf + x * pdf)


DECOMPOSITIONS = {Op.SOFTMAX: softmax, Op.LOG_SOFTMAX: log_softmax, Op.MEAN: mean,
                  Op.VAR: var, Op.ADDMM: addmm, Op.GELU_BACKWARD: gelu_backward,
                  Op.NATIVE_LAYER_NORM: native_layer_norm,
                  Op.NATIVE_LAYER_NORM_BACKWARD: native_layer_norm_backward,
                  Op.SOFTMAX_BACKWARD_DATA: softmax_backward,
                  Op.LOG_SOFTMAX_BACKWARD_DATA: log_softmax_backward}
_FLOATS = ("float32", "float64")


def decompose(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        fn = DECOMPOSITIONS.get(node.op)
        values = node.input_values() + list(node.outputs)
        if fn is None or any(v.type.dtype.name not in _FLOATS for v in values) or \
                any(0 in v.type.shape or not v.type.is_static for v in values):
            rw.copy(node)
            continue
        inputs = [rw.map(i) for i in node.inputs]
        # (decomposed in turn: a decomposition may be written in ops that decompose)
        sub = decompose(trace_to_graph(fn, node.op.schema, inputs, node.attrs, rw.scalars))
        given = [v for i in inputs for v in (i if isinstance(i, tuple) else (i,))]
        env = dict(zip(sub.inputs, [v for v in given if v is not None]))  # (no None weight)
        for n in sub.nodes:
            outs = rw.emit(n.op, [_sub_map(env, i) for i in n.inputs], n.attrs,
                           [v.type for v in n.outputs])
            env.update(zip(n.outputs, outs))
        for old, new in zip(node.outputs, sub.outputs):
            rw.alias(old, env[new])
    return rw.finish()


def _sub_map(env, i):
    if isinstance(i, tuple):
        return tuple(env[v] for v in i)
    return None if i is None else env[i]
