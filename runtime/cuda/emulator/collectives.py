"""The intrinsics where threads meet: block barriers (and their counting forms) and the
warp collectives (shuffles, votes, warp sync). A thread stops at one by yielding
(collective, its contribution); once every thread the collective waits for has arrived,
`resolve` turns the contributions into each thread's result.

    block   llvm.nvvm.barrier0, llvm.nvvm.barrier.cta.sync.aligned.all(id),
            llvm.nvvm.barrier.sync(id), llvm.nvvm.barrier0.{popc,and,or}(pred)
    warp    llvm.nvvm.shfl.sync.{down,up,bfly,idx}.{i32,f32}[p](mask, value, b, c),
            llvm.nvvm.vote.{ballot,any,all,uni}.sync(mask, pred),
            llvm.nvvm.bar.warp.sync(mask)

A warp collective's contribution starts with its member mask. Shuffles follow the PTX
ISA's shfl.sync: c holds the clamp lane (bits 0-4) and the segment mask (bits 8-12); a
source lane out of the clamp reads the thread's own value, and so (the GPU leaves it
undefined) does a source lane that did not take part.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

WARP = 32


@dataclass(eq=False)
class Collective:
    """One collective call site: `block` (every thread of the block) or `warp` (the
    lanes of its mask) scope, the slot its result goes to, a thread's contribution
    (payload(r)) and resolve(contributions) -> results, both by thread or lane."""
    scope: str
    instr: ir.Instruction
    dest: int
    payload: Callable
    resolve: Callable

    def describe(self) -> str:
        return f"`{str(self.instr).strip()}` in block {self.instr.parent.name}"


def _barrier(counting: str | None):
    def resolve(contributions: list) -> list:
        if counting is None:
            return [None] * len(contributions)
        count = sum(1 for pred in contributions if pred)
        result = {"popc": count, "and": int(count == len(contributions)),
                  "or": int(count > 0)}[counting]
        return [result] * len(contributions)
    return resolve


def _shuffle(mode: str, with_predicate: bool):
    def resolve(lanes: dict) -> dict:
        results = {}
        for lane, (_, value, b, c) in lanes.items():
            b, clamp, segment = b & 31, c & 31, (c >> 8) & 31
            top = (lane & segment) | (clamp & ~segment & 31)
            if mode == "up":
                source = lane - b
                valid = source >= top
            elif mode == "down":
                source = lane + b
                valid = source <= top
            elif mode == "bfly":
                source = lane ^ b
                valid = source <= top
            else:
                source = (lane & segment) | (b & ~segment & 31)
                valid = source <= top
            given = lanes.get(source) if valid else None
            result = value if given is None else given[1]
            results[lane] = (result, int(valid)) if with_predicate else result
        return results
    return resolve


def _vote(mode: str):
    def resolve(lanes: dict) -> dict:
        ballot = sum(1 << lane for lane, (_, pred) in lanes.items() if pred)
        votes = [pred for _, pred in lanes.values()]
        result = {"ballot": ballot, "any": int(any(votes)), "all": int(all(votes)),
                  "uni": int(all(votes) or not any(votes))}[mode]
        return {lane: result for lane in lanes}
    return resolve


def _payload(slots: list):
    if not slots:
        return lambda r: None
    if len(slots) == 1:
        only, = slots
        return lambda r: r[only]
    return lambda r: tuple([r[s] for s in slots])


def make(name: str, instr, program) -> Collective | None:
    """The Collective of a call to `name`, or None when `name` is not a collective."""
    parts = name.split(".")
    args = [program.slot(arg) for arg in instr.args]
    dest = program.slot(instr) if not isinstance(instr.type, ir.VoidType) else 0
    if name in ("llvm.nvvm.barrier0", "llvm.nvvm.barrier.cta.sync.aligned.all",
                "llvm.nvvm.barrier.cta.sync.all", "llvm.nvvm.barrier.sync",
                "llvm.nvvm.barrier.sync.aligned"):
        return Collective("block", instr, dest, _payload([]), _barrier(None))
    if name.startswith("llvm.nvvm.barrier0.") and parts[-1] in ("popc", "and", "or"):
        return Collective("block", instr, dest, _payload(args), _barrier(parts[-1]))
    if name.startswith("llvm.nvvm.shfl.sync.") and len(parts) == 6 and \
            parts[4] in ("down", "up", "bfly", "idx") and parts[5] in ("i32", "f32", "i32p",
                                                                      "f32p"):
        return Collective("warp", instr, dest, _payload(args),
                          _shuffle(parts[4], parts[5].endswith("p")))
    if name.startswith("llvm.nvvm.vote.") and name.endswith(".sync") and len(parts) == 5 \
            and parts[3] in ("ballot", "any", "all", "uni"):
        return Collective("warp", instr, dest, _payload(args), _vote(parts[3]))
    if name == "llvm.nvvm.bar.warp.sync":
        return Collective("warp", instr, dest, lambda r: (r[args[0]],),
                          lambda lanes: dict.fromkeys(lanes))
    return None
