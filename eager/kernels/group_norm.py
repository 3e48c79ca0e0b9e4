"""Group norm as PyTorch's ops of those names: native_group_norm (out, and each group's
mean and rstd, saved for backward) and native_group_norm_backward, with F.group_norm's
derivative node NativeGroupNormBackward0.

Each op's formula is written once, on its record: numpy runs it here (float64, float32,
and the 16-bit floats' forward in float32, each output rounded once), CUDA's composed
kernels, the compiler's decompose pass and double backward run it in eager ops.

A 16-bit backward is computed as PyTorch's CPU kernel computes it (`_half_backward`),
its rules measured against PyTorch 2.13 on x86 (1 of 626052 gradients apart over 15
shapes, both types, affine and not, groups of 1 to 70 channels of 1 to 257 elements,
where the composite in float32 rounded once had 821-1346 of ~4096 input gradients
apart, and 2-7 of a few dozen weight gradients; that one is a grad_weight whose saved float16 mean is a unit from PyTorch's, its float32 mean
computed in another order): the mean and rstd it reads are the ones the forward saved,
rounded to the 16-bit type; each channel's sums of grad * x and of grad in float32, in
8 lanes (element j in lane j % 8, the lanes then added in order, the elements past the
last whole vector of 16 after them); the products and sums after it in float32 with the
fused multiply-adds its compiled code has (`_fma`)."""
from __future__ import annotations

import numpy as np

from eager import dispatcher
from eager.dispatcher import DispatchKey
from eager.kernels._common import (compute_np, computed, meta_from_rule, operand, register,
                                   result, type_word)
from eager.kernels.decomposed import EAGER, NUMPY
from eager.tensor import meta_empty, ops
from ir import dtypes
from ir.ops import Op
from ir.records import declare


def _check(input, weight, bias, C: int, group: int) -> None:
    """PyTorch's errors for group norm's arguments."""
    if group <= 0:
        raise RuntimeError(f"Expected num groups to be greater than 0, got {group}")
    if C % group:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input._shape)} and "
                           f"num_groups={group}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and (t.dim() != 1 or t.numel() != C):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number "
                               f"of channels in input, but got {name} of shape "
                               f"{list(t._shape)} and input of shape {list(input._shape)}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"\"GroupNormKernelImpl\" not implemented for "
                           f"'{type_word(input.dtype)}'")


def _stats_dtype(input, weight, bias):
    """The type the statistics are kept in: the parameters' (float32 beside a 16-bit
    input, as PyTorch's mixed kernel), else the input's."""
    return next((t.dtype for t in (weight, bias) if t is not None), input.dtype)


def native_group_norm_rule(input, weight, bias, N, C, HxW, group, eps):
    _check(input, weight, bias, C, group)
    if input.numel() != N * C * HxW:
        raise RuntimeError(f"Expected input of {N * C * HxW} elements (N * C * HxW), got "
                           f"{input.numel()}")
    stats = ((N, group), _stats_dtype(input, weight, bias))
    return (tuple(input._shape), input.dtype), stats, stats


def native_group_norm_cpu(input, weight, bias, N, C, HxW, group, eps):
    (shape, dt), (stats, sdt), _ = native_group_norm_rule(input, weight, bias, N, C, HxW,
                                                          group, eps)
    ct = compute_np(dt)
    x, w, b = (None if t is None else operand(t, ct) for t in (input, weight, bias))
    with np.errstate(all="ignore"):  # a group of no elements: NaN statistics, no warning
        out, mean, rstd = NATIVE_GROUP_NORM.formula(NUMPY, x, w, b, N, C, HxW, group, eps)
    return result(out, dt), result(mean, sdt), result(rstd, sdt)


register(Op.NATIVE_GROUP_NORM, native_group_norm_cpu, meta_from_rule(native_group_norm_rule))


def native_group_norm_backward_rule(grad_out, input, mean, rstd, weight, N, C, HxW, group,
                                    output_mask):
    _check(input, weight, None, C, group)
    grad_weight = ((C,), weight.dtype) if output_mask[1] and weight is not None else None
    return ((tuple(input._shape), input.dtype) if output_mask[0] else None), grad_weight, \
        (((C,), mean.dtype) if output_mask[2] else None)


def _backward_meta(*args, **kwargs):
    return tuple(None if r is None else meta_empty(*r)
                 for r in native_group_norm_backward_rule(*args, **kwargs))


def native_group_norm_backward_cpu(grad_out, input, mean, rstd, weight, N, C, HxW, group,
                                   output_mask):
    want = native_group_norm_backward_rule(grad_out, input, mean, rstd, weight, N, C, HxW,
                                           group, output_mask)
    ct = compute_np(input.dtype)
    g, x, m, r, w = (None if t is None else operand(t, ct)
                     for t in (grad_out, input, mean, rstd, weight))
    mask = [w is not None for w in want]
    with np.errstate(all="ignore"):
        if input.dtype in dtypes.HALF:
            got = _half_backward(g.reshape(N, C, HxW), x.reshape(N, C, HxW), m, r, w, group,
                                 mask, mean.dtype in dtypes.HALF,
                                 input.dtype is dtypes.bfloat16)
        else:
            got = NATIVE_GROUP_NORM_BACKWARD.formula(NUMPY, g, x, m, r, w, N, C, HxW, group,
                                                     mask)
    return tuple(None if v is None else result(a.reshape(v[0]), v[1])
                 for a, v in zip(got, want))


register(Op.NATIVE_GROUP_NORM_BACKWARD, native_group_norm_backward_cpu, _backward_meta)


# PyTorch's 16-bit backward --------------------------------------------------------------
_LANES = 8
"""float32 lanes of the vectors PyTorch's kernel sums in (its 16-bit vectors hold 16)."""


def _fma(a, b, c):
    """a * b + c of float32 arrays, rounded to float32 once: the product is exact in
    float64, the sum is rounded to odd there (its last bit set where it was inexact), so
    rounding it to float32 is the only rounding that counts."""
    p = a.astype(np.float64) * b
    c = np.asarray(c, np.float64)
    s = p + c
    back = s - p
    error = (p - (s - back)) + (c - back)  # p + c == s + error exactly (TwoSum)
    even = (s.view(np.int64) & 1) == 0
    s = np.where((error != 0) & even, np.nextafter(s, s + 2 * error), s)
    return s.astype(np.float32)


def _lane_sum(terms, whole: int, fused=None):
    """Sum the last axis of float32 `terms` as PyTorch's kernels do: the first `whole`
    elements in _LANES lanes (element j in lane j % _LANES, in order), the lanes then
    added in order, then the rest one by one. With `fused` (an array of terms' shape) a
    term is terms * fused, each step one fused multiply-add."""
    def step(acc, j):
        t = terms[..., j]
        return _fma(t, fused[..., j], acc) if fused is not None else \
            (acc + t).astype(np.float32)
    lanes = np.zeros(terms.shape[:-1] + (_LANES,), np.float32)
    for start in range(0, whole, _LANES):
        lanes = step(lanes, slice(start, start + _LANES))
    total = np.zeros(terms.shape[:-1], np.float32)
    for lane in range(_LANES):
        total = (total + lanes[..., lane]).astype(np.float32)
    for j in range(whole, terms.shape[-1]):
        total = step(total, j)
    return total


def _half_backward(g, x, mean, rstd, weight, group: int, mask, half_stats: bool,
                   bfloat16: bool):
    """PyTorch's CPU native_group_norm_backward of 16-bit (N, C, HxW) grad g and input x,
    as float32 arrays holding their values (mean and rstd (N, group), weight (C,) or
    None), unrounded: [grad_input, grad_weight, grad_bias], None where not asked for.
    grad_input is c1 grad + c2 x + c3 with one of the products fused into the first sum:
    c1 grad for bfloat16, c2 x for float16 (as measured: the two types' compiled loops
    differ)."""
    f32 = np.float32
    n, c, hw = x.shape
    d = c // group
    ds = _lane_sum(g * x, hw // 16 * 16)  # (each product exact in float32)
    db = _lane_sum(g, hw // 16 * 16)
    m, r = mean[..., None], rstd[..., None]  # (N, group, 1)
    grads = [None, None, None]
    if mask[0]:
        gamma = np.ones((group, d), f32) if weight is None else weight.reshape(group, d)
        gamma = np.broadcast_to(gamma, (n, group, d))
        whole = d // (16 if half_stats else 8) * (16 if half_stats else 8)
        ds_sum = _lane_sum(ds.reshape(n, group, d), whole, gamma)[..., None]
        db_sum = _lane_sum(db.reshape(n, group, d), whole, gamma)[..., None]
        s = f32(1) / f32(d * hw)
        c2 = _fma(db_sum, m, -ds_sum)
        for factor in (r, r, r, s):
            c2 = (c2 * factor).astype(f32)
        c3 = _fma(-(db_sum * r).astype(f32), s, (-c2 * m).astype(f32))
        c1 = (r * gamma).astype(f32)[..., None]  # (N, group, D, 1)
        g4, x4 = g.reshape(n, group, d, hw), x.reshape(n, group, d, hw)
        if bfloat16:
            first = _fma(c1, g4, (c2[..., None] * x4).astype(f32))
        else:
            first = _fma(c2[..., None], x4, (c1 * g4).astype(f32))
        grads[0] = (first + c3[..., None]).astype(f32)
    if mask[1]:
        per_sample = _fma(-db.reshape(n, group, d), m, ds.reshape(n, group, d))
        acc = np.zeros((group, d), f32)
        for i in range(n):
            acc = _fma(per_sample[i], r[i], acc)
        grads[1] = acc
    if mask[2]:
        acc = np.zeros(c, f32)
        for i in range(n):
            acc = (acc + db[i]).astype(f32)
        grads[2] = acc
    return grads


# records ------------------------------------------------------------------------------
NATIVE_GROUP_NORM = declare(Op.NATIVE_GROUP_NORM, function=True)


@NATIVE_GROUP_NORM.decomposition
def _(F, input, weight, bias, N, C, HxW, group, eps):
    """(out, mean, rstd): each group's mean, then the mean of squares about it (two
    passes, no cancellation); the output (x - mean) rstd, or with weight or bias, as
    PyTorch's, x scale + shift, scale = rstd weight and shift = bias - scale mean."""
    grouped = F.reshape(input, (N, group, C // group * HxW))
    mean = F.mean(grouped, [2], True)
    centred = grouped - mean
    rstd = F.rsqrt(F.mean(centred * centred, [2], True) + eps)
    if weight is None and bias is None:
        out = F.reshape(centred * rstd, F.shape(input))
    else:
        scale = F.reshape(rstd, (N, group, 1)) if weight is None else \
            rstd * F.reshape(weight, (1, group, C // group))
        shift = -(scale * mean) if bias is None else \
            F.reshape(bias, (1, group, C // group)) - scale * mean
        x = F.reshape(input, (N, group, C // group, HxW))
        out = x * F.reshape(scale, (N, group, -1, 1)) + F.reshape(shift, (N, group, -1, 1))
        out = F.reshape(out, F.shape(input))
    return out, F.reshape(mean, (N, group)), F.reshape(rstd, (N, group))


@NATIVE_GROUP_NORM.derivative("NativeGroupNormBackward0", "input weight bias",
                              save="input weight N C HxW group eps result1 result2")
def _(ctx, g):
    mask = [ctx.needs_input_grad(0), ctx.needs_input_grad(1), ctx.needs_input_grad(2)]
    x, w = ctx.input, ctx.weight
    sizes = (ctx.N, ctx.C, ctx.HxW, ctx.group)
    formula = NATIVE_GROUP_NORM_BACKWARD.formula
    if dispatcher.tls.grad_enabled:  # create_graph: in ops differentiable again, the
        # statistics as functions of x (the forward's formula computed again)
        _, mean, rstd = NATIVE_GROUP_NORM.formula(EAGER, x, None, None, *sizes, ctx.eps)
        return formula(EAGER, g, x, mean, rstd, w, *sizes, mask)
    if dispatcher.key_active(DispatchKey.Tracer):  # a compiled backward: ops that give
        # every output (the graph has no value for an undefined one); 16-bit floats in
        # float32 from the saved statistics, each gradient rounded once
        wide = [None if t is None else computed(t)
                for t in (g, x, ctx.result1, ctx.result2, w)]
        grads = formula(EAGER, *wide, *sizes, mask)
        return tuple(None if d is None else d.to(dt) for d, dt in
                     zip(grads, (x.dtype, None if w is None else w.dtype, ctx.result1.dtype)))
    return ops.native_group_norm_backward(g, x, ctx.result1, ctx.result2, w, *sizes, mask)


# differentiated where it must be through its formula in eager ops (above), so it has no
# rule of its own
NATIVE_GROUP_NORM_BACKWARD = declare(Op.NATIVE_GROUP_NORM_BACKWARD, differentiable=False)


@NATIVE_GROUP_NORM_BACKWARD.decomposition
def _(F, grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask):
    """PyTorch's: with ds and db each channel's sums of grad * x and of grad, and their
    sums over a group (weighted by the channel's weight) ds_g and db_g, grad_input
    c1 grad + c2 x + c3: c1 = rstd weight, c2 = (db_g mean - ds_g) rstd^3 / n,
    c3 = -c2 mean - db_g rstd / n (n the group's elements); grad_weight the sum over the
    batch of (ds - db mean) rstd, grad_bias of db. A gradient not asked for is None."""
    d = C // group
    g3 = F.reshape(grad_out, (N, C, HxW))
    ds = F.reshape(F.sum(g3 * F.reshape(input, (N, C, HxW)), [2]), (N, group, d))
    db = F.reshape(F.sum(g3, [2]), (N, group, d))
    m, r = F.reshape(mean, (N, group, 1)), F.reshape(rstd, (N, group, 1))
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        gamma = None if weight is None else F.reshape(weight, (1, group, d))
        ds_g = F.sum(ds if gamma is None else ds * gamma, [2], True)
        db_g = F.sum(db if gamma is None else db * gamma, [2], True)
        c2 = (db_g * m - ds_g) * r * r * r * (1.0 / (d * HxW))
        c3 = -c2 * m - db_g * r * (1.0 / (d * HxW))
        c1 = F.reshape(r if gamma is None else r * gamma, (N, group, -1, 1))
        grad_input = c1 * F.reshape(grad_out, (N, group, d, HxW)) + \
            F.reshape(c2, (N, group, 1, 1)) * F.reshape(input, (N, group, d, HxW)) + \
            F.reshape(c3, (N, group, 1, 1))
        grad_input = F.reshape(grad_input, F.shape(input))
    if output_mask[1] and weight is not None:
        grad_weight = F.reshape(F.sum((ds - db * m) * r, [0]), (C,))
    if output_mask[2]:
        grad_bias = F.reshape(F.sum(db, [0]), (C,))
    return grad_input, grad_weight, grad_bias
