"""The backward engine: runs nodes in dependency order (latest-created first among the
ready ones), summing the gradients that meet at a node, calling tensor hooks, and
capturing the gradients `autograd.grad` asks for."""
from __future__ import annotations

import heapq

from eager.autograd.function import AccumulateGrad, gradient_edge
from eager.autograd.grad_mode import _set as _set_grad_mode
from eager.dispatcher import tls
from eager.factories import ones_like, tensor
from eager.profiler import profile, record_function
from eager.tensor import Tensor


def _check_grad(node, i, grad, meta):
    shape, dtype, device = meta
    if grad._shape != shape:
        raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - "
                           f"got {list(grad._shape)} but expected shape compatible with "
                           f"{list(shape)}")
    if grad.dtype is not dtype:
        grad = grad.to(dtype)
    return grad


def _evaluate(node, grad, create_graph: bool, owned: bool) -> tuple:
    """Apply a node (telling an AccumulateGrad whether its gradient is its own to keep);
    while a profiler records, as a region named the way PyTorch names it."""
    args = (grad, create_graph, True) if owned else (grad, create_graph)
    if profile._active is None:
        return node.apply(*args)
    with record_function(f"autograd::engine::evaluate_function: {node.name()}"):
        return node.apply(*args)


def _dependencies(roots) -> dict:
    deps = {}
    stack = [n for n in roots]
    seen = set(stack)
    while stack:
        node = stack.pop()
        for child, _ in node.next_functions:
            if child is None:
                continue
            deps[child] = deps.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return deps


def _needed(roots, targets) -> set:
    """Nodes from which some target node can be reached (autograd.grad prunes the rest)."""
    parents: dict = {}
    stack, seen = list(roots), set(roots)
    while stack:
        node = stack.pop()
        for child, _ in node.next_functions:
            if child is None:
                continue
            parents.setdefault(child, []).append(node)
            if child not in seen:
                seen.add(child)
                stack.append(child)
    needed = set()
    stack = [t for t in targets if t in seen]
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            stack.extend(parents.get(node, ()))
    return needed


_final_callbacks = None  # while run_backward runs: the callbacks queue_callback added


def queue_callback(callback) -> None:
    """Run `callback()` once the backward pass now running has finished (after every
    node, hooks and AccumulateGrad included), as PyTorch's
    `Variable._execution_engine.queue_callback`: DistributedDataParallel waits there for
    its gradient all-reduces."""
    if _final_callbacks is None:
        raise RuntimeError("Final callbacks can only be installed during backward pass.")
    _final_callbacks.append(callback)


def _run_final_callbacks(callbacks: list) -> None:
    while callbacks:  # a callback may queue another
        callbacks.pop(0)()


def run_backward(roots, retain_graph: bool, create_graph: bool, capture=None,
                 accumulate: bool = True) -> dict:
    """Propagate gradients from `roots` [(node, output_nr, grad)].

    `capture` is a set of edges (node, output_nr); the gradients arriving there are
    returned as {edge: grad}. With accumulate=False, AccumulateGrad nodes do not run.
    The callbacks queue_callback adds meanwhile run at the end.
    """
    global _final_callbacks
    buffers: dict = {}
    root_nodes = []
    for node, nr, grad in roots:
        slot = buffers.setdefault(node, {})
        slot[nr] = grad if nr not in slot else slot[nr] + grad
        if node not in root_nodes:
            root_nodes.append(node)
    deps = _dependencies(root_nodes)
    needed = _needed(root_nodes, {n for n, _ in capture}) if capture is not None else None
    ready = [(-n._seq, id(n), n) for n in root_nodes if deps.get(n, 0) == 0]
    heapq.heapify(ready)
    captured = {}
    handed = set()  # AccumulateGrad nodes whose gradient no one else holds (own_grads)
    prev_mode = tls.grad_enabled
    outer_callbacks, _final_callbacks = _final_callbacks, []
    try:
        _set_grad_mode(create_graph)
        while ready:
            _, _, node = heapq.heappop(ready)
            grads = buffers.pop(node, {})
            if node._pre_hooks:
                _call_hooks(node._pre_hooks, grads)
            if capture is not None:
                for nr, g in grads.items():
                    if (node, nr) in capture:
                        captured[(node, nr)] = g
            given = grads if node.takes_all_grads else grads.get(0)
            has_grad = bool(grads) if node.takes_all_grads else given is not None
            run = has_grad and (needed is None or node in needed) and (
                accumulate or not isinstance(node, AccumulateGrad))
            if run:
                owned = node in handed and not node._pre_hooks and capture is None
                outputs = _evaluate(node, given, create_graph, owned)
                if not retain_graph:
                    node.release()
            else:
                outputs = ()
            own_grads, metas = node.own_grads, node._input_meta
            for i, (child, nr) in enumerate(node.next_functions):
                if child is None:
                    continue
                g = outputs[i] if i < len(outputs) else None
                if g is not None:
                    if metas and (g._shape != metas[i][0] or g.dtype is not metas[i][1]):
                        g = _check_grad(node, i, g, metas[i])
                    slot = buffers.setdefault(child, {})
                    if slot.get(nr) is None:
                        slot[nr] = g
                        if own_grads and own_grads[i] and isinstance(child, AccumulateGrad):
                            handed.add(child)
                    else:  # a sum is a new buffer: handed over still if the first was
                        slot[nr] = slot[nr] + g
                deps[child] -= 1
                if deps[child] == 0:
                    heapq.heappush(ready, (-child._seq, id(child), child))
        _run_final_callbacks(_final_callbacks)
    finally:
        _final_callbacks = outer_callbacks
        _set_grad_mode(prev_mode)
    return captured


def _call_hooks(hooks_by_output: dict, grads: dict) -> None:
    """Run tensor hooks on the gradients arriving at a node; a hook may replace one."""
    for nr, hooks in hooks_by_output.items():
        for hook in hooks:
            if grads.get(nr) is None:
                continue
            new = hook(grads[nr])
            if new is not None:
                if new._shape != grads[nr]._shape:
                    raise RuntimeError(f"hook {getattr(hook, '__name__', hook)!r} has changed "
                                       "the size of value")
                grads[nr] = new


def _root_grad(t, g):
    if g is None:
        if t.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        return ones_like(t)
    if not isinstance(g, Tensor):
        g = tensor(g, dtype=t.dtype)
    if g._shape != t._shape:
        raise RuntimeError(f"Mismatch in shape: grad_output[0] has a shape of {list(g._shape)} "
                           f"and output[0] has a shape of {list(t._shape)}.")
    return g


def _as_list(x):
    if x is None:
        return None
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _roots(tensors, grad_tensors):
    grads = _as_list(grad_tensors) or [None] * len(tensors)
    if len(grads) != len(tensors):
        raise RuntimeError(f"got {len(grads)} tensors and {len(tensors)} gradients")
    roots = []
    for i, (t, g) in enumerate(zip(tensors, grads)):
        if not t._requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               "a grad_fn")
        node, nr = gradient_edge(t)
        roots.append((node, nr, _root_grad(t, g)))
    return roots


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    tensors = _as_list(tensors)
    if retain_graph is None:
        retain_graph = create_graph
    roots = _roots(tensors, grad_tensors)
    if inputs is None:
        run_backward(roots, retain_graph, create_graph)
        return
    inputs = list({id(t): t for t in _as_list(inputs)}.values())  # each tensor once
    edges = [gradient_edge(t) for t in inputs]
    captured = run_backward(roots, retain_graph, create_graph, set(edges), accumulate=False)
    for t, edge in zip(inputs, edges):
        if edge in captured:
            g = captured[edge] if create_graph else captured[edge].detach()
            t.grad = g.clone() if t.grad is None else t.grad + g


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of `outputs` with respect to `inputs`, without touching `.grad`."""
    outputs = _as_list(outputs)
    inputs = _as_list(inputs)
    if retain_graph is None:
        retain_graph = create_graph
    if not all(t._requires_grad for t in inputs):
        raise RuntimeError("One of the differentiated Tensors does not require grad")
    edges = [gradient_edge(t) for t in inputs]
    captured = run_backward(_roots(outputs, grad_outputs), retain_graph, create_graph,
                            set(edges), accumulate=False)
    if not allow_unused and any(edge not in captured for edge in edges):
        raise RuntimeError("One of the differentiated Tensors appears to not have been used in "
                           "the graph. Set allow_unused=True if this is the desired behavior.")
    grads = (captured.get(edge) for edge in edges)
    return tuple(g if g is None or create_graph else g.detach() for g in grads)
