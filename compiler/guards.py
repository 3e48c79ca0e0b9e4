"""Guards: what a compiled entry assumed about the world, as one hashable key per call.

The key covers the arguments (tensor shape, dtype, device, requires_grad; Python
values; container structure; which arguments are the same tensor), grad mode, and the
Python values the function reads from its globals and closures (found from its code
objects) or, for a module, the modules' plain attributes and training flags. A module
held by a global or closure variable (a training step's `model`) is guarded the same way:
its identity, its submodules' plain attributes and its parameters' and buffers'
metadata. Tensors read from globals, closures and modules (those modules' too) are
*sources*: re-read at every call, so an optimiser's in-place update or a rebound
attribute is seen.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import types

from eager.autograd.grad_mode import tls
from eager.nn.modules.module import Module
from eager.tensor import Tensor, contiguous_strides

_PLAIN = (bool, int, float, str, type(None), complex)
_GUARDED_AS: dict[type, str] = {}  # type -> how its values are guarded (see _guarded_as)
_TREES: dict[int, tuple] = {}  # number of positional tensors -> (treedef, no aliases)


def tensor_meta(t: Tensor) -> tuple:
    """What a graph captured from `t` assumed of it: its exact shape and strides (a
    `reshape` is a view of some layouts and a copy of others; Python code may read any
    size), dtype, device and requires_grad."""
    device = t.device
    return (t._shape, t._stride, t.dtype,
            device.type if device.index is None else str(device), t._requires_grad)


def _is_meta(key) -> bool:
    return len(key) == 5 and isinstance(key[0], tuple)


def describe_meta(meta: tuple) -> str:
    shape, stride, dtype, device, requires_grad = meta
    dtype = getattr(dtype, "name", dtype)
    dims = "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
    layout = "" if stride == contiguous_strides(shape) else f" strides {stride},"
    return f"Tensor shape {dims},{layout} {dtype}, {device}, requires_grad={requires_grad}"


def flatten(value, path: str, leaves: list) -> object:
    """Leaves of nested lists/tuples/dicts into `leaves` [(path, value)]; returns the
    structure with leaves replaced by their index (the treedef). The treedef keeps each
    container's type, so unflatten gives back a namedtuple, an OrderedDict or a dict
    subclass (a model's output) as the function returned it."""
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(flatten(v, f"{path}[{i}]", leaves)
                                   for i, v in enumerate(value)))
    if isinstance(value, dict):
        return (type(value), tuple((k, flatten(v, f"{path}[{k!r}]", leaves))
                                   for k, v in value.items()))
    leaves.append((path, value))
    return len(leaves) - 1


def unflatten(tree, leaves: list):
    if isinstance(tree, int):
        return leaves[tree]
    kind, items = tree
    if issubclass(kind, dict):
        values = {k: unflatten(v, leaves) for k, v in items}
        return values if kind is dict else _rebuilt(kind, values)
    seq = [unflatten(v, leaves) for v in items]
    if kind is list or kind is tuple:
        return seq if kind is list else tuple(seq)
    return kind(*seq) if hasattr(kind, "_fields") else kind(seq)  # a namedtuple's fields


def _rebuilt(kind: type, values: dict):
    """A dict subclass holding `values`: made from keywords where every key is a string
    (a dataclass-based model output sets its attributes that way), else from the dict."""
    if all(isinstance(k, str) for k in values):
        try:
            return kind(**values)
        except TypeError:
            pass
    return kind(values)


def _leaf_key(v):
    kind = type(v)
    guarded = _GUARDED_AS.get(kind) or _guarded_as(kind)
    if guarded == "tensor":
        return tensor_meta(v)
    if guarded == "value":
        return (kind.__name__, v)
    if guarded == "items":
        return _items_key(v, [ITEMS_LIMIT])
    return ("object", kind.__qualname__, id(v))


def _guarded_as(kind: type) -> str:
    """How leaves of a type are guarded: "tensor" (by metadata), "value" (by equality),
    "items" (a container, by its items' keys) or "object" (by identity); decided once per
    type, since keys are made at every call."""
    _GUARDED_AS[kind] = "tensor" if issubclass(kind, Tensor) else \
        "value" if issubclass(kind, _PLAIN) else \
        "items" if issubclass(kind, (list, tuple, dict, types.SimpleNamespace)) or \
        dataclasses.is_dataclass(kind) else "object"
    return _GUARDED_AS[kind]


ITEMS_LIMIT = 256
"""Containers a function reads (a global list, a closed-over tuple holding the batch, a
config dataclass) are guarded item by item, nested, up to this many items in all: a
list appended to or an item replaced is a new key, and the tensors inside are found
again at each call. A larger container is guarded by identity alone (its items are
not read at each call), so changing its items in place goes unseen."""


def _items(v) -> list:
    """(accessor, item) of a container: ("[]", index or key) or (".", field name)."""
    if isinstance(v, (list, tuple)):
        return [(("[]", i), x) for i, x in enumerate(v)]
    if isinstance(v, dict):
        return [(("[]", k), x) for k, x in v.items()]
    names = [f.name for f in dataclasses.fields(v)] if dataclasses.is_dataclass(v) else \
        list(vars(v))
    return [((".", n), getattr(v, n)) for n in names]


def _items_key(v, budget: list):
    """The key of a container: its type and each item's key, or its identity where the
    items (nested) number more than the budget left."""
    items = _items(v)
    if len(items) > budget[0]:
        return ("object", type(v).__qualname__, id(v))
    budget[0] -= len(items)
    return ("items", type(v), tuple([(a, _items_key(x, budget) if (
        _GUARDED_AS.get(type(x)) or _guarded_as(type(x))) == "items" else _variable_key(x))
        for a, x in items]))


def _frozen(v) -> bool:
    """Whether a value's key stays the same while the value is the same object: not
    for a tensor (its metadata), a module (its state) or a container that can change in
    place (a tuple is frozen when its items are)."""
    guarded = _GUARDED_AS.get(type(v)) or _guarded_as(type(v))
    if guarded == "tensor" or isinstance(v, Module):
        return False
    if guarded == "items":
        return isinstance(v, tuple) and len(v) <= ITEMS_LIMIT and all(map(_frozen, v))
    return True


def _describe_leaf(path: str, key) -> list[str]:
    """What a leaf's key assumes, a line per item of a container."""
    if _is_meta(key):
        return [f"{path}: {describe_meta(key)}"]
    if key[0] == "items":
        lines = [line for (how, name), item in key[2] for line in _describe_leaf(
            f"{path}[{name!r}]" if how == "[]" else f"{path}.{name}", item)]
        return lines or [f"{path}: an empty {key[1].__qualname__}"]
    if key[0] == "object":
        state = ", its attributes and tensors' metadata as at capture" if len(key) == 4 else ""
        return [f"{path}: the same {key[1]} object{state}"]
    return [f"{path} == {key[1]!r}"]


# what the function reads ----------------------------------------------------------------
def _code_objects(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def global_reads(fn, depth: int = 3, seen=None) -> list[tuple[str, dict, str]]:
    """(label, namespace, name) of every global the function (and the plain Python
    functions it may call, a few levels deep: globals and closure variables holding
    functions) may read."""
    seen = set() if seen is None else seen
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None or id(code) in seen or depth < 0:
        return []
    seen.add(id(code))
    namespace = fn.__globals__
    reads = []
    for c in _code_objects(code):
        for name in c.co_names:
            if name in namespace and not isinstance(namespace[name], types.ModuleType):
                reads.append((f"global '{name}'", namespace, name))
                value = namespace[name]
                if isinstance(value, types.FunctionType):
                    reads.extend(global_reads(value, depth - 1, seen))
    for cell in getattr(fn, "__closure__", None) or ():
        value = _cell_value(cell)
        if isinstance(value, types.FunctionType):
            reads.extend(global_reads(value, depth - 1, seen))
    return reads


def closure_reads(fn, depth: int = 3, seen=None, of: str = "") -> list[tuple[str, object]]:
    """(label, cell) of every closure variable the function (and the plain Python
    functions it may call, as global_reads finds them: a decorator's wrapper calls the
    function its cell holds) may read."""
    seen = set() if seen is None else seen
    fn = getattr(fn, "__func__", fn)
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None) or ()
    if code is None or id(code) in seen or depth < 0:
        return []
    seen.add(id(code))
    reads = [(f"{of}closure variable '{name}'", cell)
             for name, cell in zip(code.co_freevars, cells)]
    called = [_cell_value(cell) for cell in cells] + [
        fn.__globals__.get(name) for c in _code_objects(code) for name in c.co_names]
    for value in called:
        if isinstance(value, types.FunctionType):
            reads.extend(closure_reads(value, depth - 1, seen, f"{value.__qualname__}'s "))
    return reads


_CONTENTS = operator.attrgetter("cell_contents")


def _cell_value(cell):
    return _read(functools.partial(_CONTENTS, cell))


def _read(read):
    """A variable's value: None for an empty cell (a global missing reads None too)."""
    try:
        return read()
    except ValueError:  # an empty cell
        return None


def _variable_key(v):
    """The key of a global's or closure variable's value: a module's includes its state."""
    if isinstance(v, Module):
        return ("object", type(v).__qualname__, id(v), _module_state(v))
    return _leaf_key(v)


class _Reads:
    """The keys of the variables a function reads, (globals' keys, closure cells' keys),
    each made again only for a value other than the last call's, so a function, class or
    number read at every call is keyed once (keying one global afresh cost ~0.4 us a
    call, a tenth of a one-kernel compiled call). Tensors and modules, whose keys hold
    their state, are keyed at every call. Where every value was stable at the last call,
    one loop reads them again (C calls: a namespace's `get`, a cell's `cell_contents`) and
    `is` against the last values and their types says the keys are the same. The last
    values are kept (so `is` cannot meet a new object at a freed one's address)."""

    def __init__(self, globals_: list, closures: list):
        self.reads = [functools.partial(ns.get, name) for _, ns, name in globals_] + \
            [functools.partial(_CONTENTS, c) for _, c in closures]  # ValueError: empty
        self.globals = len(globals_)
        self.last: list = [None] * len(self.reads)  # (value, its type, key) where stable
        self._seen = None  # ((read, value, its type) per variable, keys): all stable

    def keys(self) -> tuple:
        seen = self._seen
        if seen is not None:
            try:
                for read, value, kind in seen[0]:
                    now = read()
                    if now is not value or type(now) is not kind:
                        break
                else:
                    return seen[1]
            except ValueError:  # a cell emptied: the loop below keys it as None
                pass
        keys, stable = [], True
        for i, read in enumerate(self.reads):
            value, last = _read(read), self.last[i]
            if last is not None and last[0] is value and last[1] is type(value):
                keys.append(last[2])
            else:
                keys.append(self._keyed(i, value))
                stable = stable and self.last[i] is not None
        result = tuple(keys[:self.globals]), tuple(keys[self.globals:])
        self._seen = (tuple([(read, last[0], last[1]) for read, last in
                             zip(self.reads, self.last)]), result) if stable else None
        return result

    def _keyed(self, i: int, value):
        key = _variable_key(value)
        self.last[i] = (value, type(value), key) if _frozen(value) else None
        return key


def _module_state(module) -> tuple:
    """A module's submodules' plain attributes (training flags) and its tensors' metadata
    (read at every call of a function that uses the module: one walk of its submodules
    for all three, where named_parameters and named_buffers walked them again; 15 -> 7 us
    on a Sequential of five modules)."""
    modules = list(module.named_modules())
    attrs = tuple([(name, value) for _, m in modules for name, value in vars(m).items()
                   if not name.startswith("_") and (isinstance(value, _PLAIN) or
                                                    name == "training")])
    return attrs, tuple([(n, tensor_meta(t)) for store in ("_parameters", "_buffers")
                         for n, t in _stored(modules, store)])


def _stored(modules: list, store: str):
    """(name, tensor) of the `store` dicts ("_parameters", "_buffers") of `modules` (a
    named_modules() list), each tensor once: what named_parameters()/named_buffers() of
    the first module give."""
    seen = set()
    for prefix, m in modules:
        for name, t in getattr(m, store).items():
            if t is not None and id(t) not in seen:
                seen.add(id(t))
                yield (prefix + "." + name if prefix else name), t


def _module_difference(old: tuple, new: tuple) -> str:
    """The first attribute or tensor that differs between two _module_state results."""
    for (name, a), (_, b) in zip(old[0] + old[1], new[0] + new[1]):
        if a != b:
            a, b = (describe_meta(v) if isinstance(v, tuple) else repr(v) for v in (a, b))
            return f"{name}: {a}  ->  {b}"
    return "its submodules or tensors changed"


def module_attributes(module) -> list[tuple[str, object, str]]:
    """(label, module, attribute) of every plain attribute of every submodule."""
    out = []
    for prefix, m in module.named_modules():
        for name, value in vars(m).items():
            if name.startswith("_"):
                continue
            if isinstance(value, _PLAIN) or name == "training":
                label = f"self.{prefix + '.' if prefix else ''}{name}"
                out.append((label, m, name))
    return out


class GuardSet:
    """Computes an entry's key for a call and says in words what a key assumes."""

    def __init__(self, fn, module=None):
        self.fn = fn
        self.module = module
        self.globals = global_reads(fn)
        self.closures = closure_reads(fn)
        self.attributes = module_attributes(module) if module is not None else []
        # no globals, closures, module: a call's key is its arguments' and the grad mode
        self._plain = not (self.globals or self.closures or self.attributes) and \
            module is None
        self._variable_keys = _Reads(self.globals, self.closures).keys
        # globals and closure cells alone (no module): their keys end the key
        self._variables_only = not (self._plain or self.attributes) and module is None

    def key(self, args: tuple, kwargs: dict) -> tuple:
        """The call's guard key."""
        return self.key_and_leaves(args, kwargs)[0]

    def key_and_leaves(self, args: tuple, kwargs: dict):
        """The guard key and the values of the arguments' leaves, in order."""
        metas = None if kwargs else _tensor_metas(args)
        if metas is not None:  # the common case spelled out: positional tensors, their
            n = len(args)      # own leaves
            tree, in_order = _TREES.get(n) or _positional_tree(n)
            aliases = in_order if n == 1 or len(set(map(id, args))) == n else \
                _alias_pattern(args)
            if self._plain:
                return (tree, metas, aliases, tls.grad_enabled, (), (), ()), args
            if self._variables_only:
                return (tree, metas, aliases, tls.grad_enabled, *self._variable_keys(),
                        ()), args
            leaves = args
        else:
            pairs: list = []
            tree = flatten((args, kwargs), "arg", pairs)
            leaves = [v for _, v in pairs]
            metas = tuple([_leaf_key(v) for v in leaves])
            aliases = _alias_pattern(leaves)
        key = (tree, metas, aliases, tls.grad_enabled, *self._variable_keys(),
               tuple([_leaf_key(getattr(m, a, None)) for _, m, a in self.attributes]) if
               self.attributes else ())
        if self.module is not None:
            key += (tuple((n, tensor_meta(t)) for n, t in _module_tensors(self.module)),)
        return key, leaves

    def describe(self, key: tuple, args_paths: list[str]) -> list[str]:
        tree, leaf_keys, aliases, grad_mode, globs, cells, attrs = key[:7]
        lines = [line for p, k in zip(args_paths, leaf_keys) for line in _describe_leaf(p, k)]
        if any(a != i for i, a in enumerate(aliases) if a is not None):
            lines.append(f"arguments alias each other as {aliases}")
        lines.append(f"grad mode {'enabled' if grad_mode else 'disabled'}")
        labels = [label for label, *_ in self.globals + self.closures + self.attributes]
        lines += [line for label, k in zip(labels, globs + cells + attrs)
                  for line in _describe_leaf(label, k)]
        if self.module is not None:
            lines += [f"self.{n}: {describe_meta(m)}" for n, m in key[7]]
        return lines

    def difference(self, old: tuple, new: tuple, args_paths: list[str]) -> str:
        """The first guard that differs between two keys, with both values."""
        before, after = self.describe(old, args_paths), self.describe(new, args_paths)
        for a, b in zip(before, after):
            if a != b:
                return f"{a}  ->  {b}"
        if old[0] != new[0]:
            return "the arguments' structure changed (number or nesting of arguments)"
        labels = [label for label, _, _ in self.globals] + [label for label, _ in self.closures]
        for label, a, b in zip(labels, old[4] + old[5], new[4] + new[5]):
            if a != b and a[0] == "object" and len(a) == 4:
                return f"{label}: {_module_difference(a[3], b[3])}"
        return "guards differ"

    # sources ------------------------------------------------------------------------
    def known_sources(self, args: tuple, kwargs: dict) -> dict:
        """id(tensor) -> a source that finds the tensor again at the next call: an
        argument, a global, a closure variable, a module's parameter or buffer, or an
        item of a container one of those holds (within ITEMS_LIMIT items, as guarded)."""
        sources = {}
        leaves: list = []
        flatten((args, kwargs), "arg", leaves)
        for i, (_, v) in enumerate(leaves):
            _sources_within(v, ("arg", i), sources, [ITEMS_LIMIT])
        for label, ns, name in self.globals:
            _sources_within(ns.get(name), ("global", ns, name), sources, [ITEMS_LIMIT])
        for label, cell in self.closures:
            _sources_within(_cell_value(cell), ("closure", cell), sources, [ITEMS_LIMIT])
        if self.module is not None:
            for name, t in _module_tensors(self.module):
                sources.setdefault(id(t), ("module", self.module, name))
        return sources


def _sources_within(value, source, sources: dict, budget: list) -> None:
    """Sources of `value` (found by `source`) and of the tensors it holds."""
    if isinstance(value, Tensor):
        sources.setdefault(id(value), source)
    elif isinstance(value, Module):
        for path, t in _module_tensors(value):
            sources.setdefault(id(t), ("module", source, path))
    elif (_GUARDED_AS.get(type(value)) or _guarded_as(type(value))) == "items":
        items = _items(value)
        if len(items) <= budget[0]:  # as _items_key guards it
            budget[0] -= len(items)
            for accessor, item in items:
                _sources_within(item, ("item", source, accessor), sources, budget)


def _module_tensors(module):
    yield from module.named_parameters()
    yield from module.named_buffers()


def _tensor_metas(args: tuple) -> tuple | None:
    """tensor_meta of every argument, or None when one is not a Tensor."""
    metas = []
    for a in args:
        if type(a) is not Tensor:
            return None
        device = a.device  # tensor_meta(a), inlined: this runs at every compiled call
        metas.append((a._shape, a._stride, a.dtype, device.type if device.index is None
                      else str(device), a._requires_grad))
    return tuple(metas)


def _positional_tree(n: int) -> tuple:
    """(treedef, alias pattern of distinct tensors) of `n` positional arguments."""
    _TREES[n] = flatten((tuple(range(n)), {}), "arg", []), tuple(range(n))
    return _TREES[n]


def _alias_pattern(leaves) -> tuple:
    """Per leaf value, the index of the first leaf that is the same tensor (None for
    values that are not tensors)."""
    first: dict[int, int] = {}
    out = []
    for i, v in enumerate(leaves):
        if isinstance(v, Tensor):
            out.append(first.setdefault(id(v), i))
        else:
            out.append(None)
    return tuple(out)


def resolve(source, leaves) -> Tensor:
    """The tensor a source names at this call; `leaves` are the arguments' leaf values."""
    kind = source[0]
    if kind == "arg":
        return leaves[source[1]]
    if kind == "global":
        return source[1][source[2]]
    if kind == "closure":
        return source[1].cell_contents
    if kind == "module":  # source[1]: the module, or the source of a variable holding it
        obj = source[1] if isinstance(source[1], Module) else resolve(source[1], leaves)
        for part in source[2].split("."):
            obj = getattr(obj, part)
        return obj
    if kind == "item":  # source[1]: the container's source; source[2]: (how, which)
        container, (how, which) = resolve(source[1], leaves), source[2]
        return container[which] if how == "[]" else getattr(container, which)
    return source[1]  # ("constant", tensor)
