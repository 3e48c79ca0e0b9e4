"""What the passes share: rebuilding a graph node by node (with fresh, canonical value
names), and result types from the ops' Meta kernels."""
from __future__ import annotations

from eager.dispatcher import ATEN, DispatchKey
from eager.kernels._common import meta_empty
from ir.graph import Graph, GraphBuilder, Node, Sym, SymbolicSize, TensorType, Value
from ir.ops import Op


class Rewriter:
    """Builds the new graph while a pass walks the old one. `env` maps each old value to
    the new value that now stands for it."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.b = GraphBuilder()
        self.env: dict[Value, Value] = {v: self.b.input(v.type, v.name) for v in graph.inputs}
        self.scalars: dict[Value, object] = {}  # new value -> its Python number

    def map(self, i):
        if isinstance(i, tuple):
            return tuple(self.env[v] for v in i)
        return None if i is None else self.env[i]

    def emit(self, op: Op, inputs, attrs, types=None) -> tuple[Value, ...]:
        """Add a node over new values; its types come from the Meta kernel when not given."""
        attrs = tuple(attrs.items()) if isinstance(attrs, dict) else tuple(attrs)
        if types is None:
            types = infer_types(op, inputs, attrs, self.scalars)
        outs = self.b.add(op, inputs, attrs, types)
        if op is Op.SCALAR:
            self.scalars[outs[0]] = dict(attrs)["value"]
        return outs

    def copy(self, node: Node) -> tuple[Value, ...]:
        outs = self.emit(node.op, [self.map(i) for i in node.inputs], node.attrs,
                         [v.type for v in node.outputs])
        self.env.update(zip(node.outputs, outs))
        return outs

    def alias(self, old: Value, new: Value) -> None:
        self.env[old] = new

    def finish(self) -> Graph:
        return self.b.build([self.env[v] for v in self.graph.outputs], self.graph.name)


def scalar_values(graph: Graph) -> dict[Value, object]:
    """The graph's values made by `scalar` nodes, with their numbers."""
    return {n.outputs[0]: n.attr["value"] for n in graph.nodes if n.op is Op.SCALAR}


def _meta(v: Value, scalars: dict, sizes: dict):
    from eager.tensor import wrap_scalar
    if v in scalars:
        w = wrap_scalar(scalars[v])
        m = meta_empty((), w.dtype)
        m._wrapped = True
        return m
    return meta_empty(tuple(sizes.get(d, d) for d in v.type.shape), v.type.dtype)


# Stand-in values for symbolic sizes (two sets, see _symbolic_types): far from any size
# a graph holds, and apart from each other
_SAMPLES = (100_003, 200_003)


def infer_types(op: Op, inputs, attrs, scalars: dict | None = None) -> tuple[TensorType, ...]:
    """Result types of `op` over values `inputs` with `attrs`, from its Meta kernel."""
    scalars = scalars or {}
    if op is Op.SCALAR:
        from eager.tensor import wrap_scalar
        return (TensorType((), wrap_scalar(dict(attrs)["value"]).dtype),)
    if op is Op.FUSED:
        return tuple(v.type for v in dict(attrs)["body"].outputs)
    values = [v for i in inputs for v in (i if isinstance(i, tuple) else (i,))
              if v is not None]
    symbols = list(dict.fromkeys(d for v in values for d in v.type.shape
                                 if isinstance(d, Sym)))
    if symbols:
        return _symbolic_types(op, inputs, attrs, scalars, symbols)
    return _meta_types(op, inputs, attrs, scalars, {})


def _symbolic_types(op: Op, inputs, attrs, scalars: dict, symbols: list) -> tuple:
    """Result types over symbolic sizes: the Meta kernel runs twice, each symbol standing
    for a different large number each time; a result size that is the same both times is
    that number, one that follows a symbol's stand-ins is that symbol, and any other (a
    product, a sum) cannot be written in the symbols: SymbolicSize."""
    runs = [_meta_types(op, inputs, attrs, scalars,
                        {s: base + 16 * k for k, s in enumerate(symbols)})
            for base in _SAMPLES]
    of = {(_SAMPLES[0] + 16 * k, _SAMPLES[1] + 16 * k): s for k, s in enumerate(symbols)}
    types = []
    for first, second in zip(*runs):
        dims = []
        for a, b in zip(first.shape, second.shape):
            if a == b:
                dims.append(a)
            elif (a, b) in of:
                dims.append(of[(a, b)])
            else:
                raise SymbolicSize(f"a result size of {op.qualified_name} over symbolic "
                                   f"sizes {', '.join(symbols)} is none of them")
        types.append(TensorType(tuple(dims), first.dtype, first.device))
    return tuple(types)


def _meta_types(op: Op, inputs, attrs, scalars: dict, sizes: dict) -> tuple:
    """Result types from the Meta kernel, symbols read as `sizes` says."""
    it = iter(inputs)
    named = dict(attrs)
    args, kwargs = [], {}
    device = "cpu"
    for a in op.schema.arguments:
        if a.type.base == "Tensor":
            v = next(it)
            if isinstance(v, tuple):
                value = [_meta(x, scalars, sizes) for x in v]
                device = v[0].type.device if v else device
            else:
                value = None if v is None else _meta(v, scalars, sizes)
                device = v.type.device if v is not None else device
        else:
            value = named[a.name]
            value = list(value) if isinstance(value, tuple) and a.type.is_list else value
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    out = ATEN[op].call_key(DispatchKey.Meta, *args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return tuple(TensorType(tuple(o.shape), o.dtype, device) for o in outs)


def node_types(node: Node, scalars: dict) -> tuple[TensorType, ...]:
    """For ir.verify(graph, infer=...): a node's result types from its Meta kernel."""
    return infer_types(node.op, list(node.inputs), node.attrs, scalars)


def verify_types(graph: Graph) -> Graph:
    """ir.verify with result types checked against the Meta kernels."""
    from ir.verifier import verify
    scalars = scalar_values(graph)
    return verify(graph, infer=lambda node: node_types(node, scalars))
