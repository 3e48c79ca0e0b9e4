"""The accumulators of a row kernel's reductions, as LLVM IR: a reduction keeps W
partial results (argmax and argmin also their indices) in stack slots, takes W lanes a
step, and folds the partials into the row's result at the end.
"""
from __future__ import annotations

import llvmlite.ir as ir

from compiler.codegen import values as V
from compiler.codegen.kernel_spec import REDUCE_OPS
from ir import dtypes
from ir.graph import Node
from runtime import llvm_ir


def _identity(kind: str) -> float:
    return {"sum": 0.0, "max": float("-inf"), "min": float("inf"),
            "argmax": float("-inf"), "argmin": float("inf")}[kind]


def start(b: ir.IRBuilder, w: int, node: Node) -> tuple:
    """The accumulator slots of a reduction: its W partial values (and for argmax /
    argmin the W lanes' best indices)."""
    kind = REDUCE_OPS[node.op]
    dt = _dtype_of(node)
    L = V.Lanes(b, w)
    with b.goto_entry_block():
        slot = b.alloca(L.type(dt))
        index = b.alloca(L.type(dtypes.int64)) if kind.startswith("arg") else None
    b.store(L.const(_identity(kind), dt), slot)
    if index is not None:
        b.store(L.const(0, dtypes.int64), index)
    return slot, index, dt


def accumulate(b: ir.IRBuilder, w: int, node: Node, acc, x, positions,
               active=None) -> None:
    """One step of a reduction: the W lanes of x into its accumulator, `positions` their
    indices along the reduced dim (for argmax and argmin). `active`: the lanes that
    exist (the others never win and contribute the identity); None for all, as when the
    lanes are rows (those past the last row are computed and never stored)."""
    slot, index, dt = acc
    L = V.Lanes(b, w)
    kind = REDUCE_OPS[node.op]
    x = L.cast(x, node.inputs[0].type.dtype, dt)
    best = b.load(slot)
    if kind.startswith("arg"):
        take = _beats(L, x, best, kind)
        if active is not None:
            take = b.and_(take, active)
        b.store(b.select(take, x, best), slot)
        b.store(b.select(take, positions, b.load(index)), index)
        return
    if active is not None:
        x = b.select(active, x, L.const(_identity(kind), dt))
    new = b.fadd(best, x) if kind == "sum" else V._max_min(L, best, x, dt, kind == "max")
    b.store(new, slot)


def _beats(L: V.Lanes, x, best, kind: str):
    """Whether x replaces the best so far: strictly better (the first occurrence stays),
    or the first NaN (PyTorch's argmax and argmin both pick NaN)."""
    b = L.b
    better = b.fcmp_ordered(">" if kind == "argmax" else "<", x, best)
    first_nan = b.and_(V._isnan(L, x), b.not_(V._isnan(L, best)))
    return b.or_(better, first_nan)


def combine(b: ir.IRBuilder, node: Node, first, second):
    """Two partial results of a reduction as one, scalars: values, or for argmax and
    argmin (value, index) pairs, where the lowest index wins among equal values (and
    among NaNs). `first` holds the lower positions where order matters."""
    kind = REDUCE_OPS[node.op]
    S = V.Lanes(b, None)
    if kind.startswith("arg"):
        (va, ia), (vb, ib) = first, second
        tie = b.and_(b.fcmp_ordered("==", va, vb), b.icmp_signed("<", ib, ia))
        both_nan = b.and_(V._isnan(S, va), V._isnan(S, vb))
        take = b.or_(b.or_(_beats(S, vb, va, kind), tie),
                     b.and_(both_nan, b.icmp_signed("<", ib, ia)))
        return b.select(take, vb, va), b.select(take, ib, ia)
    if kind == "sum":
        return b.fadd(first, second)
    return V._max_min(S, first, second, _dtype_of(node), kind == "max")


def _dtype_of(node: Node):
    """The dtype a reduction accumulates in (argmax / argmin: their input's)."""
    kind = REDUCE_OPS[node.op]
    return node.inputs[0].type.dtype if kind.startswith("arg") else \
        node.outputs[0].type.dtype


def finish(b: ir.IRBuilder, w: int, node: Node, acc):
    """Fold the W partial results of a row into one (pairwise, so the sum's error grows
    with log2(W) on top of the per-lane sums); argmax and argmin keep the lowest index
    among equal values."""
    slot, index, _ = acc
    if index is not None:
        pairs = list(zip(llvm_ir.lanes_of(b, b.load(slot)),
                         llvm_ir.lanes_of(b, b.load(index))))
        return llvm_ir.pairwise(pairs, lambda x, y: combine(b, node, x, y))[1]
    return llvm_ir.pairwise_lanes(b, b.load(slot), lambda x, y: combine(b, node, x, y))
