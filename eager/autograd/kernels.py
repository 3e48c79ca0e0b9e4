"""Autograd kernels, made from the derivative table and registered under the Autograd
alias key. Each one runs the op below Autograd and, when an input needs a gradient,
records the op's backward node on the output with what the formula saved."""
from __future__ import annotations

from operator import itemgetter

from eager.autograd.derivatives import DERIVATIVES, Derivative, rule_for
from eager.autograd.function import (SavedTensor, grad_accumulator, move_retained_grad,
                                     node_class)
from eager.device import device
from eager.dispatcher import ATEN, DispatchKey
from eager.tensor import Tensor, _dispatch_keys, ops
from ir.ops import INPLACE, Op

_BELOW = DispatchKey.AutogradMeta  # the lowest Autograd key: redispatch reaches backends
_FACTS = {"sizes": lambda t: tuple(t._shape), "dtype": lambda t: t.dtype,
          "device": lambda t: t.device}


_MISSING = object()
_LATER_RESULTS = {"result1": 1, "result2": 2}  # the outputs after the first, by position


class _Plan:
    """How one op's Autograd kernel reads its arguments: by position in the schema, so
    the common call (all positional) binds with no dictionary at all."""

    def __init__(self, d: Derivative, schema):
        self.d = d
        self.names = [a.name for a in schema.arguments]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.defaults = [a.default if a.has_default else _MISSING for a in schema.arguments]
        self.inputs = [self.index[n] for n in d.inputs]
        # whether an input is a Tensor[] (cat's): flat_inputs then expands lists
        self.lists = any(schema.arguments[i].type.is_list for i in self.inputs)
        # the differentiable inputs out of the argument values, as a tuple (no list pass)
        self.pick = (itemgetter(*self.inputs) if len(self.inputs) > 1 else
                     lambda vals, i=self.inputs[0]: (vals[i],))
        self.saves = []
        for name in d.save:
            if name == "result" or name in _LATER_RESULTS:
                self.saves.append((name, name, None, None))
            elif name in self.index:
                self.saves.append((name, "arg", self.index[name], None))
            else:
                arg, _, fact = name.rpartition("_")
                self.saves.append((name, "fact", self.index[arg], _FACTS[fact]))
        self.args_only = all(kind == "arg" for _, kind, _, _ in self.saves)
        self.save_args = [(name, i) for name, _, i, _ in self.saves]

    def values(self, args: tuple, kwargs: dict) -> list:
        if not kwargs and len(args) == len(self.names):
            return list(args)
        vals = list(args) + self.defaults[len(args):]
        for k, v in kwargs.items():
            vals[self.index[k]] = v
        return vals

    def bound(self, vals: list) -> dict:
        return dict(zip(self.names, vals))

    def flat_inputs(self, vals: list) -> list:
        flat = []
        for i in self.inputs:
            v = vals[i]
            if isinstance(v, (list, tuple)):
                flat.extend(v)
            else:
                flat.append(v)
        return flat

    def save(self, vals: list, out, primary) -> dict:
        saved = {}
        if self.args_only:  # only arguments (mm's self and mat2): the common case
            for name, i in self.save_args:
                v = vals[i]
                saved[name] = SavedTensor(v, False) if isinstance(v, Tensor) else v
            return saved
        for name, kind, i, get in self.saves:
            if kind == "result":
                saved[name] = SavedTensor(primary, is_output=True)
            elif kind in _LATER_RESULTS:  # (not the node's output: no grad_fn cycle)
                saved[name] = SavedTensor(out[_LATER_RESULTS[kind]], is_output=False)
            elif kind == "arg":
                v = vals[i]
                saved[name] = SavedTensor(v, is_output=False) if isinstance(v, Tensor) else v
            else:
                v = vals[i]
                saved[name] = [get(t) for t in v] if isinstance(v, (list, tuple)) else get(v)
        return saved


def record(plan: _Plan, cls, vals: list, out, saved_vals: list | None = None):
    """Attach a backward node for `out` if any differentiable input requires grad. The
    node's edges come from `vals`; what it saves from `saved_vals` (default `vals`)."""
    inputs = plan.flat_inputs(vals) if plan.lists else plan.pick(vals)
    needs, edges, metas = [], [], []
    for t in inputs:
        if isinstance(t, Tensor):
            # gradient_edge(t), inlined: this loop runs for every recorded op
            if t._requires_grad:
                needs.append(True)
                node = t.grad_fn
                edges.append((node, t.output_nr) if node is not None else
                             (t._grad_accumulator or grad_accumulator(t), 0))
            else:
                needs.append(False)
                edges.append(_NO_EDGE)
            metas.append((t._shape, t.dtype, t.device))
        else:
            needs.append(False)
            edges.append(_NO_EDGE)
            metas.append(None)
    primary = out[0] if isinstance(out, tuple) else out
    if True not in needs or not primary.dtype.is_floating_point:
        return out
    node = cls(tuple(edges), plan.save(vals if saved_vals is None else saved_vals, out, primary),
               tuple(needs))
    node._input_meta = tuple(metas)
    primary.grad_fn = node
    primary.output_nr = 0
    # _set_requires_grad(True), inlined: the dtype is a float's, checked above
    primary._requires_grad = True
    primary._keys = _GRAD_KEYS[primary.device.type]
    if plan.d.every_output:  # (var_mean's mean too)
        for nr, t in enumerate(out[1:], 1):
            if t.dtype.is_floating_point:
                t.grad_fn, t.output_nr = node, nr
                t._requires_grad, t._keys = True, _GRAD_KEYS[t.device.type]
    return out


_NO_EDGE = (None, 0)
_GRAD_KEYS = {kind: _dispatch_keys(device(kind), True) for kind in ("cpu", "cuda", "meta")}


def _node_chooser(plan: _Plan):
    """A function of the argument values giving the node class: the class named for the
    first matching PyTorch overload, else the rule's own. node_class makes each class at
    its first use (type() costs ~7 us: ~1 ms of `import eager` for every rule at once)."""
    d = plan.d
    saves, every = tuple(d.save), d.every_output
    if not d.overloads:
        return lambda vals: node_class(d.name, d.formula, saves, every)

    def choose(vals: list):
        bound = plan.bound(vals)
        for name, matches in d.overloads:
            if matches(bound):
                return node_class(name, d.formula, saves, every)
        return node_class(d.name, d.formula, saves, every)
    return choose


def _autograd_kernel(op: Op):
    handle, schema = ATEN[op], op.schema
    plan = _Plan(rule_for(op), schema)
    choose = _node_chooser(plan)
    fixed = []  # the node class, once made, of a rule without overloads
    n_args = len(plan.names)
    below = handle.below(_BELOW)

    def kernel(*args, **kwargs):
        if kwargs:
            out = below(*args, **kwargs)
            vals = plan.values(args, kwargs)
        else:  # the common call: no dictionary made or unpacked
            out = below(*args)
            vals = list(args) if len(args) == n_args else plan.values(args, kwargs)
        if fixed:
            cls = fixed[0]
        else:
            cls = choose(vals)
            if not plan.d.overloads:
                fixed.append(cls)
        return record(plan, cls, vals, out)
    kernel.__name__ = f"{schema.name}_autograd"
    kernel.__qualname__ = kernel.__name__
    return kernel


def _inplace_kernel(op: Op):
    """In place, `self` keeps its place in the graph: the node's edge for it is the one
    `self` had before the write, and a `self` the rule saves is a copy of the old value."""
    d, handle, schema = rule_for(op), ATEN[op], op.schema
    plan = _Plan(d, schema)
    choose = _node_chooser(plan)
    self_index = plan.index["self"]
    saves_result = "result" in d.save

    def kernel(*args, **kwargs):
        vals = plan.values(args, kwargs)
        self = vals[self_index]
        if not any(isinstance(t, Tensor) and t._requires_grad for t in plan.flat_inputs(vals)):
            return handle.redispatch(_BELOW, *args, **kwargs)
        if self.grad_fn is None and self._requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        if self._base is not None:
            raise RuntimeError(f"{schema.name}(): kiln's autograd does not yet support "
                               "in-place operations on views when a gradient is needed; use "
                               "the out-of-place form")
        saved_vals = vals
        if "self" in d.save:
            saved_vals = list(vals)
            saved_vals[self_index] = ops.clone(self)
        old_node, old_nr = self.grad_fn, self.output_nr
        handle.redispatch(_BELOW, *args, **kwargs)
        record(plan, choose(vals), vals, self, saved_vals)
        if saves_result:  # self is saved as the result: the write counted next is this op's
            for value in self.grad_fn._saved.values():
                if isinstance(value, SavedTensor) and value.is_output and value.version is not None:
                    value.version += 1
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
