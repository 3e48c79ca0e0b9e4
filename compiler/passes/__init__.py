"""The optimisation pipeline: one flat list of passes, each a function Graph -> Graph,
run in this order (KILN_DEBUG=2 prints the graph after each; `verify=True`, used by the
tests, checks it with ir.verify and the ops' type rules after each)."""
from __future__ import annotations

from runtime import debugging as debug
from compiler.passes.constant_fold import constant_fold
from compiler.passes.cse import cse
from compiler.passes.dce import dce
from compiler.passes.decompose import decompose
from compiler.passes.fusion import fuse
from compiler.passes.layout import drop_copies
from compiler.passes.memory import plan_memory, traffic
from compiler.passes.rewrite import verify_types
from compiler.passes.simplify import simplify
from compiler.passes.split_reductions import split_reductions
from ir.graph import Graph

PIPELINE = (
    ("decompose", decompose),          # composite ops -> the core fusion understands
    ("constant_fold", constant_fold),  # scalar-only arithmetic -> one scalar
    ("simplify", simplify),            # x*1, neg(neg x), transpose pairs, view chains
    ("cse", cse),                      # repeated nodes computed once
    ("drop_copies", drop_copies),      # clones nobody needs
    ("dce", dce),                      # nodes no output reads
    ("split_reductions", split_reductions),  # sum over N, H, W: over H, W first
    ("fuse", fuse),                    # kernels: elementwise, reductions, GEMM epilogues
)


def optimize(graph: Graph, *, verify: bool = False, emits=None) -> Graph:
    """The pipeline over `graph`; `emits(node)` is the backend's answer to whether its
    kernels can hold a node (fusion asks it)."""
    check = verify or debug.level() >= 2
    options = {"fuse": {"emits": emits}}
    for name, run in PIPELINE:
        graph = run(graph, **options.get(name, {}))
        if check:
            verify_types(graph)
        debug.banner(f"after {name}", str(graph), at_level=2)
    return graph


__all__ = ["PIPELINE", "optimize", "decompose", "constant_fold", "simplify", "cse",
           "drop_copies", "dce", "split_reductions", "fuse", "plan_memory", "traffic"]
