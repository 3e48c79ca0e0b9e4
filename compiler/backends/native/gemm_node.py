"""GEMM kernels of the native backend: a fused `gemm` node (views and prologues of its
operands, mm or bmm, an elementwise epilogue) runs as kiln's own GEMM
(runtime/cpu/gemm/api.py), with the leading part of the epilogue that the GEMM can
fuse into its store (bias, relu/tanh/gelu/silu, scale, residual) fused there, and the
rest of the epilogue as one native elementwise kernel. backends/gemm_plan.py reads the
body; this file runs what it planned."""
from __future__ import annotations

import functools

from compiler import interpreter
from compiler.backends.gemm_plan import HALF_PRODUCTS, plan_gemm_node
from compiler.backends.native.pointwise import PointwiseNode
from compiler.backends.views import LeadingViews
from eager.tensor import from_array
from ir.graph import Graph, Node
from ir.ops import VIEW, Op
from runtime.llvm.jit import KernelPending, deferring_call


class GemmNode:
    """A fused `gemm` node as kiln's GEMM with the epilogue its store takes, the rest of
    the epilogue as a PointwiseNode. `plan` is what gemm_plan made of its body."""

    def __init__(self, node: Node):
        self.body = node.attr["body"]
        self.plan = plan = plan_gemm_node(self.body)
        self.fallback_reason = ""
        self.calls_while_compiling = 0  # interpreted while a worker compiled its kernels
        self.kind = "gemm"
        self._prologue = _prologue(plan.prologue) if plan.prologue else None
        self._rest = _elementwise_node(plan.rest) if plan.rest else None
        # the GEMM stack loads with the first gemm node, not with the backend (a graph
        # without products never imports it: ~25 ms)
        from runtime.cpu.gemm import api
        # what a call reads, kept on the instance for the per-call path
        self._product = api.bmm if plan.batched else api.gemm
        self._epilogue = api.Epilogue
        self._operands, self._transposes = plan.operands, plan.transposes
        self._specialise = plan.specialise
        store = plan.store
        self._fused = bool(store.nodes)
        self._bias, self._residual = store.bias, store.residual
        self._activation, self._scale = store.activation, store.scale
        self._by_index = plan.input_positions
        dtype = plan.result.type.dtype
        # 16-bit operands: the store rounds the float32 product to their type
        self._out_dtype = dtype.np if dtype.name in HALF_PRODUCTS else None

    @property
    def artifacts(self) -> list:
        return self._rest.artifacts if self._rest else []

    def __call__(self, inputs: list) -> list:
        try:  # a product seen again gets a kernel of its own: that one is deferred too
            return deferring_call(self._native, inputs)
        except KernelPending:  # a GEMM kernel compiling in the background
            self.calls_while_compiling += 1
            return self._interpreted(inputs)

    @functools.cached_property
    def _interpreted(self):
        """The node's body through the reference interpreter, prepared once."""
        return interpreter.prepare_checked(self.body)

    def _native(self, inputs: list) -> list:
        if self._by_index is not None:
            a, b, bias, residual = self._by_index
            return [self._run(inputs[a], inputs[b], None if bias is None else inputs[bias],
                              None if residual is None else inputs[residual])]
        env = dict(zip(self.body.inputs, inputs))
        if self._prologue is not None:
            env.update(zip(self.plan.prologue.outputs, self._prologue(inputs)))
        a, b = (env[v] for v in self._operands)
        value = env[self.plan.result] = self._run(
            a, b, None if self._bias is None else env[self._bias],
            None if self._residual is None else env[self._residual])
        if self._rest is not None:
            rest_inputs = [value] + [env[v] for v in self.plan.rest_inputs]
            env.update(zip(self.plan.rest_outputs, self._rest(rest_inputs)))
        return [env[v] for v in self.body.outputs]

    def _run(self, a, b, bias, residual):
        """The product of tensors a and b with the fused epilogue (bias and residual
        tensors or None), as a new tensor."""
        epilogue = None
        if self._fused:
            epilogue = self._epilogue(bias=None if bias is None else bias._np(),
                                      activation=self._activation, scale=self._scale,
                                      residual=None if residual is None else residual._np())
        trans_a, trans_b = self._transposes
        return from_array(self._product(a._np(), b._np(), trans_a=trans_a, trans_b=trans_b,
                                        epilogue=epilogue, specialise=self._specialise,
                                        out_dtype=self._out_dtype))


def _prologue(graph: Graph):
    """The prologue as a callable: views alone are made directly per layout."""
    if all(n.op in VIEW for n in graph.nodes):
        return LeadingViews(graph)
    return interpreter.prepare(graph)


def _elementwise_node(graph: Graph) -> PointwiseNode:
    """An elementwise graph as a native kernel: a fused node holding it."""
    fused = Node(Op.FUSED, (graph.inputs,), (("kind", "elementwise"), ("body", graph)),
                 graph.outputs)
    return PointwiseNode(fused)
