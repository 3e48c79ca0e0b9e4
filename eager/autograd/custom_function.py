"""Custom autograd functions (`torch.autograd.Function`): a user's forward and backward,
recorded as one backward node named `<ClassName>Backward`.

The node is the `ctx` the user's forward and backward see, as in PyTorch: what forward
sets on it (`ctx.k = k`) can be read from `y.grad_fn.k`. Forward runs with grad mode off;
backward runs with grad mode as the engine sets it (on under create_graph=True), so a
backward written in differentiable ops can itself be differentiated.

Under graph capture (`eager.compile`) a Function is a graph break (`run_eagerly`): the
region before it is compiled and run, the Function runs eagerly, capture goes on after.
"""
from __future__ import annotations

import functools
import inspect

from eager.autograd import function as _nodes
from eager.autograd.function import _FREED, Node, SavedTensor, _alias, gradient_edge
from eager.autograd.grad_mode import no_grad
from eager.dispatcher import tls
from eager.factories import zeros
from eager.tensor import Tensor, run_eagerly


class FunctionCtx:
    """What `forward` (or `setup_context`) tells backward through `ctx`."""

    def save_for_backward(self, *tensors) -> None:
        """Keep tensors (or None) for backward, checked against in-place changes."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError("save_for_backward can only save variables, but argument "
                                f"{i} is of type {type(t).__name__}")
        self.to_save = tensors

    def mark_dirty(self, *tensors) -> None:
        """Inputs that forward changed in place (and returns): they take the new history."""
        self.dirty_tensors = tensors

    def mark_non_differentiable(self, *tensors) -> None:
        """Outputs that get no gradient (requires_grad=False); backward still gets a
        gradient argument for each (zeros, unless set_materialize_grads(False))."""
        self.non_differentiable = tensors

    def set_materialize_grads(self, value: bool) -> None:
        """With False, backward gets None (not zeros) for outputs that got no gradient."""
        self.materialize_grads = bool(value)


class BackwardCFunction(Node, FunctionCtx):
    """The node of one Function call; each Function subclass has its own subclass of
    this, named `<ClassName>Backward`. Takes the gradients of all its outputs at once."""
    takes_all_grads = True
    materialize_grads = True
    _forward_cls = None  # the Function subclass; set on each generated node class

    def __init__(self):
        super().__init__()
        self.to_save = ()
        self.dirty_tensors = ()
        self.non_differentiable = ()
        self.needs_input_grad = ()
        self._saved = None            # tuple of SavedTensor or None, once forward ended
        self._released = False
        self._arg_is_tensor = ()      # per forward argument
        self._output_meta = ()        # per forward output: (shape, dtype, device) or None

    @property
    def saved_tensors(self) -> tuple:
        if self._released:
            raise RuntimeError(_FREED)
        if self._saved is None:
            return tuple(self.to_save)  # (forward, or setup_context, is still running)
        return tuple(s if s is None else s.unpack(self) for s in self._saved)

    def release(self) -> None:
        if self._saved:
            self._saved = ()
            self._released = True

    def apply(self, grads: dict, create_graph: bool) -> tuple:
        cls = self._forward_cls
        given = [self._grad_for(nr, meta, grads.get(nr))
                 for nr, meta in enumerate(self._output_meta)]
        result = cls.backward(self, *given)
        result = result if isinstance(result, tuple) else (result,)
        expected = len(self._arg_is_tensor)
        if len(result) < expected or any(g is not None for g in result[expected:]):
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {expected}, got {len(result)})")
        out = []
        for i, (g, is_tensor) in enumerate(zip(result, self._arg_is_tensor)):
            if not is_tensor:
                if g is not None:
                    raise RuntimeError(f"function {self.name()} returned a gradient different "
                                       f"than None at position {i + 1}, but the corresponding "
                                       "forward input was not a Variable")
                continue
            out.append(g if self.needs_input_grad[i] else None)
        return tuple(out)

    def _grad_for(self, nr: int, meta, grad):
        if grad is not None or meta is None or not self.materialize_grads:
            return grad
        shape, dtype, device = meta
        return zeros(shape, dtype=dtype, device=device)


class Function(FunctionCtx):
    """Subclass with static `forward(ctx, *args)` (or `forward(*args)` plus
    `setup_context(ctx, inputs, output)`) and `backward(ctx, *grad_outputs)` returning
    one gradient (or None) per forward argument; call with `MyFn.apply(*args)`."""
    _backward_cls = BackwardCFunction

    def __init_subclass__(cls, node_name: str | None = None, **kwargs):
        """`node_name` (a class keyword): the backward node's name where kiln's Function
        stands for one of PyTorch's built-in ops (`<ClassName>Backward` otherwise)."""
        super().__init_subclass__(**kwargs)
        if "vjp" in vars(cls) and "backward" not in vars(cls):
            cls.backward = cls.vjp
        name = node_name or f"{cls.__name__}Backward"
        cls._backward_cls = type(name, (BackwardCFunction,),
                                 {"_forward_cls": cls, "__module__": cls.__module__})

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs: tuple, output) -> None:
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    @staticmethod
    def vjp(ctx, *grad_outputs):
        """PyTorch's other name for backward: a subclass may define either."""
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        if cls.forward is Function.forward:
            raise NotImplementedError("You must implement the forward function for custom "
                                      "autograd.Function.")
        return run_eagerly(lambda: _apply(cls, args, kwargs),
                           f"autograd.Function {cls.__name__} runs eagerly")


def _has_own(cls, name: str) -> bool:
    return getattr(cls, name) is not getattr(Function, name)


def _apply(cls, args: tuple, kwargs: dict):
    node = cls._backward_cls()
    new_style = _has_own(cls, "setup_context")
    if new_style:
        args = _bind_defaults(cls.forward, args, kwargs)
        kwargs = {}
    node.needs_input_grad = tuple(isinstance(a, Tensor) and a._requires_grad for a in args)
    tensor_args = [a for a in args if isinstance(a, Tensor)]
    edges = [gradient_edge(t) for t in tensor_args]  # before forward may change one in place
    with no_grad():
        if new_style:
            output = cls.forward(*args)
            cls.setup_context(node, args, output)
        else:
            output = cls.forward(node, *args, **kwargs)
    if not (tls.grad_enabled and any(node.needs_input_grad)):
        return output
    node.next_functions = tuple(edges)
    node._input_meta = tuple((t._shape, t.dtype, t.device) for t in tensor_args)
    node._arg_is_tensor = tuple(isinstance(a, Tensor) for a in args)
    outputs = output if isinstance(output, tuple) else (output,)
    outputs = tuple(_wrap_output(node, nr, o, tensor_args) for nr, o in enumerate(outputs))
    node._output_meta = tuple((o._shape, o.dtype, o.device) if isinstance(o, Tensor) else None
                              for o in outputs)
    returned = {id(o) for o in outputs if isinstance(o, Tensor) and o.grad_fn is node}
    node._saved = tuple(None if t is None else SavedTensor(t, is_output=id(t) in returned)
                        for t in node.to_save)
    return outputs if isinstance(output, tuple) else outputs[0]


def _bind_defaults(forward, args: tuple, kwargs: dict) -> tuple:
    """The arguments as setup_context sees them: positional, defaults filled in."""
    bound = inspect.signature(forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.args


def _wrap_output(node: BackwardCFunction, nr: int, out, inputs: list):
    """Give one output its place in the graph: `node`'s output `nr`."""
    if not isinstance(out, Tensor):
        return out
    if any(out is t for t in node.dirty_tensors):
        if out.grad_fn is None and out._requires_grad:
            raise RuntimeError("a leaf Variable that requires grad has been used in an in-place "
                               "operation.")
        if out._base is not None and out._requires_grad:
            raise RuntimeError(f"{node.name()}: kiln's autograd does not yet support marking a "
                               "view dirty when a gradient is needed")
    elif any(out is t for t in inputs) or out._requires_grad:
        out = _alias(out)  # an input returned as it is: a new tensor over its memory
    if any(out is t for t in node.non_differentiable) or not out.dtype.is_floating_point:
        return out
    out.grad_fn = node
    out.output_nr = nr
    out._set_requires_grad(True)
    return out


class DelayedError(Node):
    """The node of a gradient computed by a @once_differentiable backward under
    create_graph=True: differentiating it again raises."""
    __slots__ = ("message",)

    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def apply(self, grad, create_graph: bool) -> tuple:
        raise RuntimeError(self.message)


def once_differentiable(backward):
    """Decorate a backward that is not itself differentiable: it runs under no_grad, and
    a gradient it returns under create_graph=True raises if differentiated again."""
    @functools.wraps(backward)
    def wrapper(ctx, *grad_outputs):
        with no_grad():
            result = backward(ctx, *grad_outputs)
        if not tls.grad_enabled or not any(isinstance(g, Tensor) and g._requires_grad
                                           for g in grad_outputs):
            return result
        node = DelayedError("trying to differentiate twice a function that was marked with "
                            "@once_differentiable")
        grads = result if isinstance(result, tuple) else (result,)
        marked = tuple(_delayed(node, nr, g) for nr, g in enumerate(grads))
        return marked if isinstance(result, tuple) else marked[0]
    return wrapper


def _delayed(node: DelayedError, nr: int, grad):
    if not isinstance(grad, Tensor) or not grad.dtype.is_floating_point:
        return grad
    out = _alias(grad)
    out.grad_fn = node
    out.output_nr = nr
    out._set_requires_grad(True)
    return out


# PyTorch's torch.autograd.function holds these names: they are attached from above to
# the module kiln's nodes live in (its counterpart), as _tensor_methods attaches methods
for _name in ("Function", "FunctionCtx", "BackwardCFunction", "once_differentiable"):
    setattr(_nodes, _name, globals()[_name])
