"""A block's reduction on NVPTX: every thread's partial result of a reduction node
(accumulators.py's sum, amax, amin, argmax, argmin) combined into one that every thread
of the block gets.

Within a warp, five shuffles down (16, 8, 4, 2, 1 lanes) leave the warp's result in its
lane 0 (llvm.nvvm.shfl.sync.down: f32 and i32 directly, 64-bit values as two i32
halves, i1 widened); lane 0 writes it to the reduction's slot of shared memory, and
after a barrier every thread folds the warps' results in warp order, so all threads
hold the same bits. A barrier before the write keeps a slot from being overwritten
while slower threads still read the previous row's. Blocks are whole warps (at most 32).
The combining is accumulators.combine, the CPU's own fold of partial results.
"""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu.accumulators import combine
from runtime.llvm import toolkit as llvm_ir
from runtime.llvm.toolkit import I1, I32, I64, i32

WARP = 32
FULL_MASK = -1  # every lane of the warp takes part (0xffffffff)


def barrier(b: ir.IRBuilder) -> None:
    """Every thread of the block waits here (bar.sync 0)."""
    llvm_ir.intrinsic(b, "nvvm.barrier.cta.sync.aligned.all", [i32(0)])


def shuffle_down(b: ir.IRBuilder, value, delta: int):
    """`value` of the lane `delta` lanes up in the warp (a lane past the warp's end gets
    its own): f32 and i32 in one shuffle, f64 and i64 in two, i1 widened to i32."""
    ty = value.type
    if isinstance(ty, ir.FloatType) or ty == I32:
        name = "f32" if isinstance(ty, ir.FloatType) else "i32"
        return llvm_ir.intrinsic(b, f"nvvm.shfl.sync.down.{name}",
                                 [i32(FULL_MASK), value, i32(delta), i32(WARP - 1)], ty)
    if ty == I1:
        return b.trunc(shuffle_down(b, b.zext(value, I32), delta), I1)
    bits = b.bitcast(value, I64) if isinstance(ty, ir.DoubleType) else value
    low = shuffle_down(b, b.trunc(bits, I32), delta)
    high = shuffle_down(b, b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32), delta)
    joined = b.or_(b.zext(low, I64), b.shl(b.zext(high, I64), ir.Constant(I64, 32)))
    return b.bitcast(joined, ty) if isinstance(ty, ir.DoubleType) else joined


def _shared_slots(module: ir.Module, ty: ir.Type, name: str):
    """A warp-count array of `ty` in shared memory."""
    array = ir.ArrayType(ty, WARP)
    slots = ir.GlobalVariable(module, array, module.get_unique_name(name),
                              addrspace=llvm_ir.Target.of(module).shared_space)
    slots.linkage = "internal"
    slots.initializer = ir.Constant(array, ir.Undefined)
    return slots


def block_reduce(k, node, acc):
    """The block's result of reduction `node` from each thread's accumulator `acc`
    (accumulators.start at width None): for argmax and argmin the index. Every thread
    of the block must call it."""
    b, target = k.b, k.target
    slot, index = acc.slots[0], acc.index
    parts = [b.load(slot)] + ([b.load(index)] if index is not None else [])

    def fold(first, second):
        if index is None:
            return [combine(b, node, first[0], second[0])]
        return list(combine(b, node, tuple(first), tuple(second)))

    for delta in (16, 8, 4, 2, 1):
        parts = fold(parts, [shuffle_down(b, part, delta) for part in parts])
    tid = target.special_register(b, "tid")
    lane, warp = b.and_(tid, i32(WARP - 1)), b.lshr(tid, i32(5))
    slots = [_shared_slots(b.module, part.type, f"kiln.{node.op.name.lower()}.warps")
             for part in parts]
    barrier(b)
    with b.if_then(b.icmp_unsigned("==", lane, i32(0))):
        for shared, part in zip(slots, parts):
            b.store(part, b.gep(shared, [i32(0), warp]))
    barrier(b)
    warps = b.zext(b.lshr(target.special_register(b, "ntid"), i32(5)), I64)

    def warp_part(w):
        return [b.load(b.gep(shared, [i32(0), w])) for shared in slots]

    result = llvm_ir.fold_range(b, 1, warps, 1, warp_part(i32(0)),
                                lambda w, acc: fold(acc, warp_part(w)))
    return result[-1]
