"""Nested containers as trees (torch.utils._pytree): flatten a tree of tuples, lists,
dicts, namedtuples, OrderedDicts, defaultdicts, deques and registered classes into its
leaves and a TreeSpec, build it again from new leaves, map a function over the leaves;
`tree_flatten_with_path` gives each leaf its key path (MappingKey, SequenceKey,
GetAttrKey entries, printed by `keystr` as PyTorch prints them).

Anything whose type is not registered is a leaf, None included (as in PyTorch's pytree,
unlike JAX's). A dict's children are its values in insertion order, its context its
keys; a namedtuple's node type is `namedtuple` and its context the class.
"""
from __future__ import annotations

from collections import OrderedDict, defaultdict, deque, namedtuple
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["TreeSpec", "LeafSpec", "register_pytree_node", "tree_flatten", "tree_unflatten",
           "tree_leaves", "tree_structure", "tree_iter", "tree_map", "tree_map_",
           "tree_map_only", "tree_all", "tree_any", "tree_is_leaf", "treespec_leaf",
           "SUPPORTED_NODES", "MappingKey", "SequenceKey", "GetAttrKey", "keystr",
           "tree_flatten_with_path", "tree_leaves_with_path"]


class NodeDef(NamedTuple):
    type: Any
    flatten_fn: Callable   # node -> (children, context)
    unflatten_fn: Callable  # (children, context) -> node
    flatten_with_keys_fn: Callable | None = None  # node -> ([(key, child)], context)


@dataclass(frozen=True)
class MappingKey:
    key: Any

    def __str__(self) -> str:
        return f"[{self.key!r}]"

    def get(self, mapping):
        return mapping[self.key]


@dataclass(frozen=True)
class SequenceKey:
    idx: int

    def __str__(self) -> str:
        return f"[{self.idx!r}]"

    def get(self, sequence):
        return sequence[self.idx]


@dataclass(frozen=True)
class GetAttrKey:
    name: str

    def __str__(self) -> str:
        return f".{self.name}"

    def get(self, obj):
        return getattr(obj, self.name)


def keystr(kp) -> str:
    """A key path as text: `[0]['a'].b`."""
    return "".join(str(k) for k in kp)


def _dict_flatten_with_keys(d: dict):
    return [(MappingKey(k), v) for k, v in d.items()], list(d)


def _children_with_keys(node) -> list:
    """`(key, child)` pairs: the node type's own keys where it registered them, else
    positions (a namedtuple's field names)."""
    kind = _node_type(node)
    entry = SUPPORTED_NODES[kind]
    if entry.flatten_with_keys_fn is not None:
        return entry.flatten_with_keys_fn(node)[0]
    children, _ = entry.flatten_fn(node)
    if kind is namedtuple:
        return [(GetAttrKey(f), c) for f, c in zip(type(node)._fields, children)]
    return [(SequenceKey(i), c) for i, c in enumerate(children)]


SUPPORTED_NODES: dict[Any, NodeDef] = {}


def register_pytree_node(cls, flatten_fn, unflatten_fn, *, serialized_type_name=None,
                         to_dumpable_context=None, from_dumpable_context=None,
                         flatten_with_keys_fn=None) -> None:
    """Make `cls` a container: `flatten_fn(node) -> (children, context)` and
    `unflatten_fn(children, context) -> node`. (The serialisation and key-path
    arguments are accepted and not used: kiln has no treespec_dumps.)
    `flatten_with_keys_fn(node) -> ([(key, child)], context)` names the children in key
    paths."""
    if cls in SUPPORTED_NODES:
        raise ValueError(f"{cls} is already registered as pytree node.")
    SUPPORTED_NODES[cls] = NodeDef(cls, flatten_fn, unflatten_fn, flatten_with_keys_fn)


def _is_namedtuple_instance(tree) -> bool:
    cls = type(tree)
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple)


def _node_type(tree):
    return namedtuple if _is_namedtuple_instance(tree) else type(tree)


def tree_is_leaf(tree, is_leaf: Callable | None = None) -> bool:
    if is_leaf is not None and is_leaf(tree):
        return True
    return _node_type(tree) not in SUPPORTED_NODES


@dataclass(frozen=True, eq=False)
class TreeSpec:
    """The structure of a tree: a node's type, its context (dict keys, ...) and one spec
    per child. A leaf's spec is LeafSpec (type None), printed `*`."""
    type: Any
    context: Any
    children_specs: list

    def __post_init__(self):
        leaves = 1 if self.type is None else sum(c.num_leaves for c in self.children_specs)
        nodes = 1 + sum(c.num_nodes for c in self.children_specs)
        object.__setattr__(self, "num_leaves", leaves)
        object.__setattr__(self, "num_nodes", nodes)
        object.__setattr__(self, "num_children", len(self.children_specs))

    def is_leaf(self) -> bool:
        return self.type is None

    def children(self) -> list:
        return list(self.children_specs)

    def child(self, index: int) -> TreeSpec:
        return self.children_specs[index]

    def __eq__(self, other) -> bool:
        return isinstance(other, TreeSpec) and (self.type, self.context, self.children_specs) \
            == (other.type, other.context, other.children_specs)

    def __hash__(self) -> int:
        return hash((self.type, repr(self.context), tuple(self.children_specs)))

    def __repr__(self, indent: int = 0) -> str:
        """PyTorch's text: children after the first on lines of their own, indented."""
        text = f"TreeSpec({self.type.__name__}, {self.context}, ["
        if self.children_specs:
            indent += 2
            first, *rest = self.children_specs
            text += first.__repr__(indent) + ("," if rest else "")
            text += ",".join("\n" + " " * indent + c.__repr__(indent) for c in rest)
        return text + "])"

    def unflatten(self, leaves) -> Any:
        leaves = list(leaves)
        if len(leaves) != self.num_leaves:
            raise ValueError(f"treespec.unflatten(leaves): `leaves` has length {len(leaves)} "
                             f"but the spec refers to a pytree that holds {self.num_leaves} "
                             f"items ({self}).")
        return self._build(iter(leaves))

    def _build(self, leaves):
        if self.type is None:
            return next(leaves)
        children = [c._build(leaves) for c in self.children_specs]
        return SUPPORTED_NODES[self.type].unflatten_fn(children, self.context)

    def flatten_up_to(self, tree) -> list:
        """The subtrees of `tree` at this spec's leaves (`tree` has this spec as a prefix)."""
        out = []
        self._up_to(tree, out)
        return out

    def _up_to(self, tree, out: list) -> None:
        if self.type is None:
            out.append(tree)
            return
        kind = _node_type(tree)
        if kind != self.type and not (isinstance(tree, dict) and self.type in _DICTS
                                      and kind in _DICTS):
            raise ValueError(f"Node type mismatch; expected {self.type!r}, but got {kind!r}.")
        if isinstance(tree, dict):
            if set(tree) != set(self._keys()):
                raise ValueError(f"Node keys mismatch; expected {sorted(self._keys(), key=str)}"
                                 f", but got {sorted(tree, key=str)}.")
            children = [tree[k] for k in self._keys()]
        else:
            children, context = SUPPORTED_NODES[kind].flatten_fn(tree)
            if len(children) != self.num_children:
                raise ValueError(f"Node arity mismatch; expected {self.num_children}, but got "
                                 f"{len(children)}.")
            if kind is namedtuple and context is not self.context:
                raise ValueError(f"Node context mismatch for node type {self.type!r}; "
                                 f"expected {self.context!r}, but got {context!r}.")
        for spec, child in zip(self.children_specs, children):
            spec._up_to(child, out)

    def _keys(self) -> list:
        return self.context[1] if self.type is defaultdict else self.context


class LeafSpec(TreeSpec):
    def __init__(self):
        super().__init__(None, None, [])

    def __repr__(self, indent: int = 0) -> str:
        return "*"


_LEAF = LeafSpec()


def treespec_leaf() -> LeafSpec:
    return _LEAF


def tree_flatten(tree, is_leaf: Callable | None = None) -> tuple[list, TreeSpec]:
    leaves = []

    def visit(node) -> TreeSpec:
        if tree_is_leaf(node, is_leaf):
            leaves.append(node)
            return _LEAF
        kind = _node_type(node)
        children, context = SUPPORTED_NODES[kind].flatten_fn(node)
        return TreeSpec(kind, context, [visit(c) for c in children])
    return leaves, visit(tree)


def tree_flatten_with_path(tree, is_leaf: Callable | None = None) -> tuple[list, TreeSpec]:
    """`([(key_path, leaf)], spec)`: each leaf with the tuple of keys leading to it."""
    return tree_leaves_with_path(tree, is_leaf), tree_structure(tree, is_leaf)


def tree_leaves_with_path(tree, is_leaf: Callable | None = None) -> list:
    found = []

    def visit(node, path: tuple) -> None:
        if tree_is_leaf(node, is_leaf):
            found.append((path, node))
            return
        for key, child in _children_with_keys(node):
            visit(child, path + (key,))
    visit(tree, ())
    return found


def tree_unflatten(leaves, treespec: TreeSpec):
    if not isinstance(treespec, TreeSpec):
        raise TypeError(f"Expected `treespec` to be an instance of PyTreeSpec but got item of "
                        f"type {type(treespec)}.")
    return treespec.unflatten(leaves)


def tree_iter(tree, is_leaf: Callable | None = None):
    if tree_is_leaf(tree, is_leaf):
        yield tree
        return
    children, _ = SUPPORTED_NODES[_node_type(tree)].flatten_fn(tree)
    for child in children:
        yield from tree_iter(child, is_leaf)


def tree_leaves(tree, is_leaf: Callable | None = None) -> list:
    return list(tree_iter(tree, is_leaf))


def tree_structure(tree, is_leaf: Callable | None = None) -> TreeSpec:
    return tree_flatten(tree, is_leaf)[1]


def tree_map(func, tree, *rests, is_leaf: Callable | None = None):
    """`func` at every leaf of `tree` (and the matching subtrees of `rests`, which have
    `tree`'s structure as a prefix), in a tree of the same structure."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [spec.flatten_up_to(r) for r in rests]
    return spec.unflatten(func(*xs) for xs in zip(leaves, *others))


def tree_map_(func, tree, *rests, is_leaf: Callable | None = None):
    """tree_map for the side effects: calls `func` at every leaf, returns `tree`."""
    leaves, spec = tree_flatten(tree, is_leaf)
    others = [spec.flatten_up_to(r) for r in rests]
    for xs in zip(leaves, *others):
        func(*xs)
    return tree


def _only(type_or_types_or_pred) -> Callable:
    if isinstance(type_or_types_or_pred, (type, tuple)):
        return lambda x: isinstance(x, type_or_types_or_pred)
    return type_or_types_or_pred


def tree_map_only(type_or_types_or_pred, func, tree, is_leaf: Callable | None = None):
    """tree_map changing only the leaves of the given type(s) (or passing a predicate)."""
    wanted = _only(type_or_types_or_pred)
    return tree_map(lambda x: func(x) if wanted(x) else x, tree, is_leaf=is_leaf)


def tree_all(pred, tree, is_leaf: Callable | None = None) -> bool:
    return all(map(pred, tree_iter(tree, is_leaf)))


def tree_any(pred, tree, is_leaf: Callable | None = None) -> bool:
    return any(map(pred, tree_iter(tree, is_leaf)))


# the built-in containers ------------------------------------------------------------
_DICTS = (dict, OrderedDict, defaultdict)

register_pytree_node(tuple, lambda t: (list(t), None), lambda c, _: tuple(c))
register_pytree_node(list, lambda t: (list(t), None), lambda c, _: list(c))
register_pytree_node(dict, lambda d: (list(d.values()), list(d)),
                     lambda c, keys: dict(zip(keys, c)),
                     flatten_with_keys_fn=_dict_flatten_with_keys)
register_pytree_node(namedtuple, lambda t: (list(t), type(t)), lambda c, cls: cls(*c))
register_pytree_node(OrderedDict, lambda d: (list(d.values()), list(d)),
                     lambda c, keys: OrderedDict(zip(keys, c)),
                     flatten_with_keys_fn=_dict_flatten_with_keys)
register_pytree_node(defaultdict, lambda d: (list(d.values()), [d.default_factory, list(d)]),
                     lambda c, ctx: defaultdict(ctx[0], zip(ctx[1], c)),
                     flatten_with_keys_fn=lambda d: (_dict_flatten_with_keys(d)[0],
                                                     [d.default_factory, list(d)]))
register_pytree_node(deque, lambda d: (list(d), d.maxlen), lambda c, n: deque(c, maxlen=n))
