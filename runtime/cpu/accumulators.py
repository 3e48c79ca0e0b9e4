"""The accumulators of a row kernel's reductions, as LLVM IR: a reduction keeps W
partial results (in one or more independent parts; argmax and argmin also their
indices; a float max or min a NaN flag per lane) in stack slots, takes W lanes a step,
and folds the partials into the row's result at the end.
"""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu import values as V
from runtime.cpu.kernel_spec import REDUCE_OPS
from ir import dtypes
from ir.graph import Node
from runtime.llvm import toolkit as llvm_ir


def _identity(kind: str) -> float:
    return {"sum": 0.0, "max": float("-inf"), "min": float("inf"),
            "argmax": float("-inf"), "argmin": float("inf")}[kind]


class Accumulator:
    """A reduction's running state in stack slots: `parts` vectors of partial values
    (independent chains, so that consecutive steps do not wait on each other's adds),
    for argmax and argmin the best indices, and for a float max or min a flag per lane
    of NaNs seen: the partials take plain maxima (one vmaxps a step, no NaN test per
    element) and the flag makes the result NaN at the end."""
    __slots__ = ("slots", "index", "nan", "dt", "kind")

    def __init__(self, slots, index, nan, dt, kind):
        self.slots, self.index, self.nan, self.dt, self.kind = slots, index, nan, dt, kind


def start(b: ir.IRBuilder, w: int, node: Node, parts: int = 1) -> Accumulator:
    """The accumulator slots of a reduction: `parts` vectors of W partial values (and for
    argmax / argmin the W lanes' best indices, one part)."""
    kind = REDUCE_OPS[node.op]
    dt = _dtype_of(node)
    L = V.Lanes(b, w)
    arg = kind.startswith("arg")
    flagged = w is not None and not arg and kind != "sum" and dt.is_floating_point
    with b.goto_entry_block():
        slots = [b.alloca(L.type(dt)) for _ in range(1 if arg else parts)]
        index = b.alloca(L.type(dtypes.int64)) if arg else None
        nan = b.alloca(L.type(dtypes.bool_)) if flagged else None
    for slot in slots:
        b.store(L.const(_identity(kind), dt), slot)
    if index is not None:
        b.store(L.const(0, dtypes.int64), index)
    if nan is not None:
        b.store(L.const(0, dtypes.bool_), nan)
    return Accumulator(slots, index, nan, dt, kind)


def accumulate(b: ir.IRBuilder, w: int, node: Node, acc: Accumulator, x, positions,
               active=None, part: int = 0) -> None:
    """One step of a reduction: the W lanes of x into its accumulator's partials `part`,
    `positions` their indices along the reduced dim (for argmax and argmin). `active`:
    the lanes that exist (the others never win and contribute the identity); None for
    all, as when the lanes are rows (those past the last row are computed and never
    stored)."""
    L = V.Lanes(b, w)
    kind, dt = acc.kind, acc.dt
    x = L.cast(x, node.inputs[0].type.dtype, dt)
    slot = acc.slots[part % len(acc.slots)]
    best = b.load(slot)
    if acc.index is not None:
        take = _beats(L, x, best, kind)
        if active is not None:
            take = b.and_(take, active)
        b.store(b.select(take, x, best), slot)
        b.store(b.select(take, positions, b.load(acc.index)), acc.index)
        return
    if active is not None:
        x = b.select(active, x, L.const(_identity(kind), dt))
    if kind == "sum":
        new = b.fadd(best, x)
    elif acc.nan is not None:
        new = _plain_max_min(L, best, x, kind == "max")
        b.store(b.or_(b.load(acc.nan), V._isnan(L, x)), acc.nan)
    else:
        new = V._max_min(L, best, x, dt, kind == "max")
    b.store(new, slot)


def _plain_max_min(L: V.Lanes, best, x, is_max: bool):
    """x where it beats `best`, else `best`: a NaN x never wins (vmaxps / vminps)."""
    return L.b.select(L.b.fcmp_ordered(">" if is_max else "<", x, best), x, best)


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


def lanes(b: ir.IRBuilder, node: Node, acc: Accumulator):
    """The accumulator's W results, one per lane (its parts combined, NaN where one was
    seen); for argmax and argmin their indices."""
    if acc.index is not None:
        return b.load(acc.index)
    value = _parts(b, acc, _fold(b, node, acc))
    if acc.nan is None:
        return value
    L = V.Lanes(b, value.type.count)
    return b.select(b.load(acc.nan), L.const(float("nan"), acc.dt), value)


def finish(b: ir.IRBuilder, w: int, node: Node, acc: Accumulator):
    """Fold the W partial results of a row into one (pairwise, so the sum's error grows
    with log2(W) on top of the per-lane sums); argmax and argmin keep the lowest index
    among equal values."""
    if acc.index is not None:
        pairs = list(zip(llvm_ir.lanes_of(b, b.load(acc.slots[0])),
                         llvm_ir.lanes_of(b, b.load(acc.index))))
        return llvm_ir.pairwise(pairs, lambda x, y: combine(b, node, x, y))[1]
    fold = _fold(b, node, acc)
    return _flag_nan(b, acc, llvm_ir.pairwise_lanes(b, _parts(b, acc, fold), fold))


def finish_rows(b: ir.IRBuilder, w: int, node: Node, accs: list) -> list:
    """`finish` for several rows (a power-of-two count up to W), their results folded
    together: the rows' final vectors combine level by level into one vector of the
    rows' results (llvm_ir.pairwise_lanes_each: the same pairs, so the same values as
    `finish` row by row, in fewer steps)."""
    if accs[0].index is not None or len(accs) == 1:
        return [finish(b, w, node, acc) for acc in accs]
    fold = _fold(b, node, accs[0])
    values = llvm_ir.pairwise_lanes_each(b, [_parts(b, acc, fold) for acc in accs], fold)
    return [_flag_nan(b, acc, value)
            for acc, value in zip(accs, llvm_ir.lanes_of(b, values))]


def _fold(b: ir.IRBuilder, node: Node, acc: Accumulator):
    """How two partial results of the accumulator combine (vectors or scalars): plain
    maxima or minima where a NaN flag is kept, else `combine`."""
    if acc.nan is None:
        return lambda x, y: combine(b, node, x, y)
    L = V.Lanes(b, None)  # (select and compare: any width)
    return lambda x, y: _plain_max_min(L, x, y, acc.kind == "max")


def _parts(b: ir.IRBuilder, acc: Accumulator, fold):
    """The accumulator's parts folded into one vector of W partial results."""
    return llvm_ir.pairwise([b.load(slot) for slot in acc.slots], fold)


def _flag_nan(b: ir.IRBuilder, acc: Accumulator, value):
    """A row's folded result, NaN where its flag saw one."""
    if acc.nan is None:
        return value
    seen = llvm_ir.any_lane(b, b.load(acc.nan))
    return b.select(seen, V.Lanes(b, None).const(float("nan"), acc.dt), value)
