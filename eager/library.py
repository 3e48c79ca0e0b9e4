"""torch.library on kiln's dispatcher: define operators and register their kernels per
dispatch key, by schema (`Library`, `define`, `impl`) or from a typed Python function
(`custom_op`, with `register_fake`, `register_kernel` and `register_autograd`).

Everything lands in eager.dispatcher's registry, the one the built-in ops use, and the
op is called as `eager.ops.<namespace>.<name>(...)`. A fake kernel is the op's Meta
kernel (shapes and dtypes, no data); an autograd formula becomes the op's Autograd
kernel, an autograd.Function whose node is `GeneratedBackwardFor_<ns>_<name>_default
Backward`, as PyTorch names it. Under eager.compile a custom op is a graph break.
"""
from __future__ import annotations

import collections.abc
import inspect
import typing
from types import UnionType

from eager.autograd import Function
from eager.dispatcher import BACKEND_KEYS, DispatchKey, OpHandle, find, undefine
from eager.dispatcher import define as _define
from eager.tensor import Tensor

__all__ = ["Library", "define", "impl", "custom_op", "register_fake", "register_kernel",
           "register_autograd", "infer_schema", "CustomOpDef"]

# PyTorch's names for dispatch keys and device types -> kiln's keys
_KEYS = {"CPU": (DispatchKey.CPU,), "CUDA": (DispatchKey.CUDA,), "Meta": (DispatchKey.Meta,),
         "cpu": (DispatchKey.CPU,), "cuda": (DispatchKey.CUDA,), "meta": (DispatchKey.Meta,),
         "Autograd": (DispatchKey.Autograd,), "AutogradCPU": (DispatchKey.AutogradCPU,),
         "AutogradCUDA": (DispatchKey.AutogradCUDA,),
         "CompositeImplicitAutograd": (DispatchKey.CompositeImplicitAutograd,),
         "": (DispatchKey.CompositeImplicitAutograd,),
         "CompositeExplicitAutograd": BACKEND_KEYS,
         None: (DispatchKey.CPU, DispatchKey.CUDA)}  # a custom op's own function


def _keys(name) -> tuple:
    if isinstance(name, DispatchKey):
        return (name,)
    if name not in _KEYS:
        raise ValueError(f"unknown dispatch key or device type {name!r}; kiln knows "
                         f"{', '.join(k for k in _KEYS if k)}")
    return _KEYS[name]


def _handle(op) -> OpHandle:
    if isinstance(op, CustomOpDef):
        return op._handle
    if isinstance(op, OpHandle):
        return op
    try:
        return find(op)
    except KeyError:  # PyTorch's error: a library registering on another's undefined op
        raise RuntimeError(f"operator {op} does not exist") from None


_DEFINING: set[str] = set()  # namespaces a DEF Library holds


class Library:
    """Operators of one namespace: kind "DEF" defines them (one DEF library per
    namespace), "IMPL" and "FRAGMENT" add kernels (FRAGMENT definitions too)."""

    def __init__(self, ns: str, kind: str, dispatch_key: str = ""):
        if kind not in ("DEF", "IMPL", "FRAGMENT"):
            raise ValueError(f"Unsupported kind: {kind}")
        if kind == "DEF":
            if ns in _DEFINING:
                raise RuntimeError(f"Only a single TORCH_LIBRARY can be used to register the "
                                   f"namespace {ns}; please put all of your definitions in a "
                                   "single TORCH_LIBRARY block.")
            _DEFINING.add(ns)
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key
        self._defined: list[str] = []

    def __repr__(self) -> str:
        return f"Library(kind={self.kind}, ns={self.ns}, dispatch_key={self.dispatch_key})"

    def define(self, schema: str, alias_analysis: str = "", *, tags=()) -> str:
        """Define `name(args) -> returns` in this namespace; returns the op's name."""
        if self.kind == "IMPL":
            raise RuntimeError("a Library of kind IMPL cannot define operators")
        handle = _define(schema, self.ns)
        self._defined.append(handle.qualified_name)
        return handle.schema.qualified_name

    def impl(self, op_name, fn, dispatch_key: str = "", *, with_keyset: bool = False):
        """Register `fn` as the kernel of `op_name` (in this namespace) for a key."""
        if isinstance(op_name, str) and "::" not in op_name:
            op_name = f"{self.ns}::{op_name}"
        handle = _handle(op_name)
        for key in _keys(dispatch_key or self.dispatch_key):
            handle.register(key, fn)

    def _destroy(self) -> None:
        """Undefine what this library defined (a test's, or a notebook cell run again)."""
        for name in self._defined:
            undefine(name)
        self._defined = []
        _DEFINING.discard(self.ns)


def define(qualname: str, schema: str, *, lib: Library | None = None, tags=()) -> None:
    """`define("mylib::foo", "(Tensor x) -> Tensor")`."""
    ns, name = _split(qualname)
    (lib or Library(ns, "FRAGMENT")).define(name + schema, tags=tags)


def impl(qualname, types, func=None, *, lib: Library | None = None):
    """Register `func` for a device type ("cpu"), a list of them or a dispatch key name;
    a decorator when `func` is not given."""
    def register(fn):
        for kind in [types] if isinstance(types, str) else types:
            for key in _keys(kind):
                _handle(qualname).register(key, fn)
        return fn
    return register if func is None else register(func)


def register_kernel(op, device_types, func=None, *, lib: Library | None = None):
    return impl(op, device_types, func, lib=lib)


def register_fake(op, func=None, *, lib: Library | None = None):
    """The op's fake kernel: shapes and dtypes from meta tensors (kiln's Meta key)."""
    return impl(op, "Meta", func, lib=lib)


def register_autograd(op, backward, *, setup_context=None, lib: Library | None = None):
    """`backward(ctx, *grads)` returns one gradient (or None) per argument; what it needs
    from the call, `setup_context(ctx, inputs, output)` keeps on ctx."""
    handle = _handle(op)
    handle.register(DispatchKey.Autograd, _autograd_kernel(handle, backward, setup_context))


def _no_formula(handle: OpHandle):
    def backward(ctx, *grads):
        raise RuntimeError(f"Trying to backward through {handle.name.replace('::', '.')}.default "
                           "but no autograd formula was registered. Please use "
                           "register_autograd to add one.")
    return backward


def _autograd_kernel(handle: OpHandle, backward, setup_context):
    """An Autograd kernel: the op, below Autograd, as an autograd.Function's forward."""
    schema = handle.schema
    ns, _, name = handle.name.partition("::")
    overload = schema.overload or "default"

    def forward(*args):
        return handle.redispatch(DispatchKey.Autograd, *args)

    def keep(ctx, inputs, output):
        if setup_context is not None:
            setup_context(ctx, inputs, output)

    function = type(f"GeneratedBackwardFor_{ns}_{name}_{overload}", (Function,), {
        "forward": staticmethod(forward), "setup_context": staticmethod(keep),
        "backward": staticmethod(backward)})

    def kernel(*args, **kwargs):
        bound = schema.bind(args, kwargs)
        return function.apply(*(bound[a.name] for a in schema.arguments))
    kernel.__name__ = f"{name}_autograd"
    return kernel


def _split(qualname: str) -> tuple[str, str]:
    ns, sep, name = qualname.partition("::")
    if not sep or not ns or not name:
        raise ValueError(f"expected a qualified name 'namespace::name', got {qualname!r}")
    return ns, name


class CustomOpDef:
    """What `custom_op` makes: callable as the op, with the registration methods."""

    def __init__(self, handle: OpHandle, fn):
        self._handle, self._init_fn = handle, fn
        self.__name__ = handle.schema.name
        self.__doc__ = fn.__doc__

    def __repr__(self) -> str:
        return f"<CustomOpDef({self._handle.name})>"

    def __call__(self, *args, **kwargs):
        return self._handle(*args, **kwargs)

    @property
    def _opoverload(self) -> OpHandle:
        return self._handle

    def register_kernel(self, device_types, fn=None):
        return register_kernel(self, device_types, fn)

    def register_fake(self, fn):
        return register_fake(self, fn)

    def register_autograd(self, backward, *, setup_context=None) -> None:
        register_autograd(self, backward, setup_context=setup_context)


def custom_op(name: str, fn=None, /, *, mutates_args, device_types=None, schema=None):
    """Make a typed Python function an operator `name` ("mylib::foo"): its schema comes
    from the annotations (or `schema`), it is the op's kernel for `device_types` (every
    device when None); the arguments named in `mutates_args` are written in place."""
    ns, opname = _split(name)

    def make(fn):
        text = schema or infer_schema(fn, mutates_args=mutates_args)
        handle = _define(opname + text, ns)
        handle.register(DispatchKey.Autograd, _autograd_kernel(handle, _no_formula(handle),
                                                               None))
        for kind in [device_types] if device_types is None or isinstance(
                device_types, str) else device_types:
            for key in _keys(kind):
                handle.register(key, fn)
        return CustomOpDef(handle, fn)
    return make if fn is None else make(fn)


# schema inference -------------------------------------------------------------------
_BASE_TYPES = {Tensor: "Tensor", int: "SymInt", float: "float", bool: "bool", str: "str"}


def _schema_type(annotation) -> str | None:
    """`Tensor` -> "Tensor", `int | None` -> "SymInt?", `list[Tensor | None]` ->
    "Tensor?[]"; None for a type a schema cannot say."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, UnionType):
        rest = [a for a in args if a is not type(None)]
        inner = _schema_type(rest[0]) if len(rest) == 1 < len(args) else None
        return None if inner is None else inner + "?"
    if origin in (list, collections.abc.Sequence) and len(args) == 1:
        inner = _schema_type(args[0])
        return None if inner is None or inner.endswith("]") else inner + "[]"
    return _BASE_TYPES.get(annotation)


def _default_text(value) -> str:
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, str):
        return f'"{value}"'
    raise ValueError(f"unsupported default value type {type(value)}")


def infer_schema(prototype_function, /, *, mutates_args, op_name: str | None = None) -> str:
    """The schema text of a typed function: `(Tensor x, float k) -> Tensor`."""
    sig = inspect.signature(prototype_function)
    hints = typing.get_type_hints(prototype_function)

    def error(what: str):
        raise ValueError(f"infer_schema(func): {what} Got func with signature {sig})")

    mutated = set(sig.parameters) if mutates_args == "unknown" else set(mutates_args)
    args = []
    for i, (pname, p) in enumerate(sig.parameters.items()):
        if p.annotation is inspect.Parameter.empty:
            error(f"Parameter {pname} must have a type annotation.")
        text = _schema_type(hints[pname])
        if text is None:
            error(f"Parameter {pname} has unsupported type {p.annotation}.")
        if pname in mutated:
            if not text.startswith("Tensor"):
                error(f"Parameter {pname} is in mutable_args but only Tensors or collections "
                      "of Tensors can be mutated")
            text = f"Tensor(a{i}!)" + text[len("Tensor"):]
        if p.default is not inspect.Parameter.empty:
            try:
                text += f" {pname}={_default_text(p.default)}"
            except ValueError:
                error(f"Parameter {pname} has an unsupported default value type "
                      f"{type(p.default)}. Please file an issue on GitHub so we can "
                      "prioritize this.")
        else:
            text += f" {pname}"
        if p.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in args:
            args.append("*")
        args.append(text)
    unknown = mutated - set(sig.parameters)
    if unknown:
        error(f"{sorted(unknown)} in mutates_args were not found in the custom op's signature.")
    return f"({', '.join(args)}) -> {_returns(hints.get('return', inspect.Parameter.empty), error)}"


def _returns(annotation, error) -> str:
    if annotation is None or annotation is type(None):
        return "()"
    if annotation is inspect.Parameter.empty:
        error("No return type annotation was provided. Please add one.")
    if typing.get_origin(annotation) is tuple:
        parts = [_schema_type(a) for a in typing.get_args(annotation)]
        if None in parts:
            error(f"Return has unsupported type {annotation}.")
        return f"({', '.join(parts)})"
    text = _schema_type(annotation)
    if text is None:
        error(f"Return has unsupported type {annotation}.")
    return text
