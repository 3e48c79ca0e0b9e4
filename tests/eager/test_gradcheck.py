"""Every derivative rule against central finite differences (float64), through one table.

Each case names the op whose rule it checks; `test_table_covers_every_rule` makes sure no
rule goes unchecked, and `test_every_op_is_accounted_for` that no op lacks a rule.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import eager
from eager.autograd import gradcheck, gradgradcheck
from eager.autograd.derivatives import DERIVATIVES, INPLACE_TWIN, NOT_DIFFERENTIABLE
from eager.dispatcher import ATEN, DispatchKey
from eager.tensor import ops
from ir.ops import COMPILER_ONLY, COMPOSITE, INPLACE, TENSORS_ONLY, Op


class Inputs:
    """Makes a case's float64 inputs from a generator seeded by the case's id."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def x(self, *shape, low=-1.0, high=1.0, layout="contiguous", grad=True):
        """A leaf of `shape`; layout "t" is a transposed view of a contiguous buffer,
        "step" a view taking every other element of the last dim."""
        if layout == "t":
            buffer = self.rng.uniform(low, high, shape[::-1])
            t = eager.tensor(buffer, dtype=eager.float64).permute(*reversed(range(len(shape))))
        elif layout == "step":
            buffer = self.rng.uniform(low, high, shape[:-1] + (2 * shape[-1],))
            t = eager.tensor(buffer, dtype=eager.float64)[..., ::2]
        else:
            t = eager.tensor(self.rng.uniform(low, high, shape), dtype=eager.float64)
        t = t.detach()
        assert (layout == "contiguous") == t.is_contiguous()
        return t.requires_grad_(grad)

    def distinct(self, *shape, layout="contiguous", avoid=(0.0,), low=-1.0, high=1.0):
        """Values at least 1e-3 apart and from the points in `avoid`, so that max, min,
        abs, relu and clamp meet no tie or kink within gradcheck's step."""
        while True:
            t = self.x(*shape, low=low, high=high, layout=layout)
            values = np.sort(np.append(t.detach()._np().ravel(), avoid))
            if np.diff(values).min() > 1e-3:
                return t


@dataclass
class Case:
    op: Op
    name: str
    fn: Callable
    make: Callable[[Inputs], tuple]

    @property
    def id(self) -> str:
        return f"{self.op.name.lower()}-{self.name}"


def _unary(op: Op, fn, low=-1.0, high=1.0):
    return [
        Case(op, "contiguous", fn, lambda m: (m.x(3, 4, low=low, high=high),)),
        Case(op, "transposed", fn, lambda m: (m.x(3, 4, low=low, high=high, layout="t"),)),
        Case(op, "stepped", fn, lambda m: (m.x(2, 3, low=low, high=high, layout="step"),)),
    ]


def _binary(op: Op, fn, low=-1.0, high=1.0):
    return [
        Case(op, "same-shape", fn, lambda m: (m.x(3, 4, low=low, high=high),
                                              m.x(3, 4, low=low, high=high))),
        Case(op, "broadcast-row", fn, lambda m: (m.x(3, 4, low=low, high=high, layout="t"),
                                                 m.x(4, low=low, high=high))),
        Case(op, "broadcast-both", fn, lambda m: (m.x(3, 1, low=low, high=high),
                                                  m.x(2, 1, 4, low=low, high=high,
                                                      layout="step"))),
        *([Case(op, "python-scalar", lambda a: fn(a, 0.75),
                lambda m: (m.x(2, 3, low=low, high=high),))]
          if op not in TENSORS_ONLY else []),  # (atan2(x, 0.75): PyTorch's TypeError)
    ]


def _without_ties(op: Op, fn):
    return [
        Case(op, "distinct", fn, lambda m: (m.distinct(3, 4), m.distinct(3, 4, layout="t"))),
        Case(op, "broadcast", fn, lambda m: (m.distinct(3, 4), m.distinct(4))),
    ]


CASES = [
    # unary
    *_unary(Op.NEG, ops.neg),
    *_unary(Op.EXP, ops.exp),
    *_unary(Op.LOG, ops.log, low=0.5, high=2.0),
    *_unary(Op.SQRT, ops.sqrt, low=0.5, high=2.0),
    *_unary(Op.RSQRT, ops.rsqrt, low=0.5, high=2.0),
    *_unary(Op.TANH, ops.tanh),
    *_unary(Op.SIGMOID, ops.sigmoid),
    *_unary(Op.SILU, ops.silu),
    *_unary(Op.ERF, ops.erf),
    *_unary(Op.ERFINV, ops.erfinv, low=-0.9, high=0.9),
    *_unary(Op.LOG1P, ops.log1p, low=-0.5, high=2.0),
    *_unary(Op.EXPM1, ops.expm1),
    *_unary(Op.SIN, ops.sin),
    *_unary(Op.COS, ops.cos),
    *_unary(Op.TAN, ops.tan),
    *_unary(Op.ASIN, ops.asin, low=-0.9, high=0.9),
    *_unary(Op.ACOS, ops.acos, low=-0.9, high=0.9),
    *_unary(Op.ATAN, ops.atan, low=-3.0, high=3.0),
    *_unary(Op.SINH, ops.sinh, low=-3.0, high=3.0),
    *_unary(Op.COSH, ops.cosh, low=-3.0, high=3.0),
    *_unary(Op.ASINH, ops.asinh, low=-3.0, high=3.0),
    *_unary(Op.ACOSH, ops.acosh, low=1.2, high=3.0),
    *_unary(Op.ATANH, ops.atanh, low=-0.9, high=0.9),
    *_unary(Op.EXP2, ops.exp2, low=-3.0, high=3.0),
    *_unary(Op.SINC, ops.sinc, low=-2.0, high=2.0),
    Case(Op.SINC, "at-zero", ops.sinc, lambda m: (eager.zeros(3, dtype=eager.float64,
                                                              requires_grad=True),)),
    *_unary(Op.LOGIT, ops.logit, low=0.1, high=0.9),
    Case(Op.LOGIT, "eps-clamps", lambda x: ops.logit(x, 0.2),
         lambda m: (m.distinct(3, 4, low=0.0, high=1.0, avoid=(0.2, 0.8)),)),
    *_unary(Op.DEG2RAD, ops.deg2rad, low=-90.0, high=90.0),
    *_unary(Op.RAD2DEG, ops.rad2deg),
    *(Case(op, "away-from-steps", fn, lambda m: (m.distinct(3, 4, low=-3.0, high=3.0, avoid=(
        -2.5, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5)),))
      for op, fn in ((Op.FLOOR, ops.floor), (Op.CEIL, ops.ceil), (Op.TRUNC, ops.trunc),
                     (Op.ROUND, ops.round), (Op.FRAC, ops.frac), (Op.SGN, ops.sgn))),
    Case(Op.ROUND, "decimals", lambda x: ops.round(x, decimals=1),
         lambda m: (m.x(3, 4, low=0.01, high=0.04),)),
    *_binary(Op.ATAN2, ops.atan2, low=0.5, high=2.0),
    *_binary(Op.HYPOT, ops.hypot, low=0.5, high=2.0),
    *_binary(Op.LOGADDEXP, ops.logaddexp),
    *_binary(Op.LOGADDEXP2, ops.logaddexp2),
    *_binary(Op.XLOGY, ops.xlogy, low=0.5, high=2.0),
    Case(Op.XLOGY, "zero-x", ops.xlogy, lambda m: (m.x(3, low=0.0, high=0.0),
                                                   m.x(3, low=0.5, high=2.0))),
    *_binary(Op.FMOD, ops.fmod, low=0.5, high=2.0),
    *_binary(Op.REMAINDER, ops.remainder, low=0.5, high=2.0),
    *_without_ties(Op.COPYSIGN, ops.copysign),
    *_without_ties(Op.NEXTAFTER, ops.nextafter),
    Case(Op.HARDSWISH, "kinks-apart", ops.hardswish,
         lambda m: (m.distinct(3, 4, low=-5.0, high=5.0, avoid=(-3.0, 3.0)),)),
    Case(Op.HARDSIGMOID, "kinks-apart", ops.hardsigmoid,
         lambda m: (m.distinct(3, 4, low=-5.0, high=5.0, avoid=(-3.0, 3.0)),)),
    *_unary(Op.GELU, ops.gelu, low=-3.0, high=3.0),
    Case(Op.GELU, "tanh", lambda x: ops.gelu(x, approximate="tanh"),
         lambda m: (m.x(3, 4, low=-3.0, high=3.0, layout="t"),)),
    Case(Op.ABS, "distinct", ops.abs, lambda m: (m.distinct(3, 4, layout="t"),)),
    Case(Op.SIGN, "distinct", ops.sign, lambda m: (m.distinct(3, 4),)),
    Case(Op.RELU, "distinct", ops.relu, lambda m: (m.distinct(3, 4, layout="step"),)),
    Case(Op.NAN_TO_NUM, "finite", lambda x: ops.nan_to_num(x, 0.5, 2.0, -2.0),
         lambda m: (m.x(3, 4),)),
    Case(Op.CLAMP, "min-max", lambda x: ops.clamp(x, -0.3, 0.4),
         lambda m: (m.distinct(3, 4, avoid=(-0.3, 0.4)),)),
    Case(Op.CLAMP, "min-only", lambda x: ops.clamp(x, min=-0.3),
         lambda m: (m.distinct(3, 4, layout="t", avoid=(-0.3,)),)),
    Case(Op.CLAMP, "max-only", lambda x: ops.clamp(x, max=0.2),
         lambda m: (m.distinct(3, 4, layout="step", avoid=(0.2,)),)),
    Case(Op.CLAMP_TENSOR, "tensor-bounds", eager.clamp,
         lambda m: (m.x(3, 4), m.x(4, low=-0.5, high=-0.1), m.x(3, 1, low=0.1, high=0.5))),
    Case(Op.CLAMP_TENSOR, "min-above-max", eager.clamp,
         lambda m: (m.x(3, 4), m.x(4, low=0.3, high=0.5), m.x(3, 1, low=-0.5, high=-0.3))),
    Case(Op.CLAMP_TENSOR, "min-tensor-only", lambda x, lo: eager.clamp(x, min=lo),
         lambda m: (m.x(3, 4, layout="t"), m.x(4, low=-0.5, high=0.5))),
    *_unary(Op.SOFTPLUS, ops.softplus, low=-3.0, high=3.0),
    Case(Op.SOFTPLUS, "beta-threshold", lambda x: ops.softplus(x, 2.0, 5.0),
         lambda m: (m.distinct(3, 4, low=-4.0, high=4.0, avoid=(2.5,)),)),
    Case(Op.SOFTPLUS_BACKWARD, "beta", lambda g, x: ops.softplus_backward(g, x, 1.5, 20.0),
         lambda m: (m.x(3, 4), m.x(3, 4, low=-3, high=3, layout="t"))),
    *_unary(Op.LOG_SIGMOID, ops.log_sigmoid, low=-3.0, high=3.0),
    Case(Op.LOG_SIGMOID_BACKWARD, "buffer", lambda g, x: ops.log_sigmoid_backward(
        g, x, ops.exp(ops.neg(ops.abs(x))).detach()),
         lambda m: (m.x(3, 4), m.distinct(3, 4, low=-3.0, high=3.0, avoid=(0.0,)))),
    Case(Op.GLU, "last-dim", lambda x: ops.glu(x, -1), lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.GLU, "first-dim", lambda x: ops.glu(x, 0), lambda m: (m.x(4, 3, layout="step"),)),
    Case(Op.GELU_BACKWARD, "none", lambda g, x: ops.gelu_backward(g, x),
         lambda m: (m.x(3, 4), m.x(3, 4, low=-3, high=3, layout="t"))),
    Case(Op.GELU_BACKWARD, "tanh", lambda g, x: ops.gelu_backward(g, x, approximate="tanh"),
         lambda m: (m.x(3, 4), m.x(3, 4, low=-3, high=3))),
    # binary
    *_binary(Op.ADD, ops.add),
    Case(Op.ADD, "alpha", lambda a, b: ops.add(a, b, alpha=-2.5),
         lambda m: (m.x(3, 4, layout="t"), m.x(4))),
    *_binary(Op.SUB, ops.sub),
    Case(Op.SUB, "alpha", lambda a, b: ops.sub(a, b, alpha=0.5),
         lambda m: (m.x(3, 1), m.x(3, 4, layout="step"))),
    *_binary(Op.MUL, ops.mul),
    *_binary(Op.DIV, ops.div, low=0.5, high=2.0),
    *_binary(Op.DIV_MODE, lambda a, b: eager.div(a, b, rounding_mode=None), low=0.5, high=2.0),
    *(Case(Op.DIV_MODE, mode, lambda a, b, mode=mode: eager.div(a, b, rounding_mode=mode),
           lambda m: (m.distinct(3, 4, low=1.0, high=9.0, avoid=()), m.x(4, low=2.1, high=2.9)))
      for mode in ("trunc", "floor")),  # (zero gradients; quotients away from integers)
    *_binary(Op.POW, ops.pow, low=0.5, high=2.0),
    Case(Op.POW, "scalar-base", lambda e: ops.pow(1.5, e), lambda m: (m.x(3, 4),)),
    Case(Op.POW, "exponent-only", ops.pow,
         lambda m: (m.x(3, 4, low=0.5, high=2, grad=False), m.x(4))),
    *_without_ties(Op.MAXIMUM, ops.maximum),
    *_without_ties(Op.MINIMUM, ops.minimum),
    Case(Op.WHERE, "broadcast",
         lambda a, b: ops.where(eager.tensor([[True, False, True, False]]), a, b),
         lambda m: (m.x(3, 4, layout="t"), m.x(3, 1))),
    Case(Op.ADDCMUL, "broadcast", lambda s, a, b: ops.addcmul(s, a, b, value=-1.5),
         lambda m: (m.x(4), m.x(3, 4, layout="t"), m.x(3, 1))),
    Case(Op.ADDCDIV, "broadcast", lambda s, a, b: ops.addcdiv(s, a, b, value=0.5),
         lambda m: (m.x(3, 1), m.x(3, 4, layout="step"), m.x(4, low=0.5, high=2.0))),
    # reductions
    Case(Op.PROD, "all", ops.prod, lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.PROD, "dim-keepdim", lambda x: ops.prod(x, 1, True),
         lambda m: (m.x(2, 5, 3, layout="step"),)),
    Case(Op.PROD, "zeros", lambda x: ops.prod(x * eager.tensor([[1.0, 0.0, 1.0, 1.0],
                                                                [0.0, 1.0, 0.0, 1.0],
                                                                [1.0, 1.0, 1.0, 1.0]]), 1),
         lambda m: (m.x(3, 4),)),
    Case(Op.VAR_MEAN, "dims", lambda x: ops.var_mean(x, [0, 2], correction=0),
         lambda m: (m.x(2, 3, 4, layout="t"),)),
    Case(Op.STD_MEAN, "keepdim", lambda x: ops.std_mean(x, [1], keepdim=True),
         lambda m: (m.x(3, 4, layout="step"),)),
    Case(Op.STD, "dims", lambda x: ops.std(x, [0, 2]), lambda m: (m.x(2, 3, 4, layout="t"),)),
    Case(Op.STD, "all-biased", lambda x: ops.std(x, correction=0),
         lambda m: (m.x(3, 4, layout="step"),)),
    *(Case(Op.LINALG_VECTOR_NORM, f"ord-{p}", lambda x, p=p: ops.linalg_vector_norm(x, p, [1]),
           lambda m: (m.distinct(3, 4, low=0.2, high=2.0, avoid=()),))
      for p in (2, 1, 3, 1.5, 0.5, math.inf, -math.inf)),
    Case(Op.LINALG_VECTOR_NORM, "all-keepdim",
         lambda x: ops.linalg_vector_norm(x, 2, None, True), lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.SUM, "all", ops.sum, lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.SUM, "dims-keepdim", lambda x: ops.sum(x, [0, 2], True),
         lambda m: (m.x(2, 3, 4, layout="step"),)),
    Case(Op.SUM, "negative-dim", lambda x: ops.sum(x, [-1]), lambda m: (m.x(2, 3, 4),)),
    Case(Op.MEAN, "all", ops.mean, lambda m: (m.x(3, 4, layout="step"),)),
    Case(Op.MEAN, "dims", lambda x: ops.mean(x, [1, 2]), lambda m: (m.x(2, 3, 4),)),
    Case(Op.MEAN, "keepdim", lambda x: ops.mean(x, [0], True), lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.AMAX, "all", ops.amax, lambda m: (m.distinct(3, 4),)),
    Case(Op.AMAX, "dims-keepdim", lambda x: ops.amax(x, [0, 2], True),
         lambda m: (m.distinct(2, 3, 4),)),
    Case(Op.AMIN, "dim", lambda x: ops.amin(x, [1]), lambda m: (m.distinct(3, 4, layout="t"),)),
    Case(Op.MAX_DIM, "dim", lambda x: ops.max(x, 1), lambda m: (m.distinct(3, 4),)),
    Case(Op.MAX_DIM, "keepdim", lambda x: ops.max(x, 0, True)[0],
         lambda m: (m.distinct(3, 4, layout="t"),)),
    Case(Op.MIN_DIM, "negative-dim", lambda x: ops.min(x, -1)[0],
         lambda m: (m.distinct(2, 3, 4),)),
    Case(Op.VAR, "all", ops.var, lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.VAR, "dims-keepdim", lambda x: ops.var(x, [0, 2], keepdim=True),
         lambda m: (m.x(2, 3, 4),)),
    Case(Op.VAR, "correction-0", lambda x: ops.var(x, [1], correction=0),
         lambda m: (m.x(3, 4, layout="step"),)),
    Case(Op.VAR, "correction-2", lambda x: ops.var(x, [1], correction=2),
         lambda m: (m.x(3, 5),)),
    Case(Op.SOFTMAX, "last", lambda x: ops.softmax(x, -1), lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.SOFTMAX, "first", lambda x: ops.softmax(x, 0), lambda m: (m.x(3, 4),)),
    Case(Op.LOG_SOFTMAX, "last", lambda x: ops.log_softmax(x, 1),
         lambda m: (m.x(3, 4, layout="step"),)),
    Case(Op.LOG_SOFTMAX, "first", lambda x: ops.log_softmax(x, 0), lambda m: (m.x(2, 3, 4),)),
    Case(Op.SOFTMAX_BACKWARD_DATA, "last",
         lambda g, y: ops._softmax_backward_data(g, y, 1, eager.float64),
         lambda m: (m.x(3, 4), m.x(3, 4, low=0.1, layout="t"))),
    Case(Op.LOG_SOFTMAX_BACKWARD_DATA, "first",
         lambda g, y: ops._log_softmax_backward_data(g, y, 0, eager.float64),
         lambda m: (m.x(3, 4, layout="step"), m.x(3, 4, low=-2.0, high=0.0))),
    # layer norm
    Case(Op.NATIVE_LAYER_NORM, "affine",
         lambda x, w, b: ops.native_layer_norm(x, [4], w, b, 1e-5)[0],
         lambda m: (m.x(3, 4), m.x(4), m.x(4))),
    Case(Op.NATIVE_LAYER_NORM, "two-dims-transposed",
         lambda x, w: ops.native_layer_norm(x, [3, 2], w, None, 1e-3)[0],
         lambda m: (m.x(2, 3, 2, layout="t"), m.x(3, 2))),
    Case(Op.NATIVE_LAYER_NORM, "plain-stepped",
         lambda x: ops.native_layer_norm(x, [3], None, None, 1e-5)[0],
         lambda m: (m.x(2, 3, layout="step"),)),
    # group norm
    Case(Op.NATIVE_GROUP_NORM, "affine",
         lambda x, w, b: ops.native_group_norm(x, w, b, 2, 4, 3, 2, 1e-5)[0],
         lambda m: (m.x(2, 4, 3), m.x(4), m.x(4))),
    Case(Op.NATIVE_GROUP_NORM, "plain-stepped",
         lambda x: ops.native_group_norm(x, None, None, 2, 6, 1, 3, 1e-5)[0],
         lambda m: (m.x(2, 6, layout="step"),)),
    # linear algebra
    Case(Op.DOT, "strided", ops.dot, lambda m: (m.x(5), m.x(1, 5, layout="step")[0])),
    Case(Op.MV, "transposed", ops.mv, lambda m: (m.x(3, 4, layout="t"), m.x(4))),
    Case(Op.MM, "contiguous", ops.mm, lambda m: (m.x(3, 4), m.x(4, 2))),
    Case(Op.MM, "strided", ops.mm, lambda m: (m.x(3, 4, layout="t"), m.x(4, 2, layout="step"))),
    Case(Op.BMM, "strided", ops.bmm, lambda m: (m.x(2, 3, 4), m.x(2, 4, 2, layout="step"))),
    Case(Op.ADDMM, "bias-row", ops.addmm, lambda m: (m.x(2), m.x(3, 4, layout="t"), m.x(4, 2))),
    Case(Op.ADDMM, "alpha-beta", lambda b, x, w: ops.addmm(b, x, w, beta=0.5, alpha=-2.0),
         lambda m: (m.x(3, 2), m.x(3, 4), m.x(4, 2, layout="t"))),
    # views and copies
    Case(Op.VIEW, "merge", lambda x: ops.view(x, [4, 3]), lambda m: (m.x(2, 6),)),
    Case(Op.TRANSPOSE, "negative", lambda x: ops.transpose(x, 0, -1),
         lambda m: (m.x(2, 3, 4, layout="step"),)),
    Case(Op.T, "matrix", ops.t, lambda m: (m.x(3, 4),)),
    Case(Op.PERMUTE, "negative", lambda x: ops.permute(x, [2, -3, 1]),
         lambda m: (m.x(2, 3, 4, layout="t"),)),
    Case(Op.EXPAND, "new-and-stretched", lambda x: ops.expand(x, [2, 3, 4]),
         lambda m: (m.x(3, 1),)),
    Case(Op.UNSQUEEZE, "middle", lambda x: ops.unsqueeze(x, 1), lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.SQUEEZE, "all", ops.squeeze, lambda m: (m.x(3, 1, 4, 1),)),
    Case(Op.SQUEEZE, "dims", lambda x: ops.squeeze(x, [-1]), lambda m: (m.x(1, 3, 1),)),
    Case(Op.SELECT, "middle", lambda x: ops.select(x, 1, 2), lambda m: (m.x(2, 3, 4),)),
    Case(Op.SELECT, "negative-index", lambda x: ops.select(x, 0, -1),
         lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.SLICE, "step", lambda x: ops.slice(x, 1, 1, None, 2),
         lambda m: (m.x(3, 6, layout="step"),)),
    Case(Op.SLICE, "negative", lambda x: ops.slice(x, 0, -2), lambda m: (m.x(4, 3),)),
    Case(Op.SELECT_BACKWARD, "dim1", lambda g: ops.select_backward(g, [2, 3, 4], 1, 2),
         lambda m: (m.x(2, 4, layout="t"),)),
    Case(Op.SLICE_BACKWARD, "step", lambda g: ops.slice_backward(g, [3, 6], 1, 1, 6, 2),
         lambda m: (m.x(3, 3),)),
    Case(Op.IM2COL, "overlapping-padded", lambda x: ops.im2col(x, [3, 2], [1, 2], [1, 1],
                                                               [2, 1]),
         lambda m: (m.x(2, 2, 5, 6),)),
    Case(Op.IM2COL, "unbatched-strided", lambda x: ops.im2col(x, [2, 2], [1, 1], [0, 0],
                                                              [1, 1]),
         lambda m: (m.x(2, 4, 3, layout="t"),)),
    Case(Op.COL2IM, "overlapping-padded", lambda c: ops.col2im(c, [5, 6], [3, 2], [1, 2],
                                                               [1, 1], [2, 1]),
         lambda m: (m.x(2, 12, 18),)),
    Case(Op.CLONE, "strided", ops.clone, lambda m: (m.x(3, 4, layout="step"),)),
    Case(Op.TO_COPY, "same-dtype", lambda x: ops._to_copy(x, dtype=eager.float64),
         lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.CAT, "three", lambda a, b, c: ops.cat([a, b, c], 1),
         lambda m: (m.x(2, 3), m.x(2, 2, layout="t"), m.x(2, 1, layout="step"))),
    Case(Op.CAT, "negative-dim", lambda a, b: ops.cat([a, b], -2),
         lambda m: (m.x(2, 3), m.x(1, 3))),
    Case(Op.CAT, "legacy-empty", lambda a, b: ops.cat([a, b]),
         lambda m: (m.x(2, 3), m.x(0))),
    Case(Op.INDEX_SELECT, "repeated", lambda x: ops.index_select(x, 1, eager.tensor([3, 0, 3])),
         lambda m: (m.x(2, 4, layout="t"),)),
    Case(Op.INDEX_ADD, "repeated",
         lambda x, s: ops.index_add(x, 0, eager.tensor([2, 0, 2]), s),
         lambda m: (m.x(4, 3), m.x(3, 3, layout="t"))),
    Case(Op.INDEX_ADD, "alpha",
         lambda x, s: ops.index_add(x, 1, eager.tensor([1, 1]), s, alpha=-3.0),
         lambda m: (m.x(2, 3, layout="step"), m.x(2, 2))),
    Case(Op.INDEX, "rows-cols", lambda x: ops.index(x, 0, [eager.tensor([[2], [-1]]),
                                                          eager.tensor([0, 3, 3])]),
         lambda m: (m.x(3, 4, 2, layout="t"),)),
    Case(Op.INDEX, "getitem-mask", lambda x: x[:, eager.tensor([True, False, True, True])],
         lambda m: (m.x(2, 4, layout="step"),)),
    Case(Op.INDEX_PUT, "repeated", lambda x, v: ops.index_put(x, 1, [eager.tensor([1, 2])], v),
         lambda m: (m.x(3, 4), m.x(3, 2, layout="t"))),
    Case(Op.INDEX_PUT, "accumulate-broadcast",
         lambda x, v: ops.index_put(x, 0, [eager.tensor([0, 2, 0])], v, True),
         lambda m: (m.x(3, 4, layout="step"), m.x(4))),
    Case(Op.GATHER, "repeated", lambda x: ops.gather(x, 1, eager.tensor([[0, 0, 3], [2, 1, 1]])),
         lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.SCATTER, "smaller-index",
         lambda x, s: ops.scatter(x, 0, eager.tensor([[1, 0], [2, 1]]), s),
         lambda m: (m.x(3, 2), m.x(3, 3, layout="t"))),
    Case(Op.SCATTER_ADD, "repeated",
         lambda x, s: ops.scatter_add(x, 1, eager.tensor([[0, 0, 2], [1, 1, 1]]), s),
         lambda m: (m.x(2, 3, layout="step"), m.x(2, 4))),
    Case(Op.EMBEDDING, "repeated", lambda w: ops.embedding(w, eager.tensor([[0, 2], [2, 3]])),
         lambda m: (m.x(4, 3),)),
]

COMPOSITE_CASES = [
    Case(Op.MATMUL, "1d-1d", ops.matmul, lambda m: (m.x(4), m.x(4))),
    Case(Op.MATMUL, "2d-1d", ops.matmul, lambda m: (m.x(3, 4, layout="t"), m.x(4))),
    Case(Op.MATMUL, "1d-2d", ops.matmul, lambda m: (m.x(4), m.x(4, 2))),
    Case(Op.MATMUL, "2d-2d", ops.matmul, lambda m: (m.x(3, 4), m.x(4, 2, layout="step"))),
    Case(Op.MATMUL, "3d-1d", ops.matmul, lambda m: (m.x(2, 3, 4), m.x(4))),
    Case(Op.MATMUL, "3d-2d", ops.matmul, lambda m: (m.x(2, 3, 4, layout="step"), m.x(4, 2))),
    Case(Op.MATMUL, "1d-3d", ops.matmul, lambda m: (m.x(4), m.x(2, 4, 3))),
    Case(Op.MATMUL, "2d-3d", ops.matmul, lambda m: (m.x(3, 4, layout="t"), m.x(2, 4, 2))),
    Case(Op.MATMUL, "3d-3d", ops.matmul, lambda m: (m.x(2, 3, 4), m.x(2, 4, 2))),
    Case(Op.MATMUL, "broadcast-batch", ops.matmul,
         lambda m: (m.x(2, 1, 3, 4), m.x(3, 4, 2))),
    Case(Op.LINEAR, "2d-bias", ops.linear, lambda m: (m.x(3, 4), m.x(2, 4, layout="t"), m.x(2))),
    Case(Op.LINEAR, "3d-bias", ops.linear, lambda m: (m.x(2, 3, 4), m.x(2, 4), m.x(2))),
    Case(Op.LINEAR, "no-bias", ops.linear, lambda m: (m.x(3, 4, layout="step"), m.x(2, 4))),
    Case(Op.RESHAPE, "non-contiguous", lambda x: ops.reshape(x, [-1]),
         lambda m: (m.x(3, 4, layout="t"),)),
    Case(Op.RESHAPE, "view", lambda x: ops.reshape(x, [2, 2, 3]), lambda m: (m.x(4, 3),)),
    Case(Op.FLATTEN, "middle", lambda x: ops.flatten(x, 1, 2),
         lambda m: (m.x(2, 3, 4, layout="step"),)),
    Case(Op.SPLIT, "uneven", lambda x: ops.split(x, 2, 1), lambda m: (m.x(2, 5, layout="t"),)),
    Case(Op.SPLIT, "sizes", lambda x: ops.split(x, [1, 3], 0), lambda m: (m.x(4, 2),)),
    Case(Op.STACK, "middle", lambda a, b, c: ops.stack([a, b, c], 1),
         lambda m: (m.x(2, 3), m.x(2, 3, layout="t"), m.x(2, 3, layout="step"))),
    Case(Op.CONTIGUOUS, "transposed", ops.contiguous, lambda m: (m.x(3, 4, layout="t"),)),
]

INPLACE_CASES = [
    Case(Op.ADD_, "alpha", lambda x, y: (x * 1).add_(y, alpha=2.0), lambda m: (m.x(3, 4), m.x(4))),
    Case(Op.SUB_, "alpha", lambda x, y: (x * 1).sub_(y, alpha=0.5),
         lambda m: (m.x(3, 4), m.x(3, 4))),
    Case(Op.MUL_, "broadcast", lambda x, y: (x * 1).mul_(y), lambda m: (m.x(3, 4), m.x(3, 1))),
    Case(Op.DIV_, "broadcast", lambda x, y: (x * 1).div_(y),
         lambda m: (m.x(3, 4), m.x(4, low=0.5, high=2))),
    Case(Op.DIV_MODE_, "in-place", lambda x, y: (x * 1).div_(y, rounding_mode="floor"),
         lambda m: (m.distinct(3, 4, low=1.0, high=9.0, avoid=()), m.x(4, low=2.1, high=2.9))),
    Case(Op.CLAMP_TENSOR_, "in-place", lambda x, lo, hi: (x * 1).clamp_(lo, hi),
         lambda m: (m.x(3, 4), m.x(4, low=-0.5, high=-0.1), m.x(3, 1, low=0.1, high=0.5))),
    Case(Op.CLAMP_, "min-max", lambda x: (x * 1).clamp_(-0.3, 0.4),
         lambda m: (m.distinct(3, 4, avoid=(-0.3, 0.4)),)),
    Case(Op.ZERO_, "then-add", lambda x, y: (x * 1).zero_() + x * y, lambda m: (m.x(3), m.x(3))),
    Case(Op.FILL_, "then-mul", lambda x: (x * 1).fill_(2.0) * x, lambda m: (m.x(3, 4),)),
    Case(Op.INDEX_PUT_, "accumulate", lambda x, v: (x * 1).index_put_((eager.tensor([2, 0, 2]),),
                                                                       v, True),
         lambda m: (m.x(3, 4), m.x(3, 4, layout="t"))),
    *(Case(op, "in-place", lambda x, name=op.schema.name: getattr(x * 1, name)(),
           lambda m: (m.x(3, 4, low=0.2, high=0.8),))
      for op in (Op.SIN_, Op.COS_, Op.TAN_, Op.ASIN_, Op.ACOS_, Op.ATAN_, Op.SINH_, Op.COSH_,
                 Op.ASINH_, Op.ATANH_, Op.EXP2_, Op.SINC_, Op.DEG2RAD_, Op.RAD2DEG_,
                 Op.FLOOR_, Op.CEIL_, Op.TRUNC_, Op.ROUND_, Op.FRAC_, Op.SGN_, Op.NEG_,
                 Op.ABS_, Op.SIGN_, Op.EXP_, Op.LOG_, Op.SQRT_, Op.RSQRT_, Op.RELU_, Op.TANH_,
                 Op.SIGMOID_, Op.ERF_, Op.EXPM1_, Op.LOG1P_, Op.NAN_TO_NUM_)),
    Case(Op.ACOSH_, "in-place", lambda x: (x * 1).acosh_(), lambda m: (m.x(3, 4, low=1.2,
                                                                            high=3.0),)),
    *(Case(op, "in-place", lambda x, y, name=op.schema.name: getattr(x * 1, name)(y),
           lambda m: (m.x(3, 4, low=0.5, high=2.0), m.x(4, low=0.6, high=1.9)))
      for op in (Op.ATAN2_, Op.HYPOT_, Op.XLOGY_, Op.FMOD_, Op.REMAINDER_, Op.COPYSIGN_,
                 Op.NEXTAFTER_, Op.POW_, Op.EQ_, Op.NE_, Op.LT_, Op.LE_, Op.GT_, Op.GE_)),
    Case(Op.LOGIT_, "in-place", lambda x: (x * 1).logit_(), lambda m: (m.x(3, 4, low=0.2,
                                                                            high=0.8),)),
    Case(Op.ADDCMUL_, "broadcast", lambda x, a, b: (x * 1).addcmul_(a, b, value=2.0),
         lambda m: (m.x(3, 4), m.x(4), m.x(3, 1))),
    Case(Op.ADDCDIV_, "broadcast", lambda x, a, b: (x * 1).addcdiv_(a, b, value=-0.5),
         lambda m: (m.x(3, 4), m.x(3, 4, layout="t"), m.x(4, low=0.5, high=2.0))),
    Case(Op.COPY_, "from-grad-input", lambda x, y: (x * 1).copy_(y) * x,
         lambda m: (m.x(3, 4), m.x(4))),
]


def _inputs(case: Case) -> tuple:
    return case.make(Inputs(zlib.crc32(case.id.encode())))


def _check(case: Case):
    inputs = _inputs(case)
    assert gradcheck(case.fn, inputs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradcheck(case):
    _check(case)


@pytest.mark.parametrize("case", COMPOSITE_CASES, ids=lambda c: c.id)
def test_gradcheck_composite(case):
    _check(case)


@pytest.mark.parametrize("case", INPLACE_CASES, ids=lambda c: c.id)
def test_gradcheck_inplace(case):
    _check(case)


GRADGRAD_OPS = {Op.NEG, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.TANH, Op.SIGMOID, Op.SILU, Op.ERF,
                Op.LOG1P, Op.EXPM1, Op.SIN, Op.COS,
                Op.GELU, Op.ABS, Op.RELU, Op.CLAMP, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW,
                Op.MAXIMUM, Op.MINIMUM, Op.WHERE, Op.MM, Op.SUM, Op.MEAN, Op.AMAX, Op.AMIN,
                Op.MAX_DIM, Op.MIN_DIM, Op.VAR, Op.SOFTMAX, Op.LOG_SOFTMAX, Op.PROD,
                Op.VAR_MEAN, Op.LOGIT, Op.ADDCMUL, Op.ADDCDIV, Op.STD, Op.GLU,
                Op.LOG_SIGMOID, Op.LINALG_VECTOR_NORM, Op.NATIVE_GROUP_NORM,
                Op.SOFTMAX_BACKWARD_DATA, Op.LOG_SOFTMAX_BACKWARD_DATA, Op.NATIVE_LAYER_NORM}
GRADGRAD_CASES = [c for c in CASES if c.op in GRADGRAD_OPS] + INPLACE_CASES


@pytest.mark.parametrize("case", GRADGRAD_CASES, ids=lambda c: c.id)
def test_gradgradcheck(case):
    inputs = _inputs(case)
    assert gradgradcheck(case.fn, inputs)


RAISES = {Op.HEAVISIDE: "PyTorch's derivative is not_implemented: backward raises "
                       "(tests/eager/test_float_power_heaviside.py)",
          Op.HEAVISIDE_: "heaviside's in-place form",
          Op.FLOOR_DIVIDE: "PyTorch's derivative is not_implemented: backward raises "
                           "(tests/eager/test_floor_divide.py)",
          Op.FLOOR_DIVIDE_: "floor_divide's in-place form"}
"""Rules whose backward raises as PyTorch's does, so there is no gradient to check."""


def test_table_covers_every_rule():
    checked = {c.op for c in CASES + INPLACE_CASES}
    assert set(DERIVATIVES) - checked == {op for op in RAISES if op in DERIVATIVES}
    assert {c.op for c in COMPOSITE_CASES} == COMPOSITE
    assert {c.op for c in INPLACE_CASES} == INPLACE - set(RAISES)
    assert GRADGRAD_OPS <= checked


def test_every_op_is_accounted_for():
    """Each eager op has a rule (its own or, in place, its twin's), is composite, or has
    none; compiler-only ops (scalar constants, fused kernels) never reach autograd."""
    assert not set(DERIVATIVES) & NOT_DIFFERENTIABLE
    has_rule = set(DERIVATIVES) | set(INPLACE_TWIN)
    unaccounted = set(Op) - has_rule - NOT_DIFFERENTIABLE - COMPOSITE - COMPILER_ONLY
    assert unaccounted == set(), f"ops with no derivative rule: {sorted(unaccounted, key=str)}"
    assert INPLACE <= has_rule


def test_every_rule_has_an_autograd_kernel():
    for op in set(DERIVATIVES) | INPLACE:
        assert DispatchKey.Autograd in ATEN[op].kernels, op
    for op in NOT_DIFFERENTIABLE | COMPOSITE:
        assert DispatchKey.Autograd not in ATEN[op].kernels, op


def test_gradcheck_catches_a_wrong_gradient():
    """x.detach() * x has half the gradient of x * x: gradcheck must say so."""
    x = Inputs(0).x(3)

    def half_gradient(t):
        return t.detach() * t

    assert not gradcheck(half_gradient, (x,), raise_exception=False)
    with pytest.raises(RuntimeError, match="Jacobian mismatch for output 0 with respect to "):
        gradcheck(half_gradient, (x,))


def test_gradcheck_catches_a_broken_rule_in_the_table(monkeypatch):
    x = Inputs(0).x(3)
    node_type = type(ops.exp(x).grad_fn)
    monkeypatch.setattr(node_type, "formula", staticmethod(lambda ctx, g: g))
    assert not gradcheck(ops.exp, (x,), raise_exception=False)


def test_gradgradcheck_catches_a_wrong_second_derivative():
    """A hook that detaches the incoming gradient leaves the first derivative right but
    cuts its dependence on grad_output out of the double-backward graph."""
    x = Inputs(0).x(3)

    def cut_double_backward(t):
        y = t * t
        y.register_hook(lambda g: g.detach())
        return y

    assert gradcheck(cut_double_backward, (x,))
    assert not gradgradcheck(cut_double_backward, (x,), raise_exception=False)


def test_gradcheck_refuses_imprecise_or_constant_inputs():
    with pytest.raises(ValueError, match="float64"):
        gradcheck(ops.exp, (eager.ones(2, requires_grad=True),))
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(ops.exp, (eager.ones(2, dtype=eager.float64),))
