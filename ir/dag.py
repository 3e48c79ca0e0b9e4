"""Two algorithms over a small directed acyclic graph given as {node: set of successors}
(every node a key): what fusion needs, without importing networkx (~0.1 s of a first
compile) for it."""
from __future__ import annotations

import heapq
from typing import Callable, Hashable

Successors = dict[Hashable, set]


def merging_closes_cycle(successors: Successors, a, b) -> bool:
    """Whether contracting nodes a and b into one would close a cycle: whether a path
    joins them, either way, through some third node (the edge a -> b itself becomes a
    self-loop and is dropped)."""
    for start, goal in ((a, b), (b, a)):
        stack = [s for s in successors[start] if s != goal]
        seen = set(stack)
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            for s in successors[node]:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
    return False


def topological_order(successors: Successors, key: Callable) -> list:
    """The nodes in topological order, the ready node with the smallest key(node) first
    (Kahn's algorithm with a heap; ties go to the earlier key of `successors`): the
    order networkx's lexicographical_topological_sort gives."""
    position = {node: i for i, node in enumerate(successors)}
    indegree = dict.fromkeys(successors, 0)
    for node in successors:
        for s in successors[node]:
            indegree[s] += 1
    ready = [(key(node), position[node], node) for node, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node = heapq.heappop(ready)[2]
        order.append(node)
        for s in successors[node]:
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready, (key(s), position[s], s))
    if len(order) != len(successors):
        raise ValueError("the graph has a cycle")
    return order
