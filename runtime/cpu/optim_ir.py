"""Fused optimiser steps as LLVM IR: one native item per (algorithm, element type,
options) that updates one chunk of one parameter and its state in a single pass.

A step of a parameter group is a table of records, one per chunk of a parameter
(eager/backends/native/optim.py fills it and runs it through runtime/pool.py's Items), each
RECORD_WORDS words:

    0..4  element pointers: param, grad, then the state the algorithm keeps
          (SGD: momentum_buffer; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq)
    5, 6  start, stop: the chunk's elements
    7     pointer to the group's hyper-parameters (doubles, GROUP_SCALARS's order)
    8, 9  the parameter's own scalars (doubles, TENSOR_SCALARS's order)

Options that change which arithmetic runs (maximize, a weight-decay term, momentum,
nesterov, AdamW's decoupled decay, amsgrad) are compiled in; every number (lr,
momentum, betas, eps, the step's bias corrections) is read from the record, so a new
lr or step reuses the kernel. The arithmetic is the per-tensor path's, op for op, in
the parameter's element type (no fused multiply-add, no reassociation): a fused step
gives the per-tensor step's bits.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from runtime.llvm.toolkit import (I8P, I64, VOID, at, define, intrinsic, lane_mask,
                                  load_vector, masked_load, masked_store, splat,
                                  store_vector, vector_loop)

RECORD_WORDS = 10
POINTERS, START, STOP, GROUP, OWN = 0, 5, 6, 7, 8

GROUP_SCALARS = {
    "sgd": ("neg_lr", "weight_decay", "momentum"),
    "adam": ("weight_decay", "decay", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2",
             "eps"),
}
TENSOR_SCALARS = {
    "sgd": ("buffer_scale", "grad_scale"),  # buf * buffer_scale + d_p * grad_scale
    "adam": ("neg_step_size", "bias_correction2_sqrt"),
}
_ELEMENT = {"float32": (ir.FloatType(), 4), "float64": (ir.DoubleType(), 8)}


@dataclass(frozen=True)
class UpdateSpec:
    """What one fused kernel computes; everything else is an argument."""
    algorithm: str          # "sgd" or "adam"
    dtype: str              # "float32" or "float64"
    maximize: bool = False
    weight_decay: bool = False
    momentum: bool = False  # SGD keeps a momentum buffer
    nesterov: bool = False
    decoupled: bool = False  # AdamW
    amsgrad: bool = False

    @property
    def state(self) -> tuple[str, ...]:
        """The state tensors the kernel reads and writes, in record order."""
        if self.algorithm == "sgd":
            return ("momentum_buffer",) if self.momentum else ()
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if self.amsgrad else ())

    @property
    def name(self) -> str:
        flags = [f for f in ("maximize", "weight_decay", "momentum", "nesterov", "decoupled",
                             "amsgrad") if getattr(self, f)]
        return "_".join(["kiln_optim", self.algorithm, self.dtype, *flags])


def emit_update(module: ir.Module, spec: UpdateSpec, float32_lanes: int) -> ir.Function:
    """Define `spec.name(record, worker)` in `module` (runtime/pool.py's item type)."""
    elem, size = _ELEMENT[spec.dtype]
    width = max(1, float32_lanes * 4 // size)
    fn, b = define(module, spec.name, ir.FunctionType(VOID, [I8P, I64]), ("record", "worker"))
    words = b.bitcast(fn.args[0], I64.as_pointer())
    slots = b.bitcast(fn.args[0], elem.as_pointer().as_pointer())
    doubles = b.bitcast(fn.args[0], ir.DoubleType().as_pointer())
    pointers = [b.load(at(b, slots, POINTERS + k)) for k in range(2 + len(spec.state))]
    start, stop = b.load(at(b, words, START)), b.load(at(b, words, STOP))
    group = b.bitcast(b.load(at(b, slots, GROUP)), ir.DoubleType().as_pointer())
    scalars = {name: b.load(at(b, group, k))
               for k, name in enumerate(GROUP_SCALARS[spec.algorithm])}
    scalars.update({name: b.load(at(b, doubles, OWN + k))
                    for k, name in enumerate(TENSOR_SCALARS[spec.algorithm])})
    scalars = {name: b.fptrunc(v, elem) if elem != v.type else v for name, v in scalars.items()}
    update = _sgd if spec.algorithm == "sgd" else _adam

    def body(i, count):
        mask = None if count is None else lane_mask(b, count, width)
        ptrs = [at(b, p, i) for p in pointers]
        values = [load_vector(b, p, width, size) if mask is None else
                  masked_load(b, p, mask, size) for p in ptrs]
        lanes = {name: splat(b, v, width) for name, v in scalars.items()}
        for k, value in update(b, spec, lanes, values):
            if mask is None:
                store_vector(b, value, ptrs[k], size)
            else:
                masked_store(b, value, ptrs[k], mask, size)

    vector_loop(b, start, stop, width, body)
    b.ret_void()
    return fn


def _sgd(b: ir.IRBuilder, spec: UpdateSpec, s: dict, values: list) -> list:
    """torch.optim.SGD's update, as eager/optim/sgd.py computes it; [(slot, new value)]."""
    p, d = values[0], values[1]
    if spec.maximize:
        d = b.fneg(d)
    if spec.weight_decay:
        d = b.fadd(d, b.fmul(p, s["weight_decay"]))
    out = []
    if spec.momentum:
        buf = b.fadd(b.fmul(values[2], s["buffer_scale"]), b.fmul(d, s["grad_scale"]))
        out.append((2, buf))
        d = b.fadd(d, b.fmul(buf, s["momentum"])) if spec.nesterov else buf
    return [(0, b.fadd(p, b.fmul(d, s["neg_lr"])))] + out


def _adam(b: ir.IRBuilder, spec: UpdateSpec, s: dict, values: list) -> list:
    """Adam's (AdamW's) update, as eager/optim/adam.py computes it; [(slot, new value)]."""
    p, g, m, v = values[:4]
    if spec.maximize:
        g = b.fneg(g)
    if spec.weight_decay and spec.decoupled:
        p = b.fmul(p, s["decay"])
    elif spec.weight_decay:
        g = b.fadd(g, b.fmul(p, s["weight_decay"]))
    m = b.fadd(b.fmul(m, s["beta1"]), b.fmul(g, s["one_minus_beta1"]))
    v = b.fadd(b.fmul(v, s["beta2"]), b.fmul(b.fmul(g, g), s["one_minus_beta2"]))
    out = [(2, m), (3, v)]
    second = v
    if spec.amsgrad:
        second = intrinsic(b, "maximum", [values[4], v], v.type, (v.type,))
        out.append((4, second))
    root = intrinsic(b, "sqrt", [second], second.type, (second.type,))
    denom = b.fadd(b.fdiv(root, s["bias_correction2_sqrt"]), s["eps"])
    return [(0, b.fadd(p, b.fmul(b.fdiv(m, denom), s["neg_step_size"])))] + out
