"""The derivative rules autograd uses, read from the op records (ir/records.py: each
op's rule is declared beside its kernel in eager/kernels/<family>.py, as PyTorch's
derivatives.yaml entry would be). In-place ops use their out-of-place twin's rule."""
from __future__ import annotations

import eager.kernels  # noqa: F401  (declares every op's record)
from ir.records import RECORDS, Derivative
from ir.ops import Op

DERIVATIVES: dict[Op, Derivative] = {op: r.rule for op, r in RECORDS.items() if r.rule}

NOT_DIFFERENTIABLE = frozenset(op for op, r in RECORDS.items() if not r.differentiable)
"""Ops whose outputs never carry a gradient (integer or boolean results, detach)."""

INPLACE_TWIN = {op: r.inplace_of for op, r in RECORDS.items() if r.inplace_of is not None}
"""In-place ops differentiated by their out-of-place twin's rule."""


def rule_for(op: Op) -> Derivative:
    """The rule that differentiates `op` (for an in-place op without its own, its twin's)."""
    return DERIVATIVES.get(op) or DERIVATIVES[INPLACE_TWIN[op]]
