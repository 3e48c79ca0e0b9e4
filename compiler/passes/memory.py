"""Memory planning and traffic: liveness over the schedule, buffers reused by
intermediates whose lifetimes do not overlap, and the bytes each kernel moves.

The schedule is the graph's node order. Views and scalar constants allocate nothing (a
view keeps its base alive). Graph outputs are written into buffers of their own, made
before the run (the caller keeps them), so they are not pooled.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ir.graph import Graph, TensorType, Value
from ir.ops import VIEW, Op

FREE = VIEW | {Op.SCALAR}


def nbytes(t: TensorType) -> int | None:
    if not t.is_static:
        return None
    return t.numel() * t.dtype.itemsize


@dataclass
class MemoryPlan:
    buffer_of: dict[Value, int] = field(default_factory=dict)  # intermediate -> buffer
    buffer_bytes: list[int] = field(default_factory=list)
    output_bytes: int = 0
    bytes_without_reuse: int = 0   # every intermediate in a buffer of its own

    @property
    def pooled_bytes(self) -> int:
        return sum(self.buffer_bytes)

    def summary(self) -> str:
        return (f"intermediates: {self.bytes_without_reuse} bytes without reuse, "
                f"{self.pooled_bytes} bytes in {len(self.buffer_bytes)} reused buffers; "
                f"outputs: {self.output_bytes} bytes")


def _base(graph: Graph) -> dict[Value, Value]:
    """Each value's memory owner (a view's base, through chains of views)."""
    owner = {v: v for v in graph.inputs}
    for node in graph.nodes:
        for v in node.outputs:
            owner[v] = owner.get(node.inputs[0], v) if node.op in VIEW and node.inputs \
                else v
    return owner


def own_outputs(graph: Graph) -> tuple[bool, ...]:
    """Per output of `graph`, whether its memory is its own at each run: made by a node
    of the graph (not a graph input or a scalar constant, nor a view of one) and seen
    through no other output, so the caller may keep it without a copy."""
    owner = _base(graph)
    made = {v for node in graph.nodes if node.op not in FREE for v in node.outputs}
    outputs_per_owner = Counter(owner[v] for v in graph.outputs)
    return tuple(owner[v] in made and outputs_per_owner[owner[v]] == 1
                 for v in graph.outputs)


def plan_memory(graph: Graph) -> MemoryPlan:
    if not all(v.type.is_static for n in graph.nodes for v in n.outputs):
        raise ValueError("memory planning needs static shapes")
    owner = _base(graph)
    last_use: dict[Value, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.input_values():
            last_use[owner[v]] = i
    outputs = {owner[v] for v in graph.outputs}
    plan = MemoryPlan()
    free: list[int] = []  # buffer ids not in use
    dying: dict[int, list[Value]] = {}
    for v, i in last_use.items():
        dying.setdefault(i, []).append(v)
    for i, node in enumerate(graph.nodes):
        if node.op not in FREE:
            for v in node.outputs:
                size = nbytes(v.type)
                if v in outputs:
                    plan.output_bytes += size
                    continue
                plan.bytes_without_reuse += size
                fits = [b for b in free if plan.buffer_bytes[b] >= size]
                if fits:
                    b = min(fits, key=lambda k: plan.buffer_bytes[k])
                    free.remove(b)
                else:
                    b = len(plan.buffer_bytes)
                    plan.buffer_bytes.append(size)
                plan.buffer_of[v] = b
        for v in dying.get(i, []):  # a buffer is free once its last reader has run
            if v in plan.buffer_of and v not in outputs:
                free.append(plan.buffer_of[v])
    return plan


@dataclass
class Traffic:
    kernels: int
    bytes_read: int
    bytes_written: int

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


def traffic(graph: Graph) -> Traffic:
    """Kernels launched and bytes they read and write (a view reads what it views, an
    expanded input is read at its own size, a scalar costs nothing)."""
    owner = _base(graph)
    kernels = read = written = 0
    for node in graph.nodes:
        if node.op in FREE:
            continue
        kernels += 1
        for v in {owner[x] for x in node.input_values()}:
            read += nbytes(v.type) or 0
        for v in node.outputs:
            written += nbytes(v.type) or 0
    return Traffic(kernels, read, written)
