"""Fusion: nodes that can run as one kernel become one `fused` node holding the small
graph they compute.

Groups, merged greedily and never into a cycle (checked on the graph of groups, ir/dag.py):
- elementwise chains of one shape (vertical), and elementwise groups of one shape that
  read the same input (horizontal);
- reductions (sum, amax, amin) with the elementwise ops around them that run over the
  same rows: producers shaped like the reduction's input, consumers shaped like its
  input or its output (reduced dims kept or dropped: a mean's divide); several reductions over the same rows join (softmax
  and layer norm become one kernel), reductions over different rows never do (an op
  between them joins the first);
- a matrix product with its elementwise epilogue (bias, activation, residual, scale) and
  the elementwise prologues of its operands that nothing else reads;
- a gather (`t[i]`, index_select, embedding, gather) heads an elementwise group of its
  result's shape: the kernel loads its source at the indexed positions. It never joins
  the group that computes its source or index (they are read from memory); alone, it is
  an elementwise kernel of its own.
Views and scalar constants are free: they are copied into every kernel that reads them
(a transpose read by a GEMM is folded into how the GEMM reads its operand).
A cheap elementwise op left a kernel of its own is computed again in each elementwise or
row kernel that reads it (`_recomputed`) where that reads no more memory than its result
would: BatchNorm's x - mean, read by the variance's sum and by the normalisation, which
fusion cannot join (the variance lies between them). On (8, 64, 32, 32) float32 its
statistics then read x three times and write once, where they read four times and wrote
twice.
"""
from __future__ import annotations

from typing import Callable

from compiler.passes.rewrite import Rewriter
from ir.dag import merging_closes_cycle, topological_order
from ir.graph import Graph, GraphBuilder, Node, Value
from ir.records import pointwise_ops
from ir.ops import VIEW, Op

FREE = VIEW | {Op.SCALAR}
POINTWISE = frozenset(pointwise_ops()) | {Op.CLONE, Op.TO_COPY}  # from the op records
REDUCE = frozenset({Op.SUM, Op.AMAX, Op.AMIN, Op.ARGMAX, Op.ARGMIN})
GEMM = frozenset({Op.MM, Op.BMM})
GATHER = frozenset({Op.INDEX_SELECT, Op.EMBEDDING, Op.GATHER})  # and index with one index


def _kind(node: Node, emits) -> str:
    if node.op in FREE:
        return "free"
    if emits is not None and not emits(node):
        return "opaque"  # no kernel of the backend can hold it: its neighbours still fuse
    return _kind_of_op(node)


def _kind_of_op(node: Node) -> str:
    if node.op in FREE:
        return "free"
    if node.op in POINTWISE:
        return "elementwise"
    if node.op in REDUCE:
        return "reduction"
    if node.op in GEMM:
        return "gemm"
    if node.op in GATHER or (node.op is Op.INDEX and len(node.inputs[1]) == 1):
        return "gather"
    return "opaque"


class _Groups:
    """Union-find over node indices, with each group's kind and the group DAG."""

    def __init__(self, graph: Graph, emits=None):
        self.graph = graph
        self.nodes = graph.nodes
        self.kind = [_kind(n, emits) for n in self.nodes]
        self.parent = list(range(len(self.nodes)))
        self.producer = {v: i for i, n in enumerate(self.nodes) for v in n.outputs}
        self.users: dict[Value, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for v in n.input_values():
                self.users.setdefault(v, []).append(i)
        # a gather starts as an elementwise kernel of its own
        self.group_kind = {i: "elementwise" if k == "gather" else k
                           for i, k in enumerate(self.kind)}
        self._sources: dict[int, frozenset[int]] = {}
        self._readers: dict[int, frozenset[int]] | None = None

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def sources(self, i: int) -> frozenset[int]:
        """Non-free nodes whose results node i reads (seeing through free nodes). The
        graph does not change while fusing, so each node's are found once: dag() asks
        for every node's at every merge (the char transformer's backward graph: ~350
        merges)."""
        found = self._sources.get(i)
        if found is None:
            found = self._sources[i] = frozenset(self._find_sources(i))
        return found

    def readers(self, i: int) -> frozenset[int]:
        """Non-free nodes that read node i's results (seeing through free nodes): the
        inverse of `sources`, made for every node at the first question."""
        if self._readers is None:
            readers: dict[int, set[int]] = {}
            for k in range(len(self.nodes)):
                if self.kind[k] != "free":
                    for p in self.sources(k):
                        readers.setdefault(p, set()).add(k)
            self._readers = {p: frozenset(ks) for p, ks in readers.items()}
        return self._readers.get(i, frozenset())

    def _find_sources(self, i: int) -> set[int]:
        out, stack = set(), list(self.nodes[i].input_values())
        while stack:
            v = stack.pop()
            p = self.producer.get(v)
            if p is None:
                continue
            if self.kind[p] == "free":
                stack.extend(self.nodes[p].input_values())
            else:
                out.add(p)
        return out

    def dag(self) -> dict[int, set[int]]:
        """The groups (by root) and the groups each one's results flow into."""
        g: dict[int, set[int]] = {}
        for i in range(len(self.nodes)):
            if self.kind[i] != "free":
                b = self.find(i)
                g.setdefault(b, set())
                for p in self.sources(i):
                    a = self.find(p)
                    if a != b:
                        g.setdefault(a, set()).add(b)
        return g

    def try_merge(self, a: int, b: int, kind: str) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if merging_closes_cycle(self.dag(), ra, rb):
            return False
        self.parent[rb] = ra
        self.group_kind[ra] = kind
        return True

    def members(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i in range(len(self.nodes)):
            if self.kind[i] != "free":
                out.setdefault(self.find(i), []).append(i)
        return out


def _shape(node: Node):
    return node.outputs[0].type.shape


def row_space(node: Node):
    """(input shape, reduced dims) of a reduction, dims made non-negative; a zero-dim
    input has none to reduce (its dim 0 or -1 is its one element)."""
    x = node.inputs[0].type.shape
    dims = node.attr["dim"]
    dims = range(len(x)) if dims is None or dims == () else \
        ((dims,) if isinstance(dims, int) else dims)
    return tuple(x), frozenset(d % len(x) for d in dims) if x else frozenset()


def _in_rows(shape, space) -> bool:
    """Whether an elementwise result of `shape` runs over the rows of `space`: the full
    shape, or one value per row with the reduced dims kept or dropped (`x.mean(-1)`'s
    divide)."""
    full, dims = space
    kept = tuple(1 if i in dims else s for i, s in enumerate(full))
    return tuple(shape) in (full, kept, _dropped(space))


def _dropped(space) -> tuple:
    full, dims = space
    return tuple(s for i, s in enumerate(full) if i not in dims)


def _misread_row(g: _Groups, i: int, j: int, space) -> bool:
    """Whether node i, of the full or kept shape, reads a per-row value of group j with
    the reduced dims dropped that broadcasting lines up with other dims than its rows
    (`x + s` for s = x.sum(-1) of a square x): the kernel would read it per row."""
    full, dims = space
    dropped = _dropped(space)
    kept = tuple(1 if d in dims else s for d, s in enumerate(full))
    if (1,) * (len(full) - len(dropped)) + dropped == kept or \
            tuple(_shape(g.nodes[i])) == dropped:
        return False
    group = g.find(j)
    return any(tuple(v.type.shape) == dropped and v in g.producer and
               g.find(g.producer[v]) == group for v in g.nodes[i].input_values())


def _fuse_reductions(g: _Groups) -> None:
    spaces: dict[int, tuple] = {}
    for i, node in enumerate(g.nodes):
        if g.kind[i] != "reduction":
            continue
        space = row_space(node)
        for j, other in spaces.items():
            if other == space:
                g.try_merge(j, i, "reduction")
        spaces[i] = space
    first, joining = True, True
    while joining:  # elementwise ops over the same rows join (see _late_joiner for the
        joining = False  # rounds after the first)
        for i, node in enumerate(g.nodes):
            if g.kind[i] != "elementwise" or g.group_kind[g.find(i)] != "elementwise":
                continue
            joined = None  # an op between reductions over different rows joins the first:
            for j, space in spaces.items():  # one kernel runs one set of rows
                if joined in (None, space) and _in_rows(_shape(node), space) and \
                        not _misread_row(g, i, j, space) and \
                        (first or _late_joiner(node, space)) and _touches(g, i, j) and \
                        g.try_merge(j, i, "reduction"):
                    joined, joining = space, True
        first = False


def _late_joiner(node: Node, space) -> bool:
    """Whether an op may join a reduction's group in a round after the first, where it
    touches the group through an op that joined after it was looked at (cross_entropy's
    mean: neg(x) * mask, then the sum; neg comes first): only an op over whole rows that
    reads no per-row value, which a row kernel could not also read per element (layer
    norm's backward stays the kernels the first round makes)."""
    full = space[0]
    return tuple(_shape(node)) == full and all(
        not v.type.shape or tuple(v.type.shape) == full for v in node.input_values())


def _touches(g: _Groups, i: int, j: int) -> bool:
    """Whether node i reads from group j or group j reads from node i."""
    rj = g.find(j)
    return any(g.find(p) == rj for p in g.sources(i)) or \
        any(g.find(k) == rj for k in g.readers(i))


def _fuse_gemm(g: _Groups) -> None:
    for i, node in enumerate(g.nodes):
        if g.kind[i] != "gemm":
            continue
        frontier = [i]
        while frontier:  # the epilogue: elementwise consumers of the product's shape
            k = frontier.pop()
            for v in g.nodes[k].outputs:
                for u in g.users.get(v, []):
                    if g.kind[u] == "elementwise" and _shape(g.nodes[u]) == _shape(node) \
                            and g.group_kind[g.find(u)] == "elementwise":
                        if g.try_merge(i, u, "gemm"):
                            frontier.append(u)
        outputs = set(g.graph.outputs)
        for p in g.sources(i):  # prologues nothing else reads
            produced = g.nodes[p].outputs
            if g.kind[p] == "elementwise" and g.group_kind[g.find(p)] == "elementwise" and \
                    all(len(g.users.get(v, [])) == 1 for v in produced) and \
                    _stays_inside(g, g.find(p), i, outputs):
                g.try_merge(i, p, "gemm")


def _stays_inside(g: _Groups, root: int, i: int, outputs: set) -> bool:
    """Whether no result of group `root` leaves it but for gemm i's group (through views):
    a prologue whose value the graph returns (a forward saving it for backward) or
    another kernel reads would be an output computed before the product, which the GEMM
    kernel cannot store."""
    inside = {g.find(i), root}

    def stays(v) -> bool:
        if v in outputs:
            return False
        for u in g.users.get(v, []):
            if g.kind[u] == "free":
                if not all(stays(w) for w in g.nodes[u].outputs):
                    return False
            elif g.find(u) not in inside:
                return False
        return True
    return all(stays(v) for k in range(len(g.nodes))
               if g.kind[k] != "free" and g.find(k) == root for v in g.nodes[k].outputs)


def _fuse_elementwise(g: _Groups) -> None:
    for i, node in enumerate(g.nodes):
        if g.kind[i] != "elementwise" or g.group_kind[g.find(i)] != "elementwise":
            continue
        for p in g.sources(i):
            if g.kind[p] in ("elementwise", "gather") and \
                    g.group_kind[g.find(p)] == "elementwise" and \
                    _shape(g.nodes[p]) == _shape(node) and not _feeds_gather(g, i, p):
                g.try_merge(p, i, "elementwise")
    readers: dict[Value, list[int]] = {}
    for i, node in enumerate(g.nodes):  # horizontal: same shape, same input
        if g.kind[i] == "elementwise" and g.group_kind[g.find(i)] == "elementwise":
            for v in node.input_values():
                readers.setdefault(v, []).append(i)
    for v, idx in readers.items():
        for a, b in zip(idx, idx[1:]):
            if _shape(g.nodes[a]) == _shape(g.nodes[b]) and not _feeds_gather(g, a, b):
                g.try_merge(a, b, "elementwise")


def _feeds_gather(g: _Groups, i: int, p: int) -> bool:
    """Whether merging p's group with i's would put a gather in the group that computes
    its source or index."""
    a, b = g.find(p), g.find(i)
    gathers = [k for k in range(len(g.nodes)) if g.kind[k] == "gather" and g.find(k) in (a, b)]
    return any(g.find(s) in (a, b) for k in gathers for s in g.sources(k))


RECOMPUTED = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.NEG})
"""Ops a kernel computes again rather than read from another kernel's output."""


def _recomputed(g: _Groups) -> set[int]:
    """Nodes alone in an elementwise group, of an op in RECOMPUTED, whose result only
    elementwise and row kernels read (no graph output, no other kind of kernel) and
    which read at most one operand of their result's size, of no wider type, the others
    at most an eighth of it (a per-channel mean): each reader computes it again from
    those, reading no more than the result."""
    found = set()
    for root, idx in g.members().items():
        node = g.nodes[idx[0]]
        if len(idx) != 1 or g.group_kind[root] != "elementwise" or \
                node.op not in RECOMPUTED or len(node.outputs) != 1 or \
                not all(v.type.is_static for v in [*node.input_values(), *node.outputs]):
            continue  # (sizes compared below: symbolic ones are not known)
        out = node.outputs[0].type
        size = out.numel()
        large = [v.type for v in node.input_values() if 8 * v.type.numel() > size]
        if len(large) > 1 or any(t.numel() != size or t.dtype.itemsize > out.dtype.itemsize
                                 for t in large):
            continue
        readers = _kernel_readers(g, node.outputs[0])
        if readers and all(g.group_kind[g.find(u)] in ("elementwise", "reduction")
                           for u in readers):
            found.add(idx[0])
    return found


def _kernel_readers(g: _Groups, v: Value) -> list[int] | None:
    """The non-free nodes that read v (through views); None where v, or a view of it,
    is a graph output."""
    if v in g.graph.outputs:
        return None
    found = []
    for u in g.users.get(v, []):
        if g.kind[u] != "free":
            found.append(u)
            continue
        for w in g.nodes[u].outputs:
            more = _kernel_readers(g, w)
            if more is None:
                return None
            found.extend(more)
    return found


def fuse(graph: Graph, emits: Callable[[Node], bool] | None = None) -> Graph:
    """`graph` with its kernels as fused nodes; `emits` (the backend's answer to "can a
    kernel of yours hold this node?") keeps nodes no kernel can hold out of every group."""
    g = _Groups(graph, emits)
    _fuse_reductions(g)
    _fuse_gemm(g)
    _fuse_elementwise(g)
    return _emit(graph, g)


def _emit(graph: Graph, g: _Groups) -> Graph:
    members = g.members()
    order = topological_order(g.dag(), key=lambda r: max(members[r]))
    rw = Rewriter(graph)
    emitted_free: set[int] = set()
    outputs_needed = set(graph.outputs)
    recomputed = _recomputed(g)
    for r in order:
        idx = sorted(members[r])
        kind = g.group_kind[r]
        if len(idx) == 1 and kind == "opaque":
            _emit_free_inputs(rw, g, idx[0], emitted_free)
            rw.copy(g.nodes[idx[0]])
            continue
        if idx[0] in recomputed:
            continue  # (its readers compute it)
        _emit_group(rw, g, idx, kind, outputs_needed, recomputed)
    for v in graph.outputs:  # outputs that are views of inputs or of kernel results
        if v not in rw.env:
            _emit_free_value(rw, g, v, emitted_free)
    return rw.finish()


def _emit_free_value(rw, g, v, done) -> None:
    p = g.producer.get(v)
    if p is None or v in rw.env:
        return
    for u in g.nodes[p].input_values():
        _emit_free_value(rw, g, u, done)
    if p not in done:
        done.add(p)
        rw.copy(g.nodes[p])


def _emit_free_inputs(rw, g, i, done) -> None:
    for v in g.nodes[i].input_values():
        _emit_free_value(rw, g, v, done)


def _emit_group(rw: Rewriter, g: _Groups, idx: list[int], kind: str, graph_outputs,
                recomputed: set[int]) -> None:
    inside = set(idx)
    body_nodes: list[int] = []
    external: list[Value] = []

    def pull(v: Value):  # bring free and recomputed producers into the body; other
        p = g.producer.get(v)  # values are inputs
        if p is not None and (g.kind[p] == "free" or p in recomputed):
            for u in g.nodes[p].input_values():
                pull(u)
            if p not in body_nodes:
                body_nodes.append(p)
        elif (p is None or p not in inside) and v not in external:
            external.append(v)
    for i in idx:
        for v in g.nodes[i].input_values():
            pull(v)
        body_nodes.append(i)
    produced = [v for i in idx for v in g.nodes[i].outputs]
    used_outside = {v for v in produced if v in graph_outputs or any(
        g.find(u) != g.find(idx[0]) if g.kind[u] != "free" else _free_escapes(g, u, inside)
        for u in g.users.get(v, []))}
    results = [v for v in produced if v in used_outside]
    b = GraphBuilder()
    env = {v: b.input(v.type, f"a{k}") for k, v in enumerate(external)}
    for i in body_nodes:
        n = g.nodes[i]
        ins = [tuple(env[x] for x in a) if isinstance(a, tuple) else
               (None if a is None else env[a]) for a in n.inputs]
        outs = b.add(n.op, ins, n.attrs, [v.type for v in n.outputs])
        env.update(zip(n.outputs, outs))
    body = b.build([env[v] for v in results], name=kind)
    for v in external:
        _emit_free_value(rw, g, v, set())
    outs = rw.emit(Op.FUSED, [tuple(rw.env[v] for v in external)],
                   {"kind": kind, "body": body}, [v.type for v in results])
    rw.env.update(zip(results, outs))


def _free_escapes(g: _Groups, i: int, inside: set[int]) -> bool:
    """Whether free node i's result reaches anything outside the group."""
    for v in g.nodes[i].outputs:
        if v in g.graph.outputs:
            return True
        for u in g.users.get(v, []):
            if g.kind[u] == "free":
                if _free_escapes(g, u, inside):
                    return True
            elif u not in inside:
                return True
    return False
