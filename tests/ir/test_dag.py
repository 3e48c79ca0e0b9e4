"""ir/dag.py's two algorithms give networkx's answers (fusion used networkx for them)."""
import random

import networkx as nx
import pytest

from ir.dag import merging_closes_cycle, topological_order


def _random_dag(seed: int, size: int = 12) -> dict:
    rng = random.Random(seed)
    nodes = rng.sample(range(100), size)  # a topological order unrelated to the labels
    return {a: {b for b in nodes[i + 1:] if rng.random() < 0.2} for i, a in enumerate(nodes)}


def _networkx(successors: dict) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(successors)
    g.add_edges_from((a, b) for a, out in successors.items() for b in out)
    return g


@pytest.mark.parametrize("seed", range(20))
def test_merging_closes_a_cycle_exactly_where_networkx_finds_one(seed):
    successors = _random_dag(seed)
    g = _networkx(successors)
    for a in successors:
        for b in successors:
            if a != b:
                merged = nx.contracted_nodes(g, a, b, self_loops=False)
                assert merging_closes_cycle(successors, a, b) == \
                    (not nx.is_directed_acyclic_graph(merged)), (a, b)


@pytest.mark.parametrize("seed", range(20))
def test_topological_order_is_networkx_lexicographical_order(seed):
    successors = _random_dag(seed)
    key = random.Random(seed).sample(range(1000), len(successors))
    rank = dict(zip(successors, key))
    expected = list(nx.lexicographical_topological_sort(_networkx(successors), key=rank.get))
    assert topological_order(successors, key=rank.get) == expected


def test_a_cycle_has_no_topological_order():
    with pytest.raises(ValueError, match="cycle"):
        topological_order({1: {2}, 2: {1}}, key=lambda n: n)
