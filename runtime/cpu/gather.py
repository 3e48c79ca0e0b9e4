"""Gathered loads in elementwise kernels: a value read from a source operand at the
position an index operand gives along one of its dims (`t[i]`, index_select, embedding,
gather).

The runner lays the source out over the kernel's iteration space with a stride of 0 along
the indexed dim, so its address for an element is that of index 0; the kernel adds
index * `stride`. Every index is checked against the dim's size in the kernel: one out of
range sets the kernel's status word (ptrs[operands], an i64) and is read as 0, so no lane
ever reads outside the source; the runner then runs the op through the interpreter, which
raises the op's own error. An index that is the same along the whole inner dim (an
embedding row, `t[i]` over rows) is checked once per row and moves the source's row
base; otherwise each lane is checked and loaded on its own.
"""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu import values as V
from runtime.cpu.kernel_spec import Gather, strides_over_result  # noqa: F401  (G.<name>)
from ir import dtypes
from runtime.llvm import toolkit as llvm_ir
from runtime.llvm.toolkit import I64, i64


def status_word(b: ir.IRBuilder, ptrs, operands: int):
    """The kernel's status word: the pointer after its operands'."""
    return b.bitcast(b.load(llvm_ir.at(b, ptrs, operands)), I64.as_pointer())


def checked(k, g: Gather, index, active=None):
    """`index` (i64, scalar or lanes) wrapped where negative indices count from the end,
    with each index out of [0, size) flagged in the status word and replaced by 0."""
    b = k.b
    width = index.type.count if isinstance(index.type, ir.VectorType) else None
    L = V.Lanes(b, width)
    size = L.const(g.size, dtypes.int64)
    if g.wraps:
        index = b.select(b.icmp_signed("<", index, L.const(0, dtypes.int64)),
                         b.add(index, size), index)
    bad = b.icmp_unsigned(">=", index, size)  # a negative index is a huge unsigned one
    if active is not None:
        bad = b.and_(bad, active)
    with b.if_then(llvm_ir.any_lane(b, bad), likely=False):
        b.store(i64(1), k.status)
    return b.select(bad, L.const(0, dtypes.int64), index)


def _as_i64(L: V.Lanes, value, dt):
    return L.cast(value, dt, dtypes.int64)


def per_row(k, g: Gather) -> bool:
    """Whether the index is one value for the whole inner dim."""
    return k.spec.strides[g.index] == 0


def move_row_base(k, g: Gather, bases: list) -> None:
    """For an index that is one value per row: check it and move the source's row base
    to the indexed position."""
    b = k.b
    dt = k.operands[g.index].type.dtype
    index = _as_i64(V.Lanes(b, None), b.load(bases[g.index]), dt)
    safe = checked(k, g, index)
    bases[g.source] = llvm_ir.at(b, bases[g.source], b.mul(safe, i64(g.stride)))


def load_lanes(k, g: Gather, bases: list, index_lanes, i, count=None):
    """W gathered elements at inner positions i, i+1, ...: each lane's index checked and
    its element loaded on its own (lanes past `count` read the last element again)."""
    b, w = k.b, k.w
    dt = k.operands[g.source].type.dtype
    L = V.Lanes(b, w)
    index = _as_i64(L, index_lanes, k.operands[g.index].type.dtype)
    safe = checked(k, g, index, llvm_ir.lane_mask(b, count, w) if count is not None else None)
    raw = ir.Constant(L.memory_type(dt), ir.Undefined)
    last = b.sub(b.add(i, count), i64(1)) if count is not None else None
    for lane in range(w):
        position = b.add(i, i64(lane))
        if last is not None:
            position = llvm_ir.smin(b, position, last)
        offset = b.mul(b.extract_element(safe, llvm_ir.i32(lane)), i64(g.stride))
        element = llvm_ir.at(b, k.inner_at(g.source, bases[g.source], position), offset)
        raw = b.insert_element(raw, b.load(element), llvm_ir.i32(lane))
    return L.from_memory(raw, dt)
