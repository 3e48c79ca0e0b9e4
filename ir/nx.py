"""The graph as a networkx DiGraph (for topological order, cycle checks, liveness) and as
Graphviz DOT text (for pictures). networkx is imported only when these are used."""
from __future__ import annotations

from ir.graph import Graph


def to_networkx(graph: Graph):
    """Nodes are 'in:<name>' for graph inputs and the node index for ops; an edge u -> v
    carries the value v reads from u."""
    import networkx as nx
    g = nx.DiGraph()
    producer = {}
    for v in graph.inputs:
        g.add_node(f"in:{v.name}", kind="input", value=v)
        producer[v] = f"in:{v.name}"
    for i, node in enumerate(graph.nodes):
        g.add_node(i, kind="op", node=node)
        for v in node.input_values():
            g.add_edge(producer[v], i, value=v)
        for v in node.outputs:
            producer[v] = i
    for v in graph.outputs:
        g.add_node(f"out:{v.name}", kind="output", value=v)
        g.add_edge(producer[v], f"out:{v.name}", value=v)
    return g


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(graph: Graph) -> str:
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;",
             "  node [shape=box, fontname=monospace];"]
    producer = {}
    for v in graph.inputs:
        lines.append(f"  {_quote('in_' + v.name)} [label={_quote(f'%{v.name}: {v.type}')}, "
                     "shape=ellipse];")
        producer[v] = "in_" + v.name
    for i, node in enumerate(graph.nodes):
        outs = ", ".join(f"%{v.name}: {v.type}" for v in node.outputs)
        label = f"{node.op.qualified_name}\\n{outs}"
        lines.append(f"  n{i} [label=\"{label}\"];")
        for v in node.input_values():
            lines.append(f"  {_quote(producer[v])} -> n{i};")
        for v in node.outputs:
            producer[v] = f"n{i}"
    for v in graph.outputs:
        lines.append(f"  {_quote('out_' + v.name)} [label={_quote(f'return %{v.name}')}, "
                     "shape=ellipse];")
        lines.append(f"  {_quote(producer[v])} -> {_quote('out_' + v.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"
