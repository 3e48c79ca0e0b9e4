"""Reductions over dims (sum, mean, amax/amin, max/min with indices, argmax/argmin, var)
and the row normalisations softmax / log_softmax, computed stably in numpy.

mean, var, softmax and log_softmax are composite: each one's formula is written once, on
its record below (`@MEAN.decomposition`), and numpy runs that formula (NUMPY), as the
row kernels (eager/backends/row_ops.py) and the compiler's decompose pass (EAGER) do."""
from __future__ import annotations

import math

import numpy as np

from eager.factories import arange
from eager.kernels._common import (compute_np, load_native, meta_from_rule, operand, register, stored_in,
                                   result, scalar_value, type_word)
from eager.kernels.decomposed import NUMPY
from eager.kernels.gradients import expand_reduced, numel_over
from ir.records import RECORDS, declare
from eager.shapes import reduce_dims, reduced_shape, wrap_dim
from eager.tensor import ops
from ir import dtypes
from ir.ops import Op


NATIVE_ELEMENTS = 1024
"""From this many elements, float sum, mean, var, amax, amin, softmax and log_softmax (the
16-bit floats computed in float32) run as generated row kernels (eager/backends/native/
rows.py, loaded at the first such call; set KILN_EAGER_NATIVE=0 to keep numpy).
Measured, one thread, a layout seen before: at 1024 elements sum(-1) 6.3 us against
numpy's 7.0-8.3, softmax 4.9 against 11.9-14.3; at 256 even (a new layout costs a plan,
so small tensors stay with numpy)."""
_NATIVE_DTYPES = frozenset({dtypes.float32, dtypes.float64, *dtypes.HALF})
_native_rows = None  # that module once loaded, False where it cannot be


def native_rows():
    """eager/backends/native/rows.py, loaded at the first call; None where
    numpy must serve (KILN_EAGER_NATIVE=0, no llvmlite)."""
    global _native_rows
    if _native_rows is None:
        _native_rows = load_native(_import_rows)
    return _native_rows or None


def _import_rows():
    from eager.backends.native import rows as eager_rows
    return eager_rows


def _native(op: Op, self, dims: tuple, keepdim: bool, dtype=None, numbers: tuple = ()):
    """op over `dims` of self from a generated kernel, or None: numpy runs it (small,
    another dtype, dims that do not merge into one, a kernel still compiling)."""
    if self.numel() < NATIVE_ELEMENTS or self.dtype not in _NATIVE_DTYPES or \
            (dtype is not None and dtype is not self.dtype) or _native_rows is False:
        return None
    rows = _native_rows or native_rows()
    return None if rows is None else rows.run(op, self, dims, keepdim, numbers)


def sum_rule(self, dim=None, keepdim=False, *, dtype=None):
    dims = reduce_dims(dim, self.dim())
    out = dtype or (self.dtype if self.dtype.is_floating_point else dtypes.int64)
    return reduced_shape(self._shape, dims, keepdim), out


def sum_cpu(self, dim=None, keepdim=False, *, dtype=None):
    # the dims first (their errors), then the native path, which needs no more of the rule
    dims = reduce_dims(dim, self.dim())
    out = _native(Op.SUM, self, dims, keepdim, dtype)
    if out is not None:
        return out
    shape, dt = sum_rule(self, dim, keepdim, dtype=dtype)
    return result(np.sum(operand(self, compute_np(dt)), axis=dims, keepdims=keepdim), dt)


def mean_rule(self, dim=None, keepdim=False, *, dtype=None):
    dt = dtype or self.dtype
    if not dt.is_floating_point:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {type_word(dt)}")
    dims = reduce_dims(dim, self.dim())
    return reduced_shape(self._shape, dims, keepdim), dt


def _count(shape, dims) -> int:
    """How many elements each output of a reduction over `dims` combines."""
    n = 1
    for d in dims:
        n *= shape[d]
    return n


def mean_cpu(self, dim=None, keepdim=False, *, dtype=None):
    dims = reduce_dims(dim, self.dim())  # (the native path takes float tensors only)
    n = _count(self._shape, dims)
    out = _native(Op.MEAN, self, dims, keepdim, dtype, (n,))
    if out is not None:
        return out
    shape, dt = mean_rule(self, dim, keepdim, dtype=dtype)
    a = operand(self, compute_np(dt))
    with np.errstate(all="ignore"):  # an empty reduction is 0/0 = NaN, without a warning
        return result(MEAN.formula(NUMPY, a, dims, keepdim), dt)


register(Op.SUM, sum_cpu, meta_from_rule(sum_rule))
register(Op.MEAN, mean_cpu, meta_from_rule(mean_rule))


def _nonempty(name, shape, dims):
    for d in dims:
        if shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")
    if not dims and 0 in shape:
        raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() "
                         "== 0.")


def _extremum(op, name, np_fn):
    def rule(self, dim=(), keepdim=False):
        dims = reduce_dims(dim, self.dim())
        _nonempty(name, self._shape, dims)
        return reduced_shape(self._shape, dims, keepdim), self.dtype

    def kernel(self, dim=(), keepdim=False):
        dims = reduce_dims(dim, self.dim())
        if self.numel():  # (an empty dim raises in the rule)
            out = _native(op, self, dims, keepdim)
            if out is not None:
                return out
        shape, dt = rule(self, dim, keepdim)
        return result(np_fn(self._np(), axis=dims, keepdims=keepdim), dt)
    rule.__name__, kernel.__name__ = name, name + "_cpu"
    return rule, kernel


for _op, _name, _fn in ((Op.AMAX, "amax", np.max), (Op.AMIN, "amin", np.min)):
    _rule, _kernel = _extremum(_op, _name, _fn)
    register(_op, _kernel, meta_from_rule(_rule))


def _arg_rule(name):
    def rule(self, dim=None, keepdim=False):
        if name.startswith("arg") and self.dtype is dtypes.bool_:
            raise RuntimeError(f"{name}(): does not support bool input")
        if dim is None:
            if self.numel() == 0:
                raise IndexError(f"{name}(): Expected reduction dim to be specified for "
                                 "input.numel() == 0.")
            return ((1,) * self.dim() if keepdim else ()), dtypes.int64
        d = wrap_dim(dim, self.dim())
        dims = (d,) if self.dim() else ()
        _nonempty(name, self._shape, dims)
        return reduced_shape(self._shape, dims, keepdim), dtypes.int64
    rule.__name__ = name
    return rule


def _arg_kernel(rule, np_fn):
    def kernel(self, dim=None, keepdim=False):
        shape, dt = rule(self, dim, keepdim)
        a = self._np()
        if dim is None or a.ndim == 0:
            return result(np.asarray(np_fn(a.reshape(-1))).reshape(shape), dt)
        d = wrap_dim(dim, self.dim())
        return result(np_fn(a, axis=d, keepdims=keepdim), dt)
    kernel.__name__ = rule.__name__ + "_cpu"
    return kernel


_argmax_rule, _argmin_rule = _arg_rule("argmax"), _arg_rule("argmin")
register(Op.ARGMAX, _arg_kernel(_argmax_rule, np.argmax), meta_from_rule(_argmax_rule))
register(Op.ARGMIN, _arg_kernel(_argmin_rule, np.argmin), meta_from_rule(_argmin_rule))


def _max_min_dim(name, arg_np):
    arg_rule = _arg_rule(name)

    def rule(self, dim, keepdim=False):
        shape, _ = arg_rule(self, dim, keepdim)
        return (shape, self.dtype), (shape, dtypes.int64)

    def kernel(self, dim, keepdim=False):
        (shape, dt), _ = rule(self, dim, keepdim)
        a = self._np()
        if a.ndim == 0:
            return result(a.copy(), dt), result(np.zeros((), np.int64), dtypes.int64)
        d = wrap_dim(dim, a.ndim)
        idx = arg_np(a, axis=d, keepdims=True)
        values = np.take_along_axis(a, idx, axis=d)
        if not keepdim:
            idx, values = idx.squeeze(d), values.squeeze(d)
        return result(values, dt), result(idx, dtypes.int64)
    rule.__name__, kernel.__name__ = name, name + "_cpu"
    return rule, kernel


for _op, _name, _np_fn in ((Op.MAX_DIM, "max", np.argmax), (Op.MIN_DIM, "min", np.argmin)):
    _rule, _kernel = _max_min_dim(_name, _np_fn)
    register(_op, _kernel, meta_from_rule(_rule))


def var_rule(self, dim=None, *, correction=None, keepdim=False):
    if not self.dtype.is_floating_point:
        raise RuntimeError(f"std and var only support floating point and complex dtypes, "
                           f"got {self.dtype.name}")
    dims = reduce_dims(dim, self.dim())
    return reduced_shape(self._shape, dims, keepdim), self.dtype


def var_cpu(self, dim=None, *, correction=None, keepdim=False):
    shape, dt = var_rule(self, dim, correction=correction, keepdim=keepdim)
    dims = reduce_dims(dim, self.dim())
    ddof = 1 if correction is None else scalar_value(correction)
    n = _count(self._shape, dims)
    out = _native(Op.VAR, self, dims, keepdim, None, (n, max(n - ddof, 0)))
    if out is not None:
        return out
    a = operand(self, compute_np(dt))
    with np.errstate(all="ignore"):
        return result(VAR.formula(NUMPY, a, dims, correction=ddof, keepdim=keepdim), dt)


register(Op.VAR, var_cpu, meta_from_rule(var_rule))


def _softmax_rule(name):
    def rule(self, dim, dtype=None):
        wrap_dim(dim, self.dim())
        dt = dtype or self.dtype
        if not dt.is_floating_point:
            raise NotImplementedError(f"\"{name}_lastdim_kernel_impl\" not implemented for "
                                      f"'{type_word(dt)}'")
        return self._shape, dt
    rule.__name__ = name
    return rule


def _softmax_kernel(op, rule):
    def kernel(self, dim, dtype=None):
        shape, dt = rule(self, dim, dtype)
        if self.dim():
            out = _native(op, self, (wrap_dim(dim, self.dim()),), True, dtype)
            if out is not None:
                return out
        a = operand(self, compute_np(dt))
        if a.ndim == 0:
            a = a.reshape(1)
        d = wrap_dim(dim, self.dim())
        if a.size == 0:
            return result(a.reshape(shape), dt)
        stored = stored_in(op, d, self.dim(), dt)
        with np.errstate(all="ignore"):  # (a row whose max is +-inf: NaN, inf - inf)
            if stored is None:
                out = RECORDS[op].formula(NUMPY, a, d)
            else:
                out = RECORDS[op].formula(NUMPY, a, d, stored=stored)
        return result(out.reshape(shape), dt)
    kernel.__name__ = rule.__name__ + "_cpu"
    return kernel


for _op, _name in ((Op.SOFTMAX, "softmax"), (Op.LOG_SOFTMAX, "log_softmax")):
    _rule = _softmax_rule(_name)
    register(_op, _softmax_kernel(_op, _rule), meta_from_rule(_rule))


# records: names and derivatives -----------------------------------------------------
SUM = declare(Op.SUM, function=True, method=True)


@SUM.derivative("SumBackward1", "self", save="self_sizes dim keepdim",
                overloads={"SumBackward0": lambda a: a["dim"] is None})


def _(ctx, g):
    return expand_reduced(g, ctx.self_sizes, ctx.dim, ctx.keepdim)


MEAN = declare(Op.MEAN, function=True, method=True)


@MEAN.decomposition
def _(F, self, dim=None, keepdim=False, *, dtype=None):
    x = F.cast(self, dtype)
    return F.sum(x, dim, keepdim) / F.count(x, dim)


@MEAN.derivative("MeanBackward1", "self", save="self_sizes dim keepdim",
                 overloads={"MeanBackward0": lambda a: a["dim"] is None})


def _(ctx, g):
    n = numel_over(ctx.self_sizes, ctx.dim)  # divided before it is repeated: the same
    return expand_reduced(g / n, ctx.self_sizes, ctx.dim, ctx.keepdim)  # values, fewer ops


def _amax_amin_rule(record, name):
    @record.derivative(name, "self", save="self result dim keepdim")
    def _(ctx, g):
        x = ctx.self
        value = expand_reduced(ctx.result, x._shape, ctx.dim, ctx.keepdim)
        mask = ops.eq(x, value)
        count = ops.sum(mask, list(reduce_dims(ctx.dim, x.dim())), True)
        return expand_reduced(g, x._shape, ctx.dim, ctx.keepdim) * mask / count


AMAX = declare(Op.AMAX, function=True, method=True)
_amax_amin_rule(AMAX, "AmaxBackward0")
AMIN = declare(Op.AMIN, function=True, method=True)
_amax_amin_rule(AMIN, "AminBackward0")


def _value_selecting_rule(record, name):
    """max.dim / min.dim: the gradient goes to the position the indices name."""
    @record.derivative(name, "self", save="self_sizes dim keepdim result1")
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


MAX_DIM = declare(Op.MAX_DIM)
_value_selecting_rule(MAX_DIM, "MaxBackward0")
MIN_DIM = declare(Op.MIN_DIM)
_value_selecting_rule(MIN_DIM, "MinBackward0")

ARGMAX = declare(Op.ARGMAX, function=True, method=True, differentiable=False)

ARGMIN = declare(Op.ARGMIN, function=True, method=True, differentiable=False)

VAR = declare(Op.VAR)


@VAR.decomposition
def _(F, self, dim=None, *, correction=None, keepdim=False):
    """Two passes, the squares about the mean (no cancellation), over max(n - correction,
    0): a row kernel's count and divisor are its two numbers."""
    centred = self - F.mean(self, dim, True)
    return F.sum(centred * centred, dim, keepdim) / \
        F.count(self, dim, 1 if correction is None else correction)


@VAR.derivative("VarBackward0", "self", save="self dim correction keepdim")
def _(ctx, g):
    return var_gradient(g, ctx.self, ctx.dim, ctx.correction, ctx.keepdim)


def var_gradient(g, x, dim, correction, keepdim):
    """PyTorch's var_backward, in its order (so 16-bit floats round where its ops do):
    (g times 2 / (n - correction)) times (x - mean); inf for the scale where n -
    correction is not above 0, as the forward divides by max(n - correction, 0)."""
    dims = list(reduce_dims(dim, x.dim()))
    dof = numel_over(x._shape, dim) - (1 if correction is None else correction)
    if not keepdim:
        for d in dims:
            g = ops.unsqueeze(g, d)
    centred = x - ops.mean(x, dims, True)
    return g * (2.0 / dof if dof > 0 else math.inf) * centred


SOFTMAX = declare(Op.SOFTMAX, function=True, method=True)


@SOFTMAX.decomposition
def _(F, self, dim, dtype=None):
    """Shifted by the row's maximum, so exp cannot overflow; as PyTorch, a row whose
    maximum is +-inf gives NaN (inf - inf)."""
    x = F.cast(self, dtype)
    e = F.exp(x - F.amax(x, [dim], True))
    return e / F.sum(e, [dim], True)


@SOFTMAX.derivative("SoftmaxBackward0", "self", save="result dim self_dtype")
def _(ctx, g):
    return ops._softmax_backward_data(g, ctx.result, ctx.dim, ctx.self_dtype)


LOG_SOFTMAX = declare(Op.LOG_SOFTMAX, function=True, method=True)


@LOG_SOFTMAX.decomposition
def _(F, self, dim, dtype=None, *, stored=None):
    """`stored`: the 16-bit type PyTorch's CPU kernel over the last dim keeps a row's sum
    of exponentials and its log in, each rounded to it (measured: bfloat16 and float16,
    0 of 64000 apart; rounded only at the end, 1721 and 1869). Over another dim, and on
    CUDA, nothing rounds before the result (see stored_in)."""
    x = F.cast(self, dtype)
    shifted = x - F.amax(x, [dim], True)
    total = F.stored(F.sum(F.exp(shifted), [dim], True), stored)
    return shifted - F.stored(F.log(total), stored)



@LOG_SOFTMAX.derivative("LogSoftmaxBackward0", "self", save="result dim self_dtype")
def _(ctx, g):
    return ops._log_softmax_backward_data(g, ctx.result, ctx.dim, ctx.self_dtype)
