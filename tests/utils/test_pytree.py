"""eager.utils._pytree against torch.utils._pytree: the same leaves and the same printed
TreeSpec for every built-in container, unflatten inverting flatten, tree_map over
several trees, registered classes, and the errors of mismatched structures."""
from __future__ import annotations

from collections import OrderedDict, defaultdict, deque, namedtuple

import pytest

import eager
from eager.utils import _pytree as pytree

torch = pytest.importorskip("torch", reason="torch is not installed: no reference to compare")
tp = torch.utils._pytree

Point = namedtuple("Point", "x y")
TREES = {
    "nested dict": {"a": (1, [2, 3]), "b": None},
    "list with empties": [1, (2,), {}, [], ()],
    "namedtuple": Point(1, [2, {"z": 3}]),
    "ordered dict": OrderedDict(b=1, a=2),
    "defaultdict": defaultdict(list, {"k": [1, 2]}),
    "deque": deque([1, (2, 3)], maxlen=4),
    "a leaf": 5,
}


@pytest.mark.parametrize("name", TREES)
def test_flatten_gives_torchs_leaves_and_spec_and_unflatten_inverts_it(name):
    tree = TREES[name]
    leaves, spec = pytree.tree_flatten(tree)
    their_leaves, their_spec = tp.tree_flatten(tree)
    assert leaves == their_leaves
    assert repr(spec) == repr(their_spec)
    assert (spec.num_leaves, spec.num_nodes) == (their_spec.num_leaves, their_spec.num_nodes)
    rebuilt = pytree.tree_unflatten(leaves, spec)
    assert rebuilt == tree and type(rebuilt) is type(tree)
    assert pytree.tree_leaves(tree) == leaves and pytree.tree_structure(tree) == spec


def test_tree_map_maps_leaves_and_takes_further_trees_with_the_first_as_prefix():
    tree = {"x": 7, "y": (42, 64), "z": None}
    assert pytree.tree_map(lambda v: v is None, tree) == tp.tree_map(lambda v: v is None, tree)
    assert pytree.tree_map(lambda x, y: [x] + y, [5, 6], [[7, 9], [1, 2]]) == \
        [[5, 7, 9], [6, 1, 2]]
    tensors = {"w": eager.ones(2), "n": 3, "b": [eager.zeros(1)]}
    doubled = pytree.tree_map_only(eager.Tensor, lambda t: t * 2, tensors)
    assert doubled["w"].tolist() == [2.0, 2.0] and doubled["n"] == 3
    assert pytree.tree_all(lambda v: v > 0, [1, (2, 3)]) and not pytree.tree_any(
        lambda v: v > 5, [1, (2, 3)])
    seen = []
    assert pytree.tree_map_(seen.append, [1, (2,)]) == [1, (2,)] and seen == [1, 2]


def test_is_leaf_stops_flattening_where_it_says():
    tree = [(1, 2), [3]]
    leaves, spec = pytree.tree_flatten(tree, is_leaf=lambda n: isinstance(n, tuple))
    assert leaves == [(1, 2), 3] and spec.num_leaves == 2


def test_a_registered_class_flattens_and_rebuilds():
    class Pair:
        def __init__(self, a, b, tag):
            self.a, self.b, self.tag = a, b, tag

    pytree.register_pytree_node(Pair, lambda p: ([p.a, p.b], p.tag),
                                lambda children, tag: Pair(*children, tag))
    try:
        leaves, spec = pytree.tree_flatten([Pair(1, (2, 3), "t")])
        assert leaves == [1, 2, 3] and spec.child(0).context == "t"
        rebuilt = pytree.tree_map(lambda v: v * 10, [Pair(1, (2, 3), "t")])[0]
        assert (rebuilt.a, rebuilt.b, rebuilt.tag) == (10, (20, 30), "t")
        with pytest.raises(ValueError, match="already registered"):
            pytree.register_pytree_node(Pair, None, None)
    finally:
        del pytree.SUPPORTED_NODES[Pair]


def test_mismatched_structures_and_leaf_counts_are_errors():
    _, spec = pytree.tree_flatten([1, 2])
    with pytest.raises(ValueError, match="`leaves` has length 3 but the spec refers to a pytree "
                                         "that holds 2 items"):
        spec.unflatten([1, 2, 3])
    with pytest.raises(ValueError, match="Node arity mismatch; expected 2, but got 3"):
        pytree.tree_map(lambda a, b: a, [1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="Node type mismatch"):
        pytree.tree_map(lambda a, b: a, [1, 2], (1, 2))
    with pytest.raises(ValueError, match="Node keys mismatch"):
        pytree.tree_map(lambda a, b: a, {"a": 1}, {"b": 1})
    with pytest.raises(TypeError, match="Expected `treespec` to be an instance of PyTreeSpec"):
        pytree.tree_unflatten([1], "not a spec")


@pytest.mark.parametrize("name", TREES)
def test_flatten_with_path_gives_torchs_key_paths(name):
    ours, _ = pytree.tree_flatten_with_path(TREES[name])
    theirs, _ = tp.tree_flatten_with_path(TREES[name])
    assert [(pytree.keystr(p), leaf) for p, leaf in ours] == \
        [(tp.keystr(p), leaf) for p, leaf in theirs]


def test_a_class_registered_with_keys_names_its_children_by_them():
    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b
    pytree.register_pytree_node(
        Pair, lambda p: ([p.a, p.b], None), lambda c, _: Pair(*c),
        flatten_with_keys_fn=lambda p: ([(pytree.GetAttrKey("a"), p.a),
                                         (pytree.GetAttrKey("b"), p.b)], None))
    try:
        paths = pytree.tree_flatten_with_path({"p": Pair(1, [2])})[0]
        assert [(pytree.keystr(p), v) for p, v in paths] == [("['p'].a", 1), ("['p'].b[0]", 2)]
        assert pytree._dict_flatten_with_keys({"k": 3}) == ([(pytree.MappingKey("k"), 3)], ["k"])
    finally:
        del pytree.SUPPORTED_NODES[Pair]
