"""What a fused `gemm` node's body becomes on kiln's GEMM, read from the IR alone:

    prologue     the nodes that make the product's operands (views, elementwise
                 prologues), minus the transposes that the GEMM's flags take
    product      mm or bmm of two values, each maybe read through its transpose flag
    store        the leading epilogue that the GEMM's store fuses, in its order: bias,
                 activation, scale, residual
    rest         the epilogue after that, as one elementwise graph

`plan_gemm_node(body)` is a pure function of the body Graph (gemm_node.GemmNode runs
what it returns); a body it cannot plan raises CannotLower with the reason.

The store's steps must be consecutive nodes of the body, each the only reader of the
one before. So it does not take a bias or residual made inside the body (such as a
view of an input), a second activation, a step out of the store's order, or a step
whose result is read twice or changes the type. Nor a scale whose `scalar` constant
the body defines after the product: that node stands between two steps (fusion puts a
constant just before the `mul` that reads it), so such a scale, and what follows it,
runs in the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

from runtime.layout import CannotLower
from runtime.cpu.gemm import DTYPES, HALF_OPERANDS
from ir.records import activations
from ir.graph import Graph, GraphBuilder, Node, Value
from ir.ops import Op

STORE_ACTIVATIONS = {(op, tuple(sorted(attrs.items()))): name
                     for name, (op, attrs) in activations().items()}
"""(op, attributes) -> the name the GEMM's store applies it under, from the op records."""
GEMM_DTYPES = DTYPES  # kiln's GEMM kernels
HALF_PRODUCTS = frozenset(HALF_OPERANDS["float32"])
"""16-bit operands the GEMM multiplies into float32 and rounds back in its store: a
product of them fuses no epilogue into the store (eager rounds the product before the
next op, and the store would round once after it); the epilogue runs in `rest`."""
_STAGE = {"bias": 0, "scale": 2, "residual": 3}  # activations: 1


@dataclass(frozen=True)
class StoreEpilogue:
    """What the GEMM's store applies to the product, in this order: `bias` (a body input
    of one value per column), `activation` (one of gemm ACTIVATIONS), multiplication by
    `scale`, `residual` (a body input of the output's shape) added; `nodes`: the body
    nodes this replaces, in order (none: the store writes the bare product)."""
    nodes: tuple[Node, ...] = ()
    bias: Value | None = None
    activation: str | None = None
    scale: float = 1.0
    residual: Value | None = None


@dataclass(frozen=True)
class GemmNodePlan:
    """A fused gemm node's body as kiln's GEMM runs it (see the module docstring).

    `prologue` computes `operands` (or the body inputs they are) from the body's
    inputs; None when nothing runs before the product. `transposes`: whether the GEMM
    reads each operand transposed. `batched`: bmm rather than mm. `specialise`: every
    size is known when compiled (kernels specialised to them may be made). The store
    writes `result`. `rest` (None when the store ends the body) computes `rest_outputs`
    from `result` (its first input) and `rest_inputs` (the other body values it
    reads). `input_positions`: where a, b, bias and residual are among the body's
    inputs when the product and its store are the whole body (a call then indexes its
    inputs), else None."""
    prologue: Graph | None
    operands: tuple[Value, Value]
    transposes: tuple[bool, bool]
    batched: bool
    specialise: bool
    store: StoreEpilogue
    result: Value
    rest: Graph | None
    rest_inputs: tuple[Value, ...]
    rest_outputs: tuple[Value, ...]
    input_positions: tuple[int | None, ...] | None


def plan_gemm_node(body: Graph) -> GemmNodePlan:
    """The plan of a fused gemm node's body; CannotLower when it has other than one
    product, a product of non-float values, or an output that is not the product's
    epilogue."""
    products = [n for n in body.nodes if n.op in (Op.MM, Op.BMM)]
    if len(products) != 1:
        raise CannotLower("a gemm kernel with other than one matrix product")
    product = products[0]
    if not takes_product(product):
        raise CannotLower(f"{product.outputs[0].type.dtype.name} matrix products")
    index = body.nodes.index(product)
    before, after = body.nodes[:index], body.nodes[index + 1:]
    computed = {v for n in after for v in n.outputs} | {product.outputs[0]}
    if any(v not in computed for v in body.outputs):
        raise CannotLower("a gemm kernel whose outputs are not its product's epilogue")
    users, producers = body.users(), body.producers()
    operands, transposes = _operands(body, product, users, producers)
    views = {v for v, flag in zip(product.input_values(), transposes) if flag}
    prologue = _prologue(body, before, product, after, views)
    if product.outputs[0].type.dtype.name in HALF_PRODUCTS:
        store, result = StoreEpilogue(), product.outputs[0]
    else:
        store, result = _store_epilogue(body, product, after, users, producers)
    rest_nodes = after[len(store.nodes):]
    rest, rest_inputs, rest_outputs = (_rest_graph(body, result, rest_nodes, producers)
                                       if rest_nodes else (None, (), ()))
    positions = None
    read = (*operands, store.bias, store.residual)
    if prologue is None and rest is None and body.outputs == (result,) and all(
            v is None or v in body.inputs for v in read):
        positions = tuple(None if v is None else body.inputs.index(v) for v in read)
    return GemmNodePlan(prologue, operands, transposes, product.op is Op.BMM,
                        all(v.type.is_static for v in product.input_values()), store,
                        result, rest, rest_inputs, rest_outputs, positions)


def takes_product(node: Node, half: bool = True) -> bool:
    """Whether kiln's GEMM computes the mm or bmm `node`: float32 or float64 operands,
    or (with `half`) bfloat16 or float16 ones."""
    names = GEMM_DTYPES + tuple(HALF_PRODUCTS) if half else GEMM_DTYPES
    return all(v.type.dtype.name in names for v in node.input_values())


def _operands(body: Graph, product: Node, users: dict, producers: dict) -> tuple:
    """The product's operands, each replaced by the body input it transposes when it is
    `t` (or a transpose of the last two dims) of one, read by nothing else: the GEMM
    reads the input with its transpose flag instead of a view made at every call.
    Returns (operands, their transpose flags)."""
    operands, flags = [], []
    for v in product.input_values():
        node = producers.get(v)
        rank = len(v.type.shape)
        swaps_last_two = node is not None and (node.op is Op.T or (
            node.op is Op.TRANSPOSE and sorted(d % rank for d in (
                node.attr["dim0"], node.attr["dim1"])) == [rank - 2, rank - 1]))
        if swaps_last_two and rank >= 2 and node.input_values()[0] in body.inputs and \
                len(users[v]) == 1:
            operands.append(node.input_values()[0])
            flags.append(True)
        else:
            operands.append(v)
            flags.append(False)
    return tuple(operands), tuple(flags)


def _prologue(body: Graph, before: tuple, product: Node, after: tuple,
              views: set) -> Graph | None:
    """The nodes before the product as a graph of what the product and the epilogue
    read from them; without the transposes in `views` (the GEMM's flags take them) and
    whatever only they needed."""
    read = set(product.input_values()) | {v for n in after for v in n.input_values()}
    needed = tuple(v for n in before for v in n.outputs if v in read and v not in views)
    nodes = list(before)
    if views:
        wanted, nodes = set(needed), []
        for n in reversed(before):
            if any(v in wanted for v in n.outputs):
                nodes.insert(0, n)
                wanted.update(n.input_values())
    return Graph(body.inputs, tuple(nodes), needed, "operands") if nodes else None


def _store_epilogue(body: Graph, product: Node, after: tuple, users: dict,
                    producers: dict) -> tuple[StoreEpilogue, Value]:
    """The leading epilogue nodes the GEMM's store can do, in its order, each reading
    the previous one's result alone; and the value they end on."""
    chain, out_type = product.outputs[0], product.outputs[0].type
    parts: dict = {}
    nodes: list[Node] = []
    last_stage = -1
    for node in after:
        if chain in body.outputs or len(users[chain]) != 1 or users[chain][0] is not node \
                or node.outputs[0].type != out_type:
            break
        others = [v for v in node.input_values() if v != chain]
        role = _store_role(node, others, body, producers, out_type.shape)
        stage = _STAGE.get(role, 1)
        if role is None or stage <= last_stage:
            break
        last_stage = stage
        if role == "scale":
            parts["scale"] = float(producers[others[0]].attr["value"])
        elif role in ("bias", "residual"):
            parts[role] = others[0]
        else:
            parts["activation"] = role
        nodes.append(node)
        chain = node.outputs[0]
    return StoreEpilogue(tuple(nodes), **parts), chain


def _store_role(node: Node, others: list, body: Graph, producers: dict, shape) -> str | None:
    """What `node` is to the store ("bias", "residual", "scale" or an activation's
    name), reading the chain and `others`; None if the store cannot do it."""
    if node.op is Op.ADD and node.attr.get("alpha", 1) == 1 and len(others) == 1:
        other = others[0]
        if other in body.inputs and tuple(other.type.shape) == tuple(shape):
            return "residual"
        if other in body.inputs and len(other.type.shape) == 1 and \
                other.type.shape[0] == shape[-1]:
            return "bias"
    elif _activation(node) is not None and not others:
        return _activation(node)
    elif node.op is Op.MUL and len(others) == 1 and others[0] in producers and \
            producers[others[0]].op is Op.SCALAR:
        return "scale"
    return None


def _activation(node: Node) -> str | None:
    """The store's name for an activation node (gelu with approximate="tanh" is
    gelu_tanh), or None: its attributes other than their defaults must be the record's."""
    defaults = {a.name: a.default for a in node.op.schema.arguments if a.has_default}
    given = tuple(sorted((k, v) for k, v in node.attr.items() if defaults.get(k, object()) != v))
    return STORE_ACTIVATIONS.get((node.op, given))


def _rest_graph(body: Graph, result: Value, rest: tuple, producers: dict) -> tuple:
    """The epilogue the store could not take as one elementwise graph over the store's
    result (input a0) and the values it reads (scalars copied in); returns (graph, the
    body values of its other inputs, the body values of its outputs)."""
    b = GraphBuilder()
    env = {result: b.input(result.type, "a0")}
    inputs = []
    produced = {v for n in rest for v in n.outputs}
    for n in rest:
        for v in n.input_values():
            if v in env or v in produced:
                continue
            producer = producers.get(v)
            if producer is not None and producer.op is Op.SCALAR:
                (env[v],) = b.add(Op.SCALAR, [], producer.attrs, [v.type])
            else:
                env[v] = b.input(v.type, f"a{len(env)}")
                inputs.append(v)
        ins = [tuple(env[x] for x in a) if isinstance(a, tuple) else
               (None if a is None else env[a]) for a in n.inputs]
        env.update(zip(n.outputs, b.add(n.op, ins, n.attrs, [v.type for v in n.outputs])))
    outputs = tuple(v for v in body.outputs if v in produced)
    return b.build([env[v] for v in outputs], name="elementwise"), tuple(inputs), outputs
