"""Autograd kernels, made from the derivative table and registered under the Autograd
alias key. Each one runs the op below Autograd and, when an input needs a gradient,
records the op's backward node on the output with what the formula saved."""
from __future__ import annotations

from eager.autograd.derivatives import DERIVATIVES, Derivative
from eager.autograd.function import SavedTensor, gradient_edge, node_class
from eager.dispatcher import ATEN, DispatchKey
from eager.tensor import Tensor, ops
from ir.ops import Op

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


def record(d: Derivative, cls, bound: dict, out):
    """Attach a backward node for `out` if any differentiable input requires grad."""
    inputs = _flatten(bound, d.inputs)
    needs = tuple(isinstance(t, Tensor) and t._requires_grad for t in inputs)
    primary = out[0] if isinstance(out, tuple) else out
    if not any(needs) or not primary.dtype.is_floating_point:
        return out
    node = cls(tuple(gradient_edge(t) if isinstance(t, Tensor) else (None, 0) for t in inputs),
               _save(d, bound, out, primary), needs)
    node._input_meta = tuple((t._shape, t.dtype, t.device) if isinstance(t, Tensor) else None
                             for t in inputs)
    primary.grad_fn = node
    primary.output_nr = 0
    primary._set_requires_grad(True)
    return out


def _autograd_kernel(d: Derivative):
    handle = ATEN[d.op]
    schema = d.op.schema
    cls = node_class(d.name, d.formula)

    def kernel(*args, **kwargs):
        out = handle.redispatch(_BELOW, *args, **kwargs)
        return record(d, cls, schema.bind(args, kwargs), out)
    kernel.__name__ = f"{schema.name}_autograd"
    kernel.__qualname__ = kernel.__name__
    return kernel


# In place: the data is written by the backend kernel; the graph is that of the
# out-of-place op applied to a clone of the old value, which then becomes self's history.
_OUT_OF_PLACE = {
    Op.ADD_: lambda s, other, alpha=1: ops.add(s, other, alpha=alpha),
    Op.SUB_: lambda s, other, alpha=1: ops.sub(s, other, alpha=alpha),
    Op.MUL_: lambda s, other: ops.mul(s, other),
    Op.DIV_: lambda s, other: ops.div(s, other),
    Op.CLAMP_: lambda s, min=None, max=None: ops.clamp(s, min, max),
    Op.ZERO_: lambda s: ops.mul(s, 0),
    Op.FILL_: lambda s, value: ops.add(ops.mul(s, 0), value),
    Op.COPY_: lambda s, src: ops.add(ops.mul(s, 0), ops._to_copy(src, dtype=s.dtype)),
}


def _inplace_kernel(op: Op, out_of_place):
    handle = ATEN[op]

    def kernel(self, *args, **kwargs):
        tensors = [a for a in (self,) + args + tuple(kwargs.values()) if isinstance(a, Tensor)]
        if not any(t._requires_grad for t in tensors):
            return handle.redispatch(_BELOW, self, *args, **kwargs)
        if self.grad_fn is None and self._requires_grad:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        if self._base is not None:
            raise RuntimeError(f"{op.schema.name}(): kiln's autograd does not yet support "
                               "in-place operations on views when a gradient is needed; use "
                               "the out-of-place form")
        history = out_of_place(ops.clone(self), *args, **kwargs)
        handle.redispatch(_BELOW, self, *args, **kwargs)
        self.grad_fn, self.output_nr = history.grad_fn, history.output_nr
        self._set_requires_grad(True)
        return self
    kernel.__name__ = f"{op.schema.name}_autograd"
    kernel.__qualname__ = kernel.__name__
    return kernel


def register_all() -> None:
    for op, d in DERIVATIVES.items():
        ATEN[op].register(DispatchKey.Autograd, _autograd_kernel(d))
    for op, fn in _OUT_OF_PLACE.items():
        ATEN[op].register(DispatchKey.Autograd, _inplace_kernel(op, fn))


register_all()
