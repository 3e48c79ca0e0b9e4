"""Regions whose outputs need gradients: a compiled forward that saves what backward
needs, and a compiled backward run by one autograd node, CompiledFunctionBackward.

    TrainingRegion(graph, needs_grad, backend)
      trace_joint   the region's graph run with eager autograd on lazy stand-ins, and
                    eager's engine run over the nodes it recorded (compiler/joint.py)
      partition     forward graph (outputs + saved values), backward graph (saved values
                    + tangents -> input gradients), recompute decisions (partition.py)
      backend       both graphs optimised, fused and lowered like any other graph
    calling it      runs the forward with grad mode off and gives the outputs that need a
                    gradient one CompiledFunctionBackward node (output_nr = their place),
                    whose edges are the region inputs' gradient edges

backward(create_graph=True) cannot differentiate a compiled backward graph: the node then
runs the region's graph again with eager autograd over the inputs and differentiates that
with eager's engine (explain() says so). To do that the node keeps every input of the
region, not only those backward reads.
"""
from __future__ import annotations

import functools

from compiler import interpreter
from compiler.capture import run_region
from compiler.joint import trace_joint
from compiler.partition import partition
from compiler.passes.memory import own_outputs
from eager.autograd.engine import grad as autograd_grad
from eager.autograd.function import _FREED, Node, SavedTensor, gradient_edge
from eager.autograd.grad_mode import enable_grad, set_grad_enabled
from eager.factories import zeros

CREATE_GRAPH_REASON = ("backward(create_graph=True) ran the region again with eager "
                       "autograd: a compiled backward graph is not differentiable")


class TrainingRegion:
    """A region's compiled forward and backward; a callable `run(inputs) -> outputs`
    like every compiled region, its outputs carrying autograd history."""

    def __init__(self, graph, needs_grad: tuple, backend):
        self.source = graph
        self.needs_grad = needs_grad
        self.joint = trace_joint(graph, needs_grad)
        self.plan = partition(self.joint)
        self.forward = backend.compile(self.plan.forward)
        self._backend = backend
        self._backward = None
        self.backward_calls = 0
        self.eager_backward_reason = ""

    @property
    def backward(self):
        """The compiled backward graph (compiled at the first backward)."""
        if self._backward is None:
            self._backward = self._backend.compile(self.plan.backward)
        return self._backward

    @functools.cached_property
    def own_grads(self) -> tuple[bool, ...]:
        """Per region input, whether the backward graph's gradient for it is a buffer of
        its own (memory.own_outputs of the graph the backend runs: its optimised graph,
        or the backward graph itself where the eager backend interprets it)."""
        own = iter(own_outputs(getattr(self.backward, "graph", self.plan.backward)))
        return tuple(next(own) if gets else False for gets in self.joint.inputs_get_grad)

    def __call__(self, inputs: list) -> list:
        constants = self.joint.constants
        with set_grad_enabled(False):
            results = self.forward(list(inputs) + constants if constants else list(inputs))
        n = len(self.joint.outputs_need_grad)
        outputs = results[:n]
        saved = [SavedTensor(inputs[i] if kind == "input" else results[i], is_output=False)
                 for kind, i in self.plan.saved]
        node = CompiledFunctionBackward(self, inputs, saved, outputs)
        for nr, (t, needs) in enumerate(zip(outputs, self.joint.outputs_need_grad)):
            if needs:
                t.grad_fn, t.output_nr = node, nr
                t._set_requires_grad(True)
        return outputs

    def run_backward(self, node: CompiledFunctionBackward, grads: dict) -> tuple:
        self.backward_calls += 1
        tangents = []
        for nr, (needs, meta) in enumerate(zip(self.joint.outputs_need_grad, node._outputs)):
            if needs:
                g = grads.get(nr)
                tangents.append(g if g is not None else zeros(meta[0], dtype=meta[1]))
        saved = [s.unpack(None) for s in node._saved]
        results = iter(run_region(self.backward, self.plan.backward,
                                  saved + tangents + self.joint.constants))
        return tuple(next(results) if gets else None for gets in self.joint.inputs_get_grad)

    def eager_backward(self, node: CompiledFunctionBackward, grads: dict) -> tuple:
        """Gradients with history (create_graph=True): the forward again in eager ops."""
        self.eager_backward_reason = CREATE_GRAPH_REASON
        inputs = [s.unpack(None) for s in node._inputs]
        with enable_grad():
            # a view of each input is what the gradients are taken for: its node is
            # the edge, so the engine stops there instead of running earlier history
            wrt = [t.view_as(t) if needs else t for t, needs in zip(inputs, self.needs_grad)]
            outputs = interpreter.run(self.source, wrt)
        pairs = [(o, grads[nr]) for nr, o in enumerate(outputs)
                 if self.joint.outputs_need_grad[nr] and grads.get(nr) is not None]
        targets = [t for t, needs in zip(wrt, self.needs_grad) if needs]
        got = iter(autograd_grad([o for o, _ in pairs], targets, [g for _, g in pairs],
                                 create_graph=True, allow_unused=True))
        return tuple(next(got) if needs else None for needs in self.needs_grad)

    def describe(self) -> list[str]:
        """explain()'s lines for this region's forward and backward."""
        plan = self.plan
        lines = [f"    autograd: compiled forward and backward ({plan.recomputed} node(s) "
                 f"recomputed in backward)",
                 f"    saved for backward per call: {_kib(plan.bytes_first_cut)} saving every "
                 f"value backward reads, {_kib(plan.bytes_saved)} after recomputing cheap "
                 f"ones (inputs not counted); {len(plan.saved)} tensor(s) saved",
                 f"    backward ran {self.backward_calls} time(s) compiled"]
        if self.eager_backward_reason:
            lines.append(f"    eager fallback: {self.eager_backward_reason}")
        lines.append("    forward graph:")
        lines += ["      " + ln for ln in str(plan.forward).splitlines()]
        lines.append("    backward graph:")
        lines += ["      " + ln for ln in str(plan.backward).splitlines()]
        return lines


def _kib(n) -> str:
    return "? bytes (symbolic sizes)" if n is None else f"{n} bytes"


class CompiledFunctionBackward(Node):
    """The backward of a compiled region: one node for all of its outputs."""
    __slots__ = ("_region", "_inputs", "_saved", "_outputs", "_released")
    takes_all_grads = True

    def __init__(self, region: TrainingRegion, inputs: list, saved: list, outputs: list):
        needs = region.needs_grad
        super().__init__(gradient_edge(t) if n else (None, 0) for t, n in zip(inputs, needs))
        self._input_meta = tuple((t._shape, t.dtype, t.device) for t in inputs)
        self._region = region
        self._inputs = [SavedTensor(t, is_output=False) for t in inputs]
        self._saved = saved
        self._outputs = [(t._shape, t.dtype) for t in outputs]
        self._released = False

    @property
    def own_grads(self) -> tuple[bool, ...]:
        return self._region.own_grads

    def apply(self, grads: dict, create_graph: bool) -> tuple:
        if self._released:
            raise RuntimeError(_FREED)
        if create_graph:
            return self._region.eager_backward(self, grads)
        return self._region.run_backward(self, grads)

    def release(self) -> None:
        self._released = True
        self._inputs = self._saved = ()

