"""Dynamic sizes: one compiled graph serves a region captured at several sizes.

Guards are exact (compiler/guards.py): a call with sizes not seen before runs the
function's Python under capture again, so every decision the Python makes on a size (a
slice length, `max(1, n // 2)`, a branch on `x.shape[0]`) is made again for the new
sizes. What is shared is the compiled code. Captured graphs with the same *skeleton*
(ops, attributes, wiring, dtypes, ranks, devices: everything but the sizes) form a
family; two members that differ in sizes are *generalized* to the most specific graph
that has both as instances (anti-unification: each pair of differing sizes becomes a
symbol, s0, s1 ...), which is compiled once; a later member that instantiates it (`bind`)
runs its code.

A symbolic graph is sound by construction:
- it is used only for a graph that instantiates it exactly (same skeleton, same sizes
  where it has numbers, one value per symbol), and that graph was captured from the
  function at these very sizes;
- every symbol is an input's size, so the code reads it from its inputs at run time (a
  size only an intermediate value has, as a slice's length, keeps graphs apart);
- sizes 0 and 1 never become symbols: the code may rely on a symbol being at least 2
  (ir.graph.Sym), and empty and broadcast dims keep their own graphs;
- the passes and code generators see symbols as ir.graph.Sym, which refuses arithmetic
  and ordering: a pass that needs a size's value raises, and the family then compiles
  each member for its own sizes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ir.graph import Graph, Node, Sym, TensorType, Value, strict_key

KEPT_STATIC = 4  # members kept per family to generalize from (the latest)


def _values(graph: Graph):
    yield from graph.inputs
    for node in graph.nodes:
        yield from node.outputs


def _wiring(i):
    if isinstance(i, tuple):
        return tuple(v.name for v in i)
    return None if i is None else i.name


def skeleton(graph: Graph) -> tuple:
    """Everything about `graph` but its sizes, as a hashable key (ranks kept)."""
    def decl(v: Value):
        return v.name, v.type.dtype, len(v.type.shape), v.type.device
    return (tuple(decl(v) for v in graph.inputs),
            tuple((n.op, strict_key(n.attrs), tuple(_wiring(i) for i in n.inputs),
                   tuple(decl(v) for v in n.outputs)) for n in graph.nodes),
            tuple(v.name for v in graph.outputs))


def generalize(g1: Graph, g2: Graph) -> Graph | None:
    """The most specific graph with symbolic sizes that both g1 and g2 (of one skeleton)
    instantiate, or None: when they have the same sizes, when a size that differs is 0 or
    1 in either, or when a symbol would be a size no input has."""
    symbols: dict[tuple, Sym] = {}
    types: dict[str, TensorType] = {}
    for v1, v2 in zip(_values(g1), _values(g2)):
        dims = []
        for a, b in zip(v1.type.shape, v2.type.shape):
            if a == b:
                dims.append(a)
            elif a in (0, 1) or b in (0, 1):
                return None
            else:
                dims.append(symbols.setdefault((a, b), Sym(f"s{len(symbols)}")))
        types[v1.name] = TensorType(tuple(dims), v1.type.dtype, v1.type.device)
    bound = {d for v in g1.inputs for d in types[v.name].shape if isinstance(d, Sym)}
    if not symbols or bound != set(symbols.values()):
        return None
    return _retyped(g1, types)


def bind(symbolic: Graph, graph: Graph) -> dict | None:
    """The value of each symbol under which `graph` (of the same skeleton) is `symbolic`
    itself, or None when it is not an instance (a number differs, a symbol would take
    two values, or one below 2)."""
    binding: dict[Sym, int] = {}
    for vs, vg in zip(_values(symbolic), _values(graph)):
        for s, g in zip(vs.type.shape, vg.type.shape):
            if isinstance(s, Sym):
                if g < 2 or binding.setdefault(s, g) != g:
                    return None
            elif s != g:
                return None
    return binding


def _retyped(graph: Graph, types: dict[str, TensorType]) -> Graph:
    """`graph` with each value's type replaced by types[its name]."""
    new: dict[str, Value] = {}

    def value(v: Value) -> Value:
        if v.name not in new:
            new[v.name] = Value(v.name, types[v.name])
        return new[v.name]

    def wired(i):
        if isinstance(i, tuple):
            return tuple(value(v) for v in i)
        return None if i is None else value(i)
    inputs = tuple(value(v) for v in graph.inputs)
    nodes = tuple(Node(n.op, tuple(wired(i) for i in n.inputs), n.attrs,
                       tuple(value(v) for v in n.outputs)) for n in graph.nodes)
    return Graph(inputs, nodes, tuple(value(v) for v in graph.outputs), graph.name)


def symbols_of(graph: Graph) -> list[Sym]:
    """The symbols of a graph's input sizes, in order of appearance."""
    return list(dict.fromkeys(d for v in graph.inputs for d in v.type.shape
                              if isinstance(d, Sym)))


@dataclass
class Family:
    """The compiled graphs of one skeleton: symbolic ones (each serving its instances)
    and the latest static ones (to generalize from)."""
    symbolic: list = field(default_factory=list)   # (graph, run)
    static: list = field(default_factory=list)     # (graph, run), the latest last
    kept_static: str = ""                           # why a symbolic graph failed to compile


def compile_sizes(families: dict, graph: Graph, compile, history: list):
    """The run for `graph`: a symbolic family member's that it instantiates, else a new
    generalization's (compiled with `compile`), else its own. What happened goes to
    `history`. Returns (run, whether anything was compiled)."""
    family = families.setdefault(skeleton(graph), Family())
    found = instantiated(family, graph)
    if found is not None:
        return found[1], False
    if not family.kept_static:
        for other, _ in reversed(family.static):
            general = generalize(other, graph)
            if general is None:
                continue
            try:
                run = compile(general)
            except Exception as e:  # noqa: BLE001 - a pass that needs a value: compile
                family.kept_static = f"{type(e).__name__}: {e}"  # the sizes at hand
                history.append(f"a region kept static sizes: its symbolic graph did not "
                               f"compile ({family.kept_static})")
                break
            family.symbolic.append((general, run))
            names = ", ".join(symbols_of(general))
            history.append(f"a region's sizes became symbolic ({names}): one compiled "
                           f"graph serves its sizes from now on")
            return run, True
    run = compile(graph)
    family.static = family.static[-(KEPT_STATIC - 1):] + [(graph, run)]
    return run, True


def instantiated(family: Family | None, graph: Graph) -> tuple | None:
    """(symbolic graph, its run) of the family member that `graph` instantiates."""
    for general, run in family.symbolic if family else ():
        if bind(general, graph) is not None:
            return general, run
    return None


def symbolic_source(families: dict, graph: Graph, run):
    """The symbolic graph whose code `run` is, where `graph` instantiates it; else None."""
    found = instantiated(families.get(skeleton(graph)), graph)
    return found[0] if found is not None and found[1] is run else None


def probe_arguments(args: tuple, kwargs: dict) -> list:
    """The call's arguments with dim 0 grown by one (zeros), to learn which sizes a
    function's graph depends on: first every tensor's, then (when that cannot run, as
    when a weight's dim 0 must match another's) the first tensor's alone, as a batch
    dimension would. Empty when there is no tensor to grow."""
    from eager.factories import zeros
    from eager.tensor import Tensor
    grown = []

    def grow(v, only_first: bool):
        if isinstance(v, Tensor) and v.dim() >= 1:
            if only_first and grown:
                return v
            grown.append(v)
            shape = (v.shape[0] + 1,) + tuple(v.shape[1:])
            return zeros(shape, dtype=v.dtype, device=v.device,
                         requires_grad=v.requires_grad)
        if isinstance(v, (list, tuple)):
            return type(v)(grow(x, only_first) for x in v)
        if isinstance(v, dict):
            return {k: grow(x, only_first) for k, x in v.items()}
        return v

    probes = [(grow(args, False), grow(kwargs, False))]
    if len(grown) > 1:
        grown.clear()
        probes.append((grow(args, True), grow(kwargs, True)))
    return probes if grown else []
