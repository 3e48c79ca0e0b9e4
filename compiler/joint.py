"""The joint forward-backward graph of a region, traced through eager's own autograd.

A region's graph is run by the reference interpreter over lazy stand-ins for its inputs
(those that need a gradient made leaves that require grad) with the Autograd keys on, so
every op records eager's backward node above the Tracer key; then eager's engine
(`run_backward`) runs those nodes from one lazy tangent per differentiable output,
and the derivative formulas' ops land in the same region. Nothing here knows a
derivative: the rules are the op records', as eagerly.

The joint graph's inputs are the primals (the region's inputs), then the tangents, then
any concrete tensors a formula made (factories); its outputs are the region's outputs,
then the gradient of each input that needs one.
"""
from __future__ import annotations

from dataclasses import dataclass

from compiler import capture, interpreter
from eager.autograd.engine import run_backward
from eager.autograd.function import gradient_edge
from eager.autograd.grad_mode import enable_grad
from ir.graph import Graph


class NotDifferentiable(Exception):
    """The region cannot get a compiled backward; the message says why."""


@dataclass(frozen=True)
class Joint:
    graph: Graph
    n_primals: int
    n_tangents: int
    constants: list          # concrete tensors for the inputs after the tangents
    outputs_need_grad: tuple  # per region output: whether it has a gradient
    inputs_get_grad: tuple    # per region input: whether a gradient is computed for it


def trace_joint(graph: Graph, needs_grad: tuple) -> Joint:
    """The joint graph of `graph` when the inputs flagged in `needs_grad` need gradients."""
    trace = capture.Trace(compile_region=None, known_sources={})
    region = trace.region
    primals = [region.lazy_input(v.type) for v in graph.inputs]
    for p, needs in zip(primals, needs_grad):
        if needs:
            p._set_requires_grad(True)
    token = capture.start(trace)
    try:
        with enable_grad():
            outputs = interpreter.run(graph, primals)
        differentiable = [o for o in outputs if o.requires_grad]
        tangents = [region.lazy_input(o_value.type) for o_value, o in
                    zip(graph.outputs, outputs) if o.requires_grad]
        if not differentiable:
            raise NotDifferentiable("no output of the region needs a gradient")
        edges = [gradient_edge(p) if needs else None for p, needs in zip(primals, needs_grad)]
        roots = [(*gradient_edge(o), t) for o, t in zip(differentiable, tangents)]
        grads = run_backward(roots, retain_graph=False, create_graph=False,
                             capture={e for e in edges if e is not None}, accumulate=False)
        grad_values = [grads.get(e) if e is not None else None for e in edges]
        outs = [region.value_for(o) for o in outputs] + \
            [region.value_for(g) for g in grad_values if g is not None]
    finally:
        capture.stop(token)
    n_primals, n_tangents = len(primals), len(tangents)
    joint, _ = region.graph(outs, keep_inputs=True)
    constants = region.input_tensors[n_primals + n_tangents:]
    return Joint(joint, n_primals, n_tangents, constants,
                 tuple(o.requires_grad for o in outputs),
                 tuple(g is not None for g in grad_values))
