"""GEMM kernels of the native backend: a fused `gemm` node (views and prologues of its
operands, mm or bmm, an elementwise epilogue) runs as kiln's own GEMM
(compiler/gemm/api.py), with the leading part of the epilogue that the GEMM can
fuse into its store (bias, relu/tanh/gelu/silu, scale, residual) fused there, and the
rest of the epilogue as one native elementwise kernel."""
from __future__ import annotations

from compiler import interpreter
from compiler.backends.native.pointwise import NotNative, PointwiseNode
from compiler.gemm.api import Epilogue, bmm, gemm
from compiler.gemm.ir.kernel import ACTIVATIONS
from eager.tensor import from_array
from ir.graph import Graph, GraphBuilder, Node, Value
from ir.ops import Op

_ACTIVATIONS = {Op.RELU: "relu", Op.TANH: "tanh", Op.SILU: "silu", Op.GELU: "gelu"}
_FLOATS = ("float32", "float64")


class GemmNode:
    """A fused `gemm` node as kiln's GEMM with the epilogue its store takes, the rest of
    the epilogue as a PointwiseNode."""

    def __init__(self, node: Node):
        body = node.attr["body"]
        products = [n for n in body.nodes if n.op in (Op.MM, Op.BMM)]
        if len(products) != 1:
            raise NotNative("a gemm kernel with other than one matrix product")
        product = products[0]
        if any(v.type.dtype.name not in _FLOATS for v in product.input_values()):
            raise NotNative(f"{product.outputs[0].type.dtype.name} matrix products")
        index = body.nodes.index(product)
        self.body, self.product = body, product
        after = body.nodes[index + 1:]
        defined_before = [v for n in body.nodes[:index] for v in n.outputs]
        needed = [v for v in defined_before
                  if v in product.input_values() or any(v in n.input_values() for n in after)]
        self.before = Graph(body.inputs, body.nodes[:index], tuple(needed), "operands")
        self.fused, self.chain = _store_epilogue(body, product, after)
        fused_nodes = [n for n, _ in self.fused]
        rest = [n for n in after if n not in fused_nodes]
        computed = {v for n in after for v in n.outputs} | {product.outputs[0]}
        if any(v not in computed for v in body.outputs):
            raise NotNative("a gemm kernel whose outputs are not its product's epilogue")
        self.rest = _rest_kernel(body, self.chain, rest) if rest else None
        self.fallback_reason = ""
        self.kind = "gemm"
        self._operands, self._transposes, views = _operands(body, product, self.before)
        needed = [v for v in self.before.outputs if v not in views]
        if len(needed) < len(self.before.outputs):  # transposes went into the GEMM's flags
            wanted, kept = set(needed), []
            for n in reversed(self.before.nodes):  # and what the other operands need
                if any(v in wanted for v in n.outputs):
                    kept.insert(0, n)
                    wanted.update(n.input_values())
            self.before = Graph(body.inputs, kept, tuple(needed), "operands")
        self._before = interpreter.prepare(self.before) if self.before.nodes else None
        self._product = bmm if product.op is Op.BMM else gemm
        # sizes known when compiled get kernels specialised to them; symbolic ones
        # (dynamic=True) vary by design: the shape-generic kernels serve them
        self._specialise = all(v.type.is_static for v in product.input_values())
        self._bias = self._residual = self._activation = None  # bias: per column, as in linear
        self._scale = 1.0
        for node, role in self.fused:
            other = next((v for v in node.input_values() if v != product.outputs[0]
                          and v not in (n.outputs[0] for n, _ in self.fused)), None)
            if role == "bias":
                self._bias = other
            elif role == "residual":
                self._residual = other
            elif role == "scale":
                self._scale = self._scalar(node)
            else:
                self._activation = role
        # everything the product reads is an input and it is the only output: calls
        # index their inputs, no environment
        extras = [v for v in (self._bias, self._residual) if v is not None]
        self._by_index = None
        if self._before is None and self.rest is None and body.outputs == (self.chain,) \
                and all(v in body.inputs for v in (*self._operands, *extras)):
            where = {v: i for i, v in enumerate(body.inputs)}
            self._by_index = tuple(None if v is None else where[v] for v in (
                *self._operands, self._bias, self._residual))

    @property
    def artifacts(self) -> list:
        return self.rest[0].artifacts if self.rest else []

    def __call__(self, inputs: list) -> list:
        if self._by_index is not None:
            a, b, bias, residual = self._by_index
            return [self._run(inputs[a], inputs[b], None if bias is None else inputs[bias],
                              None if residual is None else inputs[residual])]
        env = dict(zip(self.body.inputs, inputs))
        if self._before is not None:
            env.update(zip(self.before.outputs, self._before(inputs)))
        a, b = (env[v] for v in self._operands)
        value = env[self.chain] = self._run(
            a, b, None if self._bias is None else env[self._bias],
            None if self._residual is None else env[self._residual])
        if self.rest is not None:
            kernel, rest_inputs, rest_outputs = self.rest
            env.update(zip(rest_outputs, kernel([value] + [env[v] for v in rest_inputs])))
        return [env[v] for v in self.body.outputs]

    def _run(self, a, b, bias, residual):
        """The product of tensors a and b with the fused epilogue (bias and residual
        tensors or None), as a new tensor."""
        epilogue = None
        if self.fused:
            epilogue = Epilogue(bias=None if bias is None else bias._np(),
                                activation=self._activation, scale=self._scale,
                                residual=None if residual is None else residual._np())
        trans_a, trans_b = self._transposes
        return from_array(self._product(a._np(), b._np(), trans_a=trans_a, trans_b=trans_b,
                                        epilogue=epilogue, specialise=self._specialise))

    def _scalar(self, node: Node) -> float:
        for v in node.input_values():
            for n in self.body.nodes:
                if n.op is Op.SCALAR and v in n.outputs:
                    return float(n.attr["value"])
        raise NotNative("scale without a constant")


def _operands(body: Graph, product: Node, before: Graph) -> tuple[tuple, tuple, set]:
    """The product's operands, each replaced by the body input it transposes when it is
    `t` (or a transpose of the last two dims) of one, read by nothing else: the GEMM
    reads the input with its transpose flag instead of a view made at every call.
    Returns (operands, their transpose flags, the views replaced)."""
    producers = {v: n for n in before.nodes for v in n.outputs}
    users: dict = {}
    for n in body.nodes:
        for v in n.input_values():
            users[v] = users.get(v, 0) + 1
    operands, flags, views = [], [], set()
    for v in product.input_values():
        node = producers.get(v)
        source = node.input_values()[0] if node is not None else None
        rank = len(v.type.shape)
        swaps_last_two = node is not None and (node.op is Op.T or (
            node.op is Op.TRANSPOSE and sorted(d % rank for d in (
                node.attr["dim0"], node.attr["dim1"])) == [rank - 2, rank - 1]))
        if swaps_last_two and rank >= 2 and source in body.inputs and users[v] == 1:
            operands.append(source)
            flags.append(True)
            views.add(v)
        else:
            operands.append(v)
            flags.append(False)
    return tuple(operands), tuple(flags), views


def _store_epilogue(body: Graph, product: Node, after) -> tuple[list, Value]:
    """The leading epilogue nodes the GEMM's store can do, in its order (bias, activation,
    scale, residual), each reading the previous one's result; and the value they end on."""
    producers = {v: n for n in body.nodes for v in n.outputs}
    users: dict = {}
    for n in body.nodes:
        for v in n.input_values():
            users.setdefault(v, []).append(n)
    chain, fused, stage = product.outputs[0], [], 0
    out_shape = product.outputs[0].type.shape
    for node in after:
        if chain in body.outputs or len(users.get(chain, [])) != 1 or \
                users[chain][0] is not node or node.outputs[0].type != product.outputs[0].type:
            break
        others = [v for v in node.input_values() if v != chain]
        role = None
        if node.op is Op.ADD and node.attr.get("alpha", 1) == 1 and len(others) == 1:
            other = others[0]
            if other in body.inputs and tuple(other.type.shape) == tuple(out_shape):
                role = "residual"
            elif other in body.inputs and len(other.type.shape) == 1 and \
                    other.type.shape[0] == out_shape[-1]:
                role = "bias"
        elif node.op in _ACTIVATIONS and not others:
            role = _ACTIVATIONS[node.op]
            if node.attr.get("approximate") == "tanh":
                role = "gelu_tanh"
        elif node.op is Op.MUL and len(others) == 1 and producers.get(others[0]) is not None \
                and producers[others[0]].op is Op.SCALAR:
            role = "scale"
        stage_of = {"bias": 0, "residual": 3, "scale": 2}.get(role, 1)
        if role is None or stage_of < stage or any(
                r == role or (r in ACTIVATIONS and role in ACTIVATIONS) for _, r in fused):
            break
        stage = stage_of
        fused.append((node, role))
        chain = node.outputs[0]
    return fused, chain


def _rest_kernel(body: Graph, chain: Value, rest: list):
    """The epilogue the store could not take, as one native elementwise kernel over the
    GEMM's result and the values it reads."""
    b = GraphBuilder()
    env = {chain: b.input(chain.type, "a0")}
    inputs = []
    for n in rest:
        for v in n.input_values():
            if v not in env and not any(v in m.outputs for m in rest):
                producer = next((m for m in body.nodes if v in m.outputs), None)
                if producer is not None and producer.op is Op.SCALAR:
                    (env[v],) = b.add(Op.SCALAR, [], producer.attrs, [v.type])
                    continue
                env[v] = b.input(v.type, f"a{len(env)}")
                inputs.append(v)
        ins = [tuple(env[x] for x in a) if isinstance(a, tuple) else
               (None if a is None else env[a]) for a in n.inputs]
        env.update(zip(n.outputs, b.add(n.op, ins, n.attrs, [v.type for v in n.outputs])))
    produced = {v for n in rest for v in n.outputs}
    outputs = [v for v in body.outputs if v in produced]
    graph = b.build([env[v] for v in outputs], name="elementwise")
    fused = Node(Op.FUSED, (tuple(b._inputs),), (("kind", "elementwise"), ("body", graph)),
                 tuple(graph.outputs))
    return PointwiseNode(fused), inputs, outputs
