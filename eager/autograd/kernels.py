"""Autograd kernels, made from the derivative table and registered under the Autograd
alias key. Each one runs the op below Autograd and, when an input needs a gradient,
records the op's backward node on the output with what the formula saved."""
from __future__ import annotations

from eager.autograd.derivatives import DERIVATIVES, Derivative, rule_for
from eager.autograd.function import (SavedTensor, gradient_edge, move_retained_grad,
                                     node_class)
from eager.dispatcher import ATEN, DispatchKey
from eager.tensor import Tensor, ops
from ir.ops import INPLACE, Op

_BELOW = DispatchKey.AutogradMeta  # the lowest Autograd key: redispatch reaches backends
_FACTS = {"sizes": lambda t: tuple(t._shape), "dtype": lambda t: t.dtype,
          "device": lambda t: t.device}


def _flatten(bound: dict, names) -> list:
    flat = []
    for name in names:
        v = bound[name]
        if isinstance(v, (list, tuple)):
            flat.extend(v)
        else:
            flat.append(v)
    return flat


def _save(d: Derivative, bound: dict, out, primary) -> dict:
    saved = {}
    for name in d.save:
        if name == "result":
            saved[name] = SavedTensor(primary, is_output=True)
        elif name == "result1":
            saved[name] = SavedTensor(out[1], is_output=False)
        elif name in bound:
            v = bound[name]
            saved[name] = SavedTensor(v, is_output=False) if isinstance(v, Tensor) else v
        else:
            arg, _, fact = name.rpartition("_")
            v = bound[arg]
            get = _FACTS[fact]
            saved[name] = [get(t) for t in v] if isinstance(v, (list, tuple)) else get(v)
    return saved


def record(d: Derivative, cls, bound: dict, out, saved_from: dict | None = None):
    """Attach a backward node for `out` if any differentiable input requires grad. The
    node's edges come from `bound`; what it saves from `saved_from` (default `bound`)."""
    inputs = _flatten(bound, d.inputs)
    needs = tuple(isinstance(t, Tensor) and t._requires_grad for t in inputs)
    primary = out[0] if isinstance(out, tuple) else out
    if not any(needs) or not primary.dtype.is_floating_point:
        return out
    node = cls(tuple(gradient_edge(t) if isinstance(t, Tensor) else (None, 0) for t in inputs),
               _save(d, bound if saved_from is None else saved_from, out, primary), needs)
    node._input_meta = tuple((t._shape, t.dtype, t.device) if isinstance(t, Tensor) else None
                             for t in inputs)
    primary.grad_fn = node
    primary.output_nr = 0
    primary._set_requires_grad(True)
    return out


def _node_chooser(d: Derivative):
    """A function of the bound arguments giving the node class: the class named for the
    first matching PyTorch overload, else the rule's own."""
    default = node_class(d.name, d.formula)
    overloads = [(matches, node_class(name, d.formula)) for name, matches in d.overloads]

    def choose(bound: dict):
        for matches, cls in overloads:
            if matches(bound):
                return cls
        return default
    return choose


def _autograd_kernel(op: Op):
    d, handle, schema = rule_for(op), ATEN[op], op.schema
    choose = _node_chooser(d)

    def kernel(*args, **kwargs):
        out = handle.redispatch(_BELOW, *args, **kwargs)
        bound = schema.bind(args, kwargs)
        return record(d, choose(bound), bound, out)
    kernel.__name__ = f"{schema.name}_autograd"
    kernel.__qualname__ = kernel.__name__
    return kernel


def _inplace_kernel(op: Op):
    """In place, `self` keeps its place in the graph: the node's edge for it is the one
    `self` had before the write, and a `self` the rule saves is a copy of the old value."""
    d, handle, schema = rule_for(op), ATEN[op], op.schema
    choose = _node_chooser(d)

    def kernel(*args, **kwargs):
        bound = schema.bind(args, kwargs)
        self = bound["self"]
        if not any(isinstance(t, Tensor) and t._requires_grad for t in _flatten(bound, d.inputs)):
            return handle.redispatch(_BELOW, *args, **kwargs)
        if self.grad_fn is None and self._requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        if self._base is not None:
            raise RuntimeError(f"{schema.name}(): kiln's autograd does not yet support "
                               "in-place operations on views when a gradient is needed; use "
                               "the out-of-place form")
        saved_from = {**bound, "self": ops.clone(self)} if "self" in d.save else bound
        old_node, old_nr = self.grad_fn, self.output_nr
        handle.redispatch(_BELOW, *args, **kwargs)
        record(d, choose(bound), bound, self, saved_from)
        if self._retains_grad:
            move_retained_grad(self, old_node, old_nr)
        return self
    kernel.__name__ = f"{schema.name}_autograd"
    kernel.__qualname__ = kernel.__name__
    return kernel


def register_all() -> None:
    for op in set(DERIVATIVES) | INPLACE:
        kernel = _inplace_kernel(op) if op in INPLACE else _autograd_kernel(op)
        ATEN[op].register(DispatchKey.Autograd, kernel)


register_all()
