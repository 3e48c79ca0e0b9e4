"""Layer norm (native_layer_norm and its backward) and softmax's and log_softmax's
backward (_softmax_backward_data, _log_softmax_backward_data), as PyTorch's ops of those
names: numpy kernels, computed in float64 or float32 (the 16-bit floats in float32,
rounded once), and from reduction.NATIVE_ELEMENTS elements, computed the same way, the
compiler's generated row kernels (eager/backends/native/rows.py: layer norm forward one
kernel over rows giving out, mean and rstd; backward one over rows for grad_input and
one over columns for grad_weight and grad_bias; softmax backward one over rows).

The threshold is reduction.NATIVE_ELEMENTS's, measured again for these ops (one thread,
a layout seen before, float32 rows with weight and bias, a loaded machine): at 256
elements native_layer_norm 9.2 us against numpy's 17.3, its backward (all three
gradients) 14.0 against 21.1, _softmax_backward_data 5.4 against 7.2; at 8192 10.3 /
24.8, 15.8 / 34.3, 6.4 / 11.0. A layout's first native call plans it (~0.2 ms), so small
tensors, whose layouts vary the most, stay with numpy.

Each op's formula is written once, on its record below (`@NATIVE_LAYER_NORM.decomposition`):
numpy runs it here (NUMPY, on the rows as a (batch, n) array), the row kernels are built
from it (eager/backends/row_ops.py), CUDA's kernels and autograd run it in eager ops."""
from __future__ import annotations

from functools import partial

import numpy as np

from eager import dispatcher
from eager.dispatcher import DispatchKey
from eager.kernels._common import (compute_np, computed, meta_from_rule, operand, register,
                                   result, type_word)
from eager.kernels import reduction
from eager.kernels.decomposed import EAGER, NUMPY
from ir.records import RECORDS, declare
from eager.shapes import wrap_dim
from eager.tensor import meta_empty, ops
from ir import dtypes
from ir.ops import Op

_NATIVE_DTYPES = frozenset({dtypes.float32, dtypes.float64, *dtypes.HALF})


def _rows(*tensors):
    """eager_rows where the native kernels take these tensors (floats, all of one dtype,
    from NATIVE_ELEMENTS elements), else None."""
    first = tensors[0]
    if first.numel() < reduction.NATIVE_ELEMENTS or first.dtype not in _NATIVE_DTYPES or \
            any(t is not None and t.dtype is not first.dtype for t in tensors):
        return None
    return reduction.native_rows()


# layer norm ---------------------------------------------------------------------------
def _normalized(input, normalized_shape, weight, bias) -> tuple[int, tuple]:
    """(the first normalised dim, normalized_shape as a tuple), with PyTorch's errors."""
    shape = tuple(normalized_shape)
    if not shape:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., "
                           "containing at least one element, but got normalized_shape = []")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t._shape) != shape:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but "
                               f"got {name} of shape {list(t._shape)} and normalized_shape = "
                               f"{list(shape)}")
    axis = input.dim() - len(shape)
    if axis < 0 or tuple(input._shape[axis:]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in shape)}], but got input of "
                           f"size{list(input._shape)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"LayerNormKernelImpl\" not implemented for "
                           f"'{type_word(input.dtype)}'")
    return axis, shape


def native_layer_norm_rule(input, normalized_shape, weight, bias, eps):
    """The output in the input's type; the mean and rstd too, but float32 beside a 16-bit
    input with float32 parameters (PyTorch's mixed kernel keeps them so, and its backward
    reads them)."""
    axis, shape = _normalized(input, normalized_shape, weight, bias)
    stats = tuple(input._shape[:axis]) + (1,) * len(shape)
    mixed = input.dtype in dtypes.HALF and any(
        t is not None and t.dtype is dtypes.float32 for t in (weight, bias))
    kept = dtypes.float32 if mixed else input.dtype
    return (tuple(input._shape), input.dtype), (stats, kept), (stats, kept)


def native_layer_norm_cpu(input, normalized_shape, weight, bias, eps):
    (full, dt), (stats, kept), _ = native_layer_norm_rule(input, normalized_shape, weight, bias,
                                                         eps)
    axis = input.dim() - len(normalized_shape)
    rows = _rows(input, weight, bias) if kept is dt else None  # (their statistics are dt's)
    if rows is not None:
        tensors = [t for t in (input, weight, bias) if t is not None]
        out = rows.run_graph(("layer_norm", weight is not None, bias is not None),
                             partial(rows.row_ops.layer_norm_graph, dt, weight is not None,
                                     bias is not None), tensors,
                             (_count(full, axis), float(eps)), tuple(range(axis, len(full))),
                             ((full, False), (stats, False), (stats, False)))
        if out is not None:
            return tuple(out)
    ct, n = compute_np(dt), _count(full, axis)
    x = operand(input, ct).reshape(_count(full[:axis], 0), n)
    w, b = (None if t is None else operand(t, ct).reshape(-1) for t in (weight, bias))
    with np.errstate(all="ignore"):  # a row of no elements: NaN statistics, no warning
        out, mean, rstd = NATIVE_LAYER_NORM.formula(NUMPY, x, (n,), w, b, eps)
    return result(out.reshape(full), dt), result(mean.reshape(stats), kept), \
        result(rstd.reshape(stats), kept)


def _count(shape, axis: int) -> int:
    n = 1
    for s in shape[axis:]:
        n *= s
    return n


register(Op.NATIVE_LAYER_NORM, native_layer_norm_cpu, meta_from_rule(native_layer_norm_rule))


def native_layer_norm_backward_rule(grad_out, input, normalized_shape, mean, rstd, weight,
                                    bias, output_mask):
    _normalized(input, normalized_shape, weight, bias)
    shape = tuple(normalized_shape)
    grad_weight = (shape, weight.dtype) if output_mask[1] and weight is not None else None
    grad_bias = (shape, bias.dtype if bias is not None else input.dtype) \
        if output_mask[2] else None
    return ((tuple(input._shape), input.dtype) if output_mask[0] else None), grad_weight, \
        grad_bias


def _backward_meta(*args, **kwargs):
    return tuple(None if r is None else meta_empty(*r)
                 for r in native_layer_norm_backward_rule(*args, **kwargs))


def native_layer_norm_backward_cpu(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                   output_mask):
    want = native_layer_norm_backward_rule(grad_out, input, normalized_shape, mean, rstd,
                                           weight, bias, output_mask)
    full, dt = tuple(input._shape), input.dtype
    axis = input.dim() - len(normalized_shape)
    n = _count(full, axis)
    outs = _native_layer_norm_backward(grad_out, input, mean, rstd, weight, want, axis, n)
    if all(o is not None or w is None for o, w in zip(outs, want)):
        return tuple(outs)
    ct, batch = compute_np(dt), _count(full[:axis], 0)  # numpy: what the kernels did not
    g = operand(grad_out, ct).reshape(batch, n)
    x = operand(input, ct).reshape(batch, n)
    m, r = operand(mean, ct).reshape(batch, 1), operand(rstd, ct).reshape(batch, 1)
    w = None if weight is None else operand(weight, ct).reshape(-1)
    mask = [wanted is not None and o is None for wanted, o in zip(want, outs)]
    with np.errstate(all="ignore"):
        got = NATIVE_LAYER_NORM_BACKWARD.formula(NUMPY, g, x, (n,), m, r, w, None, mask)
    for i, value in enumerate(got):
        if mask[i]:
            outs[i] = result(value.reshape(want[i][0]), want[i][1])
    return tuple(outs)


def _native_layer_norm_backward(grad_out, input, mean, rstd, weight, want, axis: int,
                                n: int) -> list:
    """[grad_input, grad_weight, grad_bias] from generated kernels where they run them
    (None where numpy must): grad_input over rows, grad_weight and grad_bias over columns
    (the batch dims summed, which must merge into one)."""
    outs = [None, None, None]
    rows = _rows(input, grad_out, mean, rstd, weight)
    if rows is None:
        return outs
    full, dt = tuple(input._shape), input.dtype
    if want[0] is not None:
        tensors = [grad_out, input, mean, rstd] + ([weight] if weight is not None else [])
        graph = partial(rows.row_ops.layer_norm_backward_graph, dt, weight is not None)
        got = rows.run_graph(("layer_norm_backward", weight is not None), graph, tensors, (n,),
                             tuple(range(axis, len(full))), ((full, False),))
        outs[0] = None if got is None else got[0]
    sums = [want[1] is not None, want[2] is not None and want[2][1] is dt]
    if any(sums) and axis > 0:  # (no batch dims: numpy's sums are the values)
        tensors = [grad_out] + ([input, mean, rstd] if sums[0] else [])
        graph = partial(rows.row_ops.layer_norm_parameters_graph, dt, *sums)
        got = rows.run_graph(("layer_norm_parameters", *sums), graph, tensors, (),
                             tuple(range(axis)), ((full[axis:], True),) * sum(sums))
        if got is not None:
            got = list(got)
            for i in (1, 2):
                if sums[i - 1]:
                    outs[i] = got.pop(0)
    return outs


register(Op.NATIVE_LAYER_NORM_BACKWARD, native_layer_norm_backward_cpu, _backward_meta)


NATIVE_LAYER_NORM = declare(Op.NATIVE_LAYER_NORM, function=True)


@NATIVE_LAYER_NORM.decomposition
def _(F, input, normalized_shape, weight, bias, eps):
    """(out, mean, rstd): the mean, then the mean of squares about it (two passes, as var:
    no cancellation), then the output; one row kernel, fused or eager's."""
    dims = list(range(F.ndim(input) - len(normalized_shape), F.ndim(input)))
    mean = F.mean(input, dims, True)
    centred = input - mean
    rstd = F.rsqrt(F.mean(centred * centred, dims, True) + eps)
    out = centred * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


@NATIVE_LAYER_NORM.derivative("NativeLayerNormBackward0", "input weight bias",
                              save="input normalized_shape weight bias eps result1 result2")
def _(ctx, g):
    mask = [ctx.needs_input_grad(0), ctx.needs_input_grad(1), ctx.needs_input_grad(2)]
    x, shape = ctx.input, ctx.normalized_shape
    formula = NATIVE_LAYER_NORM_BACKWARD.formula
    if dispatcher.tls.grad_enabled:  # create_graph: in ops differentiable again, the
        # statistics as functions of x (the forward's formula computed again)
        _, mean, rstd = NATIVE_LAYER_NORM.formula(EAGER, x, shape, None, None, ctx.eps)
        return formula(EAGER, g, x, shape, mean, rstd, ctx.weight, ctx.bias, mask)
    if dispatcher.key_active(DispatchKey.Tracer):  # a compiled backward: ops that give
        # every output (the graph has no value for an undefined one), fused as before;
        # 16-bit floats in float32, each gradient rounded once, as the kernel rounds them
        wide = [None if t is None else computed(t)
                for t in (g, x, ctx.result1, ctx.result2, ctx.weight, ctx.bias)]
        grads = formula(EAGER, wide[0], wide[1], shape, *wide[2:], mask)
        return tuple(None if d is None else d.to(t.dtype)
                     for d, t in zip(grads, (x, ctx.weight, ctx.bias)))
    return ops.native_layer_norm_backward(g, x, shape, ctx.result1, ctx.result2, ctx.weight,
                                          ctx.bias, mask)


# differentiated where it must be through its formula in eager ops (above), so it has no
# rule of its own
NATIVE_LAYER_NORM_BACKWARD = declare(Op.NATIVE_LAYER_NORM_BACKWARD, differentiable=False)


@NATIVE_LAYER_NORM_BACKWARD.decomposition
def _(F, grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    """With xhat = (x - mean) * rstd and gw = grad * weight: grad_input rstd * (gw -
    mean(gw) - xhat * mean(gw * xhat)) over the rows; grad_weight the sum of grad * xhat
    and grad_bias of grad over the batch dims. A gradient not asked for is None."""
    axis = F.ndim(input) - len(normalized_shape)
    dims, batch = list(range(axis, F.ndim(input))), list(range(axis))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0] or output_mask[1] and weight is not None:
        xhat = (input - mean) * rstd
    if output_mask[0]:
        gw = grad_out if weight is None else grad_out * weight
        a, b = F.mean(gw, dims, True), F.mean(gw * xhat, dims, True)
        grad_input = (gw - a - xhat * b) * rstd
    if output_mask[1] and weight is not None:
        grad_weight = grad_out * xhat
        grad_weight = F.sum(grad_weight, batch) if batch else grad_weight
    if output_mask[2]:
        grad_bias = F.sum(grad_out, batch) if batch else grad_out
    return grad_input, grad_weight, grad_bias


# softmax and log_softmax backward -----------------------------------------------------
def _softmax_backward_rule(name):
    def rule(grad_output, output, dim, input_dtype):
        wrap_dim(dim, output.dim())
        if tuple(grad_output._shape) != tuple(output._shape):
            raise RuntimeError(f"{name}: grad_output of size {list(grad_output._shape)} and "
                               f"output of size {list(output._shape)} differ")
        return tuple(output._shape), input_dtype
    rule.__name__ = name
    return rule


def _softmax_backward_kernel(op, rule, log: bool):
    graph_name = "log_softmax_backward" if log else "softmax_backward"

    def kernel(grad_output, output, dim, input_dtype):
        shape, dt = rule(grad_output, output, dim, input_dtype)
        rows = _rows(grad_output, output) if output.dim() and dt is output.dtype else None
        if rows is not None:
            graph = partial(rows.row_ops.softmax_backward_graph, dt, log)
            out = rows.run_graph(graph_name, graph, [grad_output, output], (),
                                 (wrap_dim(dim, output.dim()),), ((shape, False),))
            if out is not None:
                return out[0]
        ct = compute_np(output.dtype)
        g, y = operand(grad_output, ct), operand(output, ct)
        if output.dim():
            d = wrap_dim(dim, output.dim())
        else:  # one element: a row of one
            g, y, d = g.reshape(1), y.reshape(1), 0
        with np.errstate(all="ignore"):
            out = RECORDS[op].formula(NUMPY, g, y, d, dt)
        return result(np.asarray(out).reshape(shape), dt)
    kernel.__name__ = rule.__name__ + "_cpu"
    return kernel


for _op, _name, _log in ((Op.SOFTMAX_BACKWARD_DATA, "_softmax_backward_data", False),
                         (Op.LOG_SOFTMAX_BACKWARD_DATA, "_log_softmax_backward_data", True)):
    _rule = _softmax_backward_rule(_name)
    register(_op, _softmax_backward_kernel(_op, _rule, _log), meta_from_rule(_rule))


def _as(t, dt):
    return t if t.dtype is dt else ops._to_copy(t, dtype=dt)


SOFTMAX_BACKWARD_DATA = declare(Op.SOFTMAX_BACKWARD_DATA)


@SOFTMAX_BACKWARD_DATA.decomposition
def _(F, grad_output, output, dim, input_dtype):
    total = F.sum(grad_output * output, [dim], True)
    return F.cast(output * (grad_output - total), input_dtype)


@SOFTMAX_BACKWARD_DATA.derivative("SoftmaxBackwardDataBackward0", "grad_output output",
                                  save="grad_output output dim")
def _(ctx, gg):
    g, y = ctx.grad_output, ctx.output
    gg = _as(gg, y.dtype)
    grad_g = ops._softmax_backward_data(gg, y, ctx.dim, g.dtype)
    grad_y = gg * (g - ops.sum(g * y, [ctx.dim], True)) - g * ops.sum(gg * y, [ctx.dim], True)
    return grad_g, grad_y


LOG_SOFTMAX_BACKWARD_DATA = declare(Op.LOG_SOFTMAX_BACKWARD_DATA)


@LOG_SOFTMAX_BACKWARD_DATA.decomposition
def _(F, grad_output, output, dim, input_dtype):
    total = F.sum(grad_output, [dim], True)
    return F.cast(grad_output - F.exp(output) * total, input_dtype)


@LOG_SOFTMAX_BACKWARD_DATA.derivative("LogSoftmaxBackwardDataBackward0", "grad_output output",
                                      save="grad_output output dim")
def _(ctx, gg):
    g, y = ctx.grad_output, ctx.output
    gg = _as(gg, y.dtype)
    e = ops.exp(y)
    grad_g = gg - ops.sum(gg * e, [ctx.dim], True)
    grad_y = -gg * e * ops.sum(g, [ctx.dim], True)
    return _as(grad_g, g.dtype), grad_y
