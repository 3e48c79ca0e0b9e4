"""Dynamic sizes: when two captures of a function differ only in some input sizes and
give the same graph up to those sizes, the sizes become symbols and one entry serves
them all.

Two graphs *match up to sizes* when they have the same ops, attributes and wiring, the
same dtypes and ranks, and the same constant inputs; every size that differs between
them is replaced by a symbol (s0, s1, ... one per pair of sizes), which is
anti-unification: the most specific graph that has both as instances.
"""
from __future__ import annotations

import numpy as np

from ir.graph import Graph, Node, TensorType, Value


def _same_constant(a, b) -> bool:
    if a is b:
        return True
    if a.dtype is not b.dtype or tuple(a.shape) != tuple(b.shape):
        return False
    return bool(np.array_equal(a.detach()._host_np(), b.detach()._host_np()))


def generalize(g1: Graph, consts1: list, g2: Graph, consts2: list) -> Graph | None:
    """The graph with symbolic sizes that both g1 and g2 instantiate, or None."""
    if len(g1.nodes) != len(g2.nodes) or len(g1.inputs) != len(g2.inputs) or \
            len(g1.outputs) != len(g2.outputs):
        return None
    symbols: dict[tuple[int, int], str] = {}

    def unify(t1: TensorType, t2: TensorType) -> TensorType | None:
        if t1.dtype is not t2.dtype or t1.device != t2.device or len(t1.shape) != len(t2.shape):
            return None
        dims = []
        for a, b in zip(t1.shape, t2.shape):
            dims.append(a if a == b else symbols.setdefault((a, b), f"s{len(symbols)}"))
        return TensorType(tuple(dims), t1.dtype, t1.device)

    rename: dict[Value, Value] = {}
    rename2: dict[Value, Value] = {}

    def pair(v1: Value, v2: Value) -> Value | None:
        t = unify(v1.type, v2.type)
        if t is None or v1.name != v2.name:
            return None
        new = Value(v1.name, t)
        rename[v1], rename2[v2] = new, new
        return new

    inputs = []
    for v1, v2, c1, c2 in zip(g1.inputs, g2.inputs, consts1, consts2):
        if (c1 is None) != (c2 is None) or (c1 is not None and not _same_constant(c1, c2)):
            return None
        new = pair(v1, v2)
        if new is None:
            return None
        inputs.append(new)
    nodes = []
    for n1, n2 in zip(g1.nodes, g2.nodes):
        if n1.op is not n2.op or n1.attrs != n2.attrs or len(n1.outputs) != len(n2.outputs):
            return None
        ins = []
        for i1, i2 in zip(n1.inputs, n2.inputs):
            if isinstance(i1, tuple) and isinstance(i2, tuple) and len(i1) == len(i2):
                if any(rename.get(a) is not rename2.get(b) for a, b in zip(i1, i2)):
                    return None
                ins.append(tuple(rename[a] for a in i1))
            elif i1 is None and i2 is None:
                ins.append(None)
            elif isinstance(i1, Value) and isinstance(i2, Value) and \
                    rename.get(i1) is rename2.get(i2) and i1 in rename:
                ins.append(rename[i1])
            else:
                return None
        outs = []
        for v1, v2 in zip(n1.outputs, n2.outputs):
            new = pair(v1, v2)
            if new is None:
                return None
            outs.append(new)
        nodes.append(Node(n1.op, tuple(ins), n1.attrs, tuple(outs)))
    if any(rename.get(a) is not rename2.get(b) for a, b in zip(g1.outputs, g2.outputs)):
        return None
    return Graph(tuple(inputs), tuple(nodes), tuple(rename[v] for v in g1.outputs), g1.name)


def probe_arguments(args: tuple, kwargs: dict) -> list:
    """The call's arguments with dim 0 grown by one (zeros), to learn which sizes a
    function's graph depends on: first every tensor's, then (when that cannot run, as
    when a weight's dim 0 must match another's) the first tensor's alone, as a batch
    dimension would. Empty when there is no tensor to grow."""
    from eager.factories import zeros
    from eager.tensor import Tensor
    grown = []

    def grow(v, only_first: bool):
        if isinstance(v, Tensor) and v.dim() >= 1:
            if only_first and grown:
                return v
            grown.append(v)
            shape = (v.shape[0] + 1,) + tuple(v.shape[1:])
            return zeros(shape, dtype=v.dtype, device=v.device,
                         requires_grad=v.requires_grad)
        if isinstance(v, (list, tuple)):
            return type(v)(grow(x, only_first) for x in v)
        if isinstance(v, dict):
            return {k: grow(x, only_first) for k, x in v.items()}
        return v

    probes = [(grow(args, False), grow(kwargs, False))]
    if len(grown) > 1:
        grown.clear()
        probes.append((grow(args, True), grow(kwargs, True)))
    return probes if grown else []
