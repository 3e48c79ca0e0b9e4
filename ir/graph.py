"""The graph IR: SSA values, immutable nodes, and graphs that print as text.

    graph(%x: f32[2,3], %w: f32[3,4]):
      %0: f32[2,4] = mm(%x, %w)
      %1: f32[2,4] = relu(%0)
      return (%1)

A Node applies one Op to tensor inputs (Values, lists of Values for Tensor[] arguments, or
None for an absent optional tensor) with attributes (the op's non-tensor arguments, by
name, in schema order) and defines one Value per tensor result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ir.dtypes import DType
from ir.ops import Op



class SymbolicSize(TypeError):
    """Code that needs a size's value met a symbolic size: the graph cannot stay symbolic
    there (compile() then compiles it for the sizes at hand)."""


class Sym(str):
    """The name of a symbolic size (s0, s1 ...) in a type. It is equal to itself and to
    no number; arithmetic, ordering and use as an index raise SymbolicSize, so code that
    needs the value cannot go on with a stale or garbled one (`str` would repeat itself
    under `*`). Every value a symbol takes is at least 2: sizes 0 and 1 are never made
    symbolic (compiler/dynamic.py), so `d == 1` answering False is true of every value."""
    __slots__ = ()

    def _refuse(self, *_):
        raise SymbolicSize(f"the symbolic size {str(self)} has no value here")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _refuse
    __mod__ = __rmod__ = __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __index__ = __int__ = __float__ = _refuse
    __eq__ = str.__eq__
    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return str(self)

    def __reduce__(self):
        return Sym, (str(self),)


Dim = int | Sym  # a size, or the name of a symbolic size


@dataclass(frozen=True)
class TensorType:
    shape: tuple[Dim, ...]
    dtype: DType
    device: str = "cpu"

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        where = "" if self.device == "cpu" else f"@{self.device}"
        return f"{self.dtype.short}[{dims}]{where}"

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            if not isinstance(d, int):
                raise SymbolicSize(f"numel of a symbolic shape {self}")
            n *= d
        return n


@dataclass(frozen=True)
class Value:
    name: str
    type: TensorType

    def __post_init__(self):
        # values key every environment of the interpreter and the passes: hash once
        object.__setattr__(self, "_hash", hash((self.name, self.type)))

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return f"%{self.name}"


Input = Value | tuple[Value, ...] | None


@dataclass(frozen=True)
class Node:
    op: Op
    inputs: tuple[Input, ...]
    attrs: tuple[tuple[str, object], ...]
    outputs: tuple[Value, ...]

    @property
    def attr(self) -> dict:
        return dict(self.attrs)

    def input_values(self) -> list[Value]:
        """Every Value this node reads, lists flattened, in order."""
        out = []
        for i in self.inputs:
            if isinstance(i, tuple):
                out.extend(i)
            elif i is not None:
                out.append(i)
        return out

    def replace(self, **changes) -> Node:
        fields = {"op": self.op, "inputs": self.inputs, "attrs": self.attrs,
                  "outputs": self.outputs}
        fields.update(changes)
        return Node(**fields)

    def __str__(self) -> str:
        lhs = ", ".join(f"{v}: {v.type}" for v in self.outputs)
        args = [_format_input(i) for i in self.inputs]
        args += [f"{k}={format_attr(v)}" for k, v in self.attrs]
        return f"{lhs} = {self.op.qualified_name}({', '.join(args)})"


def strict_key(v):
    """A value (an attribute, a number) as a key that tells what `==` does not: 1 from
    1.0 and True, -0.0 from 0.0 (constants merged by `==` turned -0.0 into 0.0)."""
    if isinstance(v, tuple):
        return tuple(strict_key(x) for x in v)
    if isinstance(v, float):
        return (float, repr(v))
    return (type(v), v)


def _format_input(i: Input) -> str:
    if i is None:
        return "None"
    if isinstance(i, tuple):
        return "[" + ", ".join(str(v) for v in i) + "]"
    return str(i)


def format_attr(v) -> str:
    if isinstance(v, Graph):  # a fused kernel's body, printed as a nested block
        return "{\n" + "".join("  " + ln + "\n" for ln in str(v).splitlines()) + "}"
    if isinstance(v, DType):
        return v.short
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(format_attr(x) for x in v) + "]"
    return repr(v)


@dataclass(frozen=True)
class Graph:
    inputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    name: str = field(default="graph", compare=False)

    def __str__(self) -> str:
        head = ", ".join(f"{v}: {v.type}" for v in self.inputs)
        lines = [f"graph({head}):"]
        lines += ["  " + ln for n in self.nodes for ln in str(n).splitlines()]
        lines.append("  return (" + ", ".join(str(v) for v in self.outputs) + ")")
        return "\n".join(lines) + "\n"

    def producers(self) -> dict[Value, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    def users(self) -> dict[Value, list[Node]]:
        out: dict[Value, list[Node]] = {v: [] for v in self.inputs}
        for n in self.nodes:
            for v in n.outputs:
                out.setdefault(v, [])
            for v in n.input_values():
                out.setdefault(v, []).append(n)
        return out

    def replace(self, **changes) -> Graph:
        fields = {"inputs": self.inputs, "nodes": self.nodes, "outputs": self.outputs,
                  "name": self.name}
        fields.update(changes)
        return Graph(**fields)


class GraphBuilder:
    """Builds a Graph node by node, naming values %0, %1, ... in definition order."""

    def __init__(self):
        self._inputs: list[Value] = []
        self._nodes: list[Node] = []
        self._count = 0

    def _fresh(self, type_: TensorType, name: str | None = None) -> Value:
        if name is None:
            name = str(self._count)
            self._count += 1
        return Value(name, type_)

    def input(self, type_: TensorType, name: str | None = None) -> Value:
        v = self._fresh(type_, name)
        self._inputs.append(v)
        return v

    def add(self, op: Op, inputs, attrs: dict | tuple, types) -> tuple[Value, ...]:
        if isinstance(types, TensorType):
            types = (types,)
        outputs = tuple(self._fresh(t) for t in types)
        items = tuple(attrs.items()) if isinstance(attrs, dict) else tuple(attrs)
        self._nodes.append(Node(op, tuple(inputs), items, outputs))
        return outputs

    def build(self, outputs, name: str = "graph") -> Graph:
        return Graph(tuple(self._inputs), tuple(self._nodes), tuple(outputs), name)
