"""Backward graph nodes. A Node knows the edges to the nodes of its inputs
(`next_functions`) and turns the gradient of its output into gradients for its inputs.
Leaves that require grad end in an AccumulateGrad node."""
from __future__ import annotations

import itertools
import sys
import threading
import weakref

from eager.dispatcher import tls
from ir import dtypes
from eager.kernels.shape import detach

_sequence = itertools.count()

_FREED = ("Trying to backward through the graph a second time (or directly access saved "
          "tensors after they have already been freed). Saved intermediate values of the graph "
          "are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if "
          "you need to backward through the graph a second time or if you need to access saved "
          "tensors after calling backward.")


class Node:
    """Base of every backward node; subclasses are named as PyTorch names them."""
    __slots__ = ("next_functions", "_seq", "_pre_hooks", "_input_meta", "__weakref__")
    takes_all_grads = False  # True: apply gets {output_nr: grad} for a node of several outputs
    # per input, True where the gradient apply returns for it is a buffer made for this
    # call and held nowhere else (a leaf's .grad may keep it without a copy); () for none
    own_grads = ()

    def __init__(self, next_functions=()):
        self.next_functions = tuple(next_functions)
        self._seq = next(_sequence)
        self._pre_hooks = None  # output_nr -> [hook]
        self._input_meta = ()

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"<{self.name()} object at {id(self):#x}>"

    def apply(self, grad, create_graph: bool) -> tuple:
        raise NotImplementedError

    def release(self) -> None:
        """Free what this node saved (after a backward that does not retain the graph)."""

    def register_prehook(self, output_nr: int, hook) -> None:
        if self._pre_hooks is None:
            self._pre_hooks = {}
        self._pre_hooks.setdefault(output_nr, []).append(hook)


class AccumulateGrad(Node):
    """Adds the incoming gradient into a leaf tensor's `.grad`, then calls the hooks
    registered with `Tensor.register_post_accumulate_grad_hook` on the tensor."""
    __slots__ = ("_variable", "_post_hooks")

    def __init__(self, tensor):
        super().__init__()
        # runs as soon as its gradient is complete, before any other ready node (the
        # engine runs the latest-created first), as PyTorch gives it the largest sequence
        # number: DistributedDataParallel's hooks then start all-reduces mid-backward
        self._seq = sys.maxsize
        self._variable = weakref.ref(tensor)
        self._post_hooks = None

    @property
    def variable(self):
        return self._variable()

    def apply(self, grad, create_graph: bool, owned: bool = False) -> tuple:
        """`owned`: the engine says nothing else holds `grad` (Node.own_grads)."""
        t = self._variable()
        if t is None or grad is None:
            return ()
        if not create_graph and (tls.grad_enabled or owned):
            # kept as it is, or computed with grad mode on: without history. (With grad
            # mode off, as the engine runs it, the clone or sum below has none: a
            # detach there would cost a dispatched op per leaf.)
            grad = grad.detach()
        if t.grad is None:
            # a copy, as backward may hand one tensor to several leaves, unless the
            # gradient is the leaf's own and laid out as the leaf (PyTorch's
            # AccumulateGrad steals such a gradient too)
            keep = create_graph or (owned and grad._stride == t._stride)
            t.grad = grad if keep else grad.clone()
        else:
            t.grad = t.grad + grad
        if self._post_hooks:
            for hook in tuple(self._post_hooks):
                hook(t)
        return ()


def _alias(t):
    """A new tensor over the same memory, without autograd history (detach without a
    dispatch; a tensor under capture goes through the op so capture sees the alias)."""
    if t._lazy is not None:
        return t.detach()
    out = type(t)._make(t._storage, t._shape, t._stride, t._offset, t.dtype, t.device,
                        base=t._base if t._base is not None else t)
    out._np_cache = t._np_cache
    return out


class SavedTensor:
    """A tensor a node keeps for backward, with the version it had when saved; or, while
    saved-tensor hooks are on (`autograd.graph.saved_tensors_hooks`), what the pack hook
    made of it, turned back into a tensor by the unpack hook (no version check then, as
    in PyTorch: the hooks own the value)."""
    __slots__ = ("tensor", "version", "is_output", "output_nr", "unpack_hook", "__weakref__")

    def __init__(self, tensor, is_output: bool):
        self.is_output = is_output
        # an output's place among the node's outputs (an autograd.Function saves any)
        self.output_nr = tensor.output_nr if is_output else 0
        if _hooks_open and _saved_hooks.stack:
            pack, self.unpack_hook = _saved_hooks.stack[-1]
            self.tensor = pack(tensor)
            self.version = None
            return
        self.unpack_hook = None
        # an output is kept without its grad_fn (that is the saving node: a cycle)
        self.tensor = _alias(tensor) if is_output else tensor
        self.version = tensor._storage.version
        if tensor._lazy is not None:  # capture: the version is known once it materialises
            tensor._lazy.region.saved.add(self)

    def unpack(self, node: Node):
        if self.unpack_hook is not None:
            t = self.unpack_hook(self.tensor)
        else:
            t = self.tensor
            if t._storage.version != self.version:
                raise RuntimeError(_modified_message(t, node if self.is_output else t.grad_fn,
                                                     t._storage.version, self.version))
        if self.is_output and node is not None:
            t = t.detach() if t._lazy is not None else detach(t)  # under capture: an op
            t.grad_fn = node
            t.output_nr = self.output_nr
            t._set_requires_grad(True)
        return t


class _SavedHooks(threading.local):
    def __init__(self):
        self.stack = []  # (pack, unpack) pairs, innermost last


_saved_hooks = _SavedHooks()
_hooks_open = 0  # saved_tensors_hooks contexts open in any thread (0: no lookup per save)
_hooks_lock = threading.Lock()


class saved_tensors_hooks:  # noqa: N801 - PyTorch's name
    """While open, every tensor autograd saves for backward is given to `pack_hook`, whose
    result is kept instead; backward gets `unpack_hook(kept)` back. Per thread; the
    innermost context wins (PyTorch's torch.autograd.graph.saved_tensors_hooks)."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        global _hooks_open
        with _hooks_lock:
            _hooks_open += 1
        _saved_hooks.stack.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        global _hooks_open
        _saved_hooks.stack.pop()
        with _hooks_lock:
            _hooks_open -= 1
        return False


def _modified_message(t, producer, version, expected) -> str:
    kind = f"{dtypes.TYPE_WORDS[t.dtype.name]}Tensor"
    where = f", which is output 0 of {producer.name()}," if producer is not None else ""
    return (f"one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [eager.{kind} {list(t.shape)}]{where} is at version {version}; "
            f"expected version {expected} instead. Hint: the backtrace further above can show "
            f"the operation that failed to compute its gradient.")


class FormulaNode(Node):
    """A node whose backward is a derivative formula from the table (eager ops)."""
    __slots__ = ("_saved", "_needs", "_released")
    formula = None  # set on each generated subclass

    def __init__(self, next_functions, saved: dict, needs: tuple):
        # Node.__init__, inlined: one node is made per recorded op
        self.next_functions = next_functions
        self._seq = next(_sequence)
        self._pre_hooks = None
        self._input_meta = ()
        self._saved = saved
        self._needs = needs
        self._released = False

    def needs_input_grad(self, i: int) -> bool:
        return self._needs[i]

    def apply(self, grad, create_graph: bool) -> tuple:
        if self._released:
            raise RuntimeError(_FREED)
        grads = type(self).formula(self, grad)
        if not isinstance(grads, tuple):
            grads = (grads,)
        return grads

    def release(self) -> None:
        for v in self._saved.values():
            if isinstance(v, SavedTensor):
                self._released = True
                self._saved = {}
                return


_node_classes: dict[tuple, type] = {}


def node_class(name: str, formula, saves: tuple = (), every_output: bool = False) -> type:
    """The FormulaNode subclass called `name` (MmBackward0, ...), one per name, formula
    and saved names, so `add` and `add_` make nodes of the same class. Each saved name
    is a property (`ctx.self`, `ctx.mat2` inside the formula), not a `__getattr__`: with
    one, every attribute the engine reads from a node would take CPython's slow generic
    path, and each saved value read would first raise an AttributeError."""
    key = (name, formula, saves, every_output)
    if key not in _node_classes:
        body = {"__slots__": (), "formula": staticmethod(formula),
                "takes_all_grads": every_output}
        body.update((n, _saved_value(n)) for n in saves)
        _node_classes[key] = type(name, (FormulaNode,), body)
    return _node_classes[key]


def _saved_value(name: str) -> property:
    def get(self):
        if self._released:
            raise RuntimeError(_FREED)
        value = self._saved[name]
        return value.unpack(self) if isinstance(value, SavedTensor) else value
    get.__name__ = name
    return property(get, doc=f"the value the node saved as {name!r} (a formula's ctx.{name})")


def grad_accumulator(tensor) -> AccumulateGrad:
    acc = tensor._grad_accumulator
    if acc is None:
        acc = tensor._grad_accumulator = AccumulateGrad(tensor)
    return acc


def gradient_edge(tensor) -> tuple:
    """Where a gradient for `tensor` must go: (node, output_nr) or (None, 0)."""
    if tensor.grad_fn is not None:
        return tensor.grad_fn, tensor.output_nr
    if tensor._requires_grad:
        return grad_accumulator(tensor), 0
    return None, 0


class _RemovableHandle:
    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


def register_tensor_hook(tensor, hook):
    if not tensor._requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    node, nr = gradient_edge(tensor)
    node.register_prehook(nr, hook)
    hooks = node._pre_hooks[nr]
    # retain_grad's hook runs after the user's hooks, as in PyTorch
    retain = [h for h in hooks if getattr(h, "_retains_grad", False)]
    for h in retain:
        hooks.remove(h)
        hooks.append(h)
    return _RemovableHandle(hooks, hook)


def register_post_accumulate_grad_hook(tensor, hook):
    """`hook(tensor)` runs each time backward has accumulated into the leaf's `.grad`."""
    if not tensor._requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    if tensor.grad_fn is not None:
        raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                           "tensors")
    node = grad_accumulator(tensor)
    if node._post_hooks is None:
        node._post_hooks = []
    node._post_hooks.append(hook)
    return _RemovableHandle(node._post_hooks, hook)


def move_retained_grad(tensor, old_node: Node, old_nr: int) -> None:
    """After an in-place op gave `tensor` a new grad_fn, retain_grad follows the new value
    (hooks registered by the user stay with the old one, as in PyTorch)."""
    hooks = old_node._pre_hooks[old_nr]
    keep = next(h for h in hooks if getattr(h, "_retains_grad", False))
    hooks.remove(keep)
    tensor.grad_fn.register_prehook(tensor.output_nr, keep)


def retain_grad(tensor) -> None:
    if not tensor._requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if tensor.grad_fn is None or tensor._retains_grad:
        return
    ref = weakref.ref(tensor)

    def keep(grad):
        t = ref()
        if t is not None:
            t.grad = grad.detach() if t.grad is None else t.grad + grad.detach()
        return None
    keep._retains_grad = True
    tensor.grad_fn.register_prehook(tensor.output_nr, keep)
    tensor._retains_grad = True

