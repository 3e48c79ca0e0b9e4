"""Split a joint graph (compiler/joint.py) into a forward graph that saves what backward
needs and a backward graph that reads it, deciding what to save and what to recompute.

The first cut saves every value backward reads that does not depend on a tangent: the
forward computes it and keeps it until backward (eager autograd saves much the same).
Then each saved value made by a cheap op (a pointwise op from the op records, a view, a
scalar) is recomputed in backward instead, from the values its chain of cheap ops starts
at, when those cost fewer bytes to keep than the value itself: values already saved and
the region's own inputs (which the caller holds anyway) cost nothing. Recomputed
chains sit in the backward graph beside the ops that read them, so fusion puts them in
the same kernels. Both cuts' saved bytes are reported (explain()).

Not done: a true min-cut over the graph (several values recomputed together can pay
where none does alone), and recomputing through reductions or products.
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler.joint import Joint, NotDifferentiable
from ir.records import pointwise_ops
from ir.graph import Graph, GraphBuilder, Value
from ir.ops import VIEW, Op

FREE = VIEW | {Op.SCALAR}
RECOMPUTABLE = frozenset(pointwise_ops()) | FREE | {Op.TO_COPY}


@dataclass(frozen=True)
class Partition:
    forward: Graph    # primals, constants -> region outputs, saved values
    backward: Graph   # saved values, tangents, constants -> input gradients
    saved: tuple      # per saved value: ("input", primal index) or ("forward", output index)
    bytes_first_cut: int | None  # saved bytes per call, inputs not counted (None: symbolic)
    bytes_saved: int | None
    recomputed: int   # nodes the backward graph recomputes


def partition(joint: Joint) -> Partition:
    g = joint.graph
    primals = g.inputs[:joint.n_primals]
    tangents = g.inputs[joint.n_primals:joint.n_primals + joint.n_tangents]
    constants = g.inputs[joint.n_primals + joint.n_tangents:]
    n_outputs = len(joint.outputs_need_grad)
    outputs, grads = g.outputs[:n_outputs], g.outputs[n_outputs:]
    producer = {v: n for n in g.nodes for v in n.outputs}
    held = set(primals) | set(constants)  # values the caller holds anyway

    on_tangents = set(tangents)
    for n in g.nodes:
        if any(v in on_tangents for v in n.input_values()):
            on_tangents.update(n.outputs)
    if any(v in on_tangents for v in outputs):
        raise NotDifferentiable("a region output depends on a tangent")
    backward_nodes = {producer[v] for v in _ancestors(grads, producer, stop=set())
                      if v in producer and v in on_tangents}
    saved = _boundary(backward_nodes, grads, on_tangents)
    first_cut = _bytes(saved - held)
    recomputed = _recompute(saved, producer, held)
    saved_list = [v for v in _ordered(g, saved) if v not in constants]

    outputs_and_saved = list(outputs) + [v for v in saved_list if v not in held]
    forward = _subgraph(g, list(primals) + list(constants), outputs_and_saved, producer,
                        "forward")
    backward = _subgraph(g, saved_list + list(tangents) + list(constants), grads, producer,
                         "backward")
    where = []
    later = len(outputs)
    for v in saved_list:
        if v in primals:
            where.append(("input", primals.index(v)))
        else:
            where.append(("forward", later))
            later += 1
    return Partition(forward, backward, tuple(where), first_cut, _bytes(saved - held),
                     recomputed)


def _ancestors(values, producer, stop: set) -> set:
    """The values needed to compute `values`, not looking past `stop`."""
    seen, stack = set(), list(values)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in producer and v not in stop:
            stack.extend(producer[v].input_values())
    return seen


def _boundary(backward_nodes: set, grads, on_tangents: set) -> set:
    """Values that backward reads and the forward can compute."""
    read = [v for n in backward_nodes for v in n.input_values()] + list(grads)
    return {v for v in read if v not in on_tangents}


def _recompute(saved: set, producer: dict, held: set) -> int:
    """Replace saved values by the chains of cheap ops that recompute them, where that
    keeps fewer bytes (changes `saved` in place); returns the nodes recomputed. A chain
    of views alone is always recomputed: a saved view keeps its base's memory anyway."""
    recomputed = set()
    views_first = sorted(saved, key=lambda v: (not _view_made(v, producer), -_size(v)))
    for v in views_first:
        if v not in saved or v not in producer or producer[v].op not in RECOMPUTABLE:
            continue
        views = producer[v].op in FREE
        chain, frontier = _chain(v, producer, saved | held, FREE if views else RECOMPUTABLE)
        if chain is None:
            continue
        cost = _bytes(frontier - saved - held)
        if not views and (cost is None or (cost and cost >= _size(v))):
            continue  # a tie keeps the value: its kernel writes it where it is made
        saved.discard(v)
        saved.update(frontier)
        recomputed |= chain
    return len(recomputed)


def _view_made(v: Value, producer: dict) -> bool:
    return v in producer and producer[v].op in FREE


def _chain(v: Value, producer: dict, available: set, cheap: frozenset):
    """The nodes of `cheap` ops that compute `v` from available values or values made by
    other ops (the frontier); (None, None) for a chain that reaches a tangent."""
    chain, frontier, stack = set(), set(), [v]
    while stack:
        u = stack.pop()
        node = producer.get(u)
        if u is not v and (u in available or node is None or node.op not in cheap):
            if node is None and u not in available:
                return None, None
            frontier.add(u)
            continue
        if node not in chain:
            chain.add(node)
            stack.extend(node.input_values())
    return chain, frontier


def _size(v: Value) -> int:
    return v.type.numel() * v.type.dtype.itemsize if v.type.is_static else 0


def _bytes(values) -> int | None:
    if not all(v.type.is_static for v in values):
        return None
    return sum(_size(v) for v in values)


def _ordered(g: Graph, values: set) -> list:
    """`values` in the joint graph's order: inputs first, then by definition."""
    order = list(g.inputs) + [v for n in g.nodes for v in n.outputs]
    return [v for v in order if v in values]


def _subgraph(g: Graph, inputs: list, outputs: list, producer: dict, name: str) -> Graph:
    """The graph computing `outputs` from `inputs` with the joint graph `g`'s nodes."""
    needed = _ancestors(outputs, producer, stop=set(inputs))
    position = {n.outputs[0]: i for i, n in enumerate(g.nodes)}
    b = GraphBuilder()
    rename = {v: b.input(v.type, f"x{i}") for i, v in enumerate(inputs)}
    nodes = {producer[v] for v in needed if v in producer and v not in rename}
    for node in sorted(nodes, key=lambda n: position[n.outputs[0]]):
        for v in node.input_values():
            if v not in rename:
                raise NotDifferentiable(f"the {name} graph reads {v}, which it cannot "
                                        "compute")
        if node.op is Op.DETACH:  # no autograd inside a compiled graph: the value itself
            rename[node.outputs[0]] = rename[node.inputs[0]]
            continue
        new = b.add(node.op, [_renamed(i, rename) for i in node.inputs], node.attrs,
                    [v.type for v in node.outputs])
        rename.update(zip(node.outputs, new))
    return b.build([rename[v] for v in outputs], name=name)


def _renamed(i, rename):
    if isinstance(i, tuple):
        return tuple(rename[x] for x in i)
    return None if i is None else rename[i]
