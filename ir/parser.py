"""Read the text form of a Graph back: `parse(str(g)) == g`."""
from __future__ import annotations

import ast
import re

from ir import dtypes
from ir.graph import Graph, Node, Sym, TensorType, Value
from ir.ops import lookup
from ir.schema import Argument, _split_top

_TYPE = re.compile(r"^(\w+)\[([^\]]*)\](?:@([\w:]+))?$")
_HEADER = re.compile(r"^(\w+)\((.*)\):$")
_NODE = re.compile(r"^(.*?)\s=\s([\w.]+)\((.*)\)$")
_RETURN = re.compile(r"^return \((.*)\)$")


class ParseError(ValueError):
    pass


def parse_type(text: str) -> TensorType:
    m = _TYPE.match(text.strip())
    if not m:
        raise ParseError(f"bad tensor type {text!r} (expected e.g. f32[2,3])")
    short, dims, device = m.groups()
    shape = tuple(int(d) if re.fullmatch(r"-?\d+", d) else Sym(d)
                  for d in (x.strip() for x in dims.split(",")) if d)
    return TensorType(shape, dtypes.from_name(short), device or "cpu")


def _parse_decl(text: str, values: dict, lineno: int) -> Value:
    name, _, type_text = text.partition(":")
    name = name.strip()
    if not name.startswith("%"):
        raise ParseError(f"line {lineno}: expected a %value, got {name!r}")
    v = Value(name[1:], parse_type(type_text))
    if v.name in values:
        raise ParseError(f"line {lineno}: %{v.name} is defined twice")
    values[v.name] = v
    return v


def _lookup(token: str, values: dict, lineno: int) -> Value:
    name = token.strip().removeprefix("%")
    if name not in values:
        raise ParseError(f"line {lineno}: %{name} is used before it is defined")
    return values[name]


def _parse_input(token: str, values: dict, lineno: int):
    token = token.strip()
    if token == "None":
        return None
    if token.startswith("["):
        inner = token[1:-1].strip()
        return tuple(_lookup(t, values, lineno) for t in _split_top(inner)) if inner else ()
    return _lookup(token, values, lineno)


def parse_attr(text: str, arg: Argument, blocks: dict | None = None):
    """An attribute's text as the Python value its schema type calls for."""
    text = text.strip()
    if blocks and text in blocks:
        return blocks[text]
    if text == "None":
        return None
    if arg.type.base == "ScalarType":
        return dtypes.from_name(text)
    if text in ("inf", "-inf", "nan"):
        return float(text)
    if text.startswith("["):
        inner = text[1:-1].strip()
        return tuple(parse_attr(t, Argument(arg.name, arg.type.__class__(arg.type.base)))
                     for t in _split_top(inner)) if inner else ()
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise ParseError(f"bad value {text!r} for attribute {arg.name}") from None
    if arg.type.base == "float" and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value


def _parse_node(line: str, values: dict, lineno: int, blocks: dict | None = None) -> Node:
    m = _NODE.match(line)
    if not m:
        raise ParseError(f"line {lineno}: expected '%v: type = op(...)', got {line!r}")
    lhs, op_name, args_text = m.groups()
    try:
        op = lookup(op_name)
    except KeyError:
        raise ParseError(f"line {lineno}: unknown op {op_name!r}") from None
    schema_args = {a.name: a for a in op.schema.arguments}
    inputs, attrs = [], []
    for part in _split_top(args_text):
        key, eq, rest = part.partition("=")
        if eq and re.fullmatch(r"\w+", key.strip()) and not part.lstrip().startswith("%"):
            name = key.strip()
            if name not in schema_args:
                raise ParseError(f"line {lineno}: {op.qualified_name} has no argument {name!r}")
            attrs.append((name, parse_attr(rest, schema_args[name], blocks)))
        else:
            inputs.append(_parse_input(part, values, lineno))
    outputs = tuple(_parse_decl(d, values, lineno) for d in _split_top(lhs))
    return Node(op, tuple(inputs), tuple(attrs), outputs)


def parse(text: str) -> Graph:
    """Parse the text form of a Graph (what `str(graph)` prints)."""
    lines = _join_blocks([(i + 1, ln) for i, ln in enumerate(text.strip().splitlines())
                          if ln.strip()])
    if not lines:
        raise ParseError("empty graph text")
    lineno, header = lines[0]
    m = _HEADER.match(header)
    if not m:
        raise ParseError(f"line {lineno}: expected 'graph(%a: f32[...], ...):'")
    name, params = m.groups()
    values: dict[str, Value] = {}
    inputs = tuple(_parse_decl(p, values, lineno) for p in _split_top(params))
    nodes, outputs = [], None
    for lineno, line in lines[1:]:
        if outputs is not None:
            raise ParseError(f"line {lineno}: text after return")
        if isinstance(line, tuple):  # a node with a nested body block
            head, body = line
            blocks = {"@body": parse(body)}
            nodes.append(_parse_node(head, values, lineno, blocks))
            continue
        r = _RETURN.match(line)
        if r:
            outputs = tuple(_lookup(t, values, lineno) for t in _split_top(r.group(1)))
        else:
            nodes.append(_parse_node(line, values, lineno))
    if outputs is None:
        raise ParseError("graph has no return line")
    return Graph(inputs, tuple(nodes), outputs, name)


def _join_blocks(lines):
    """Stripped lines, where a node line ending in `={` becomes (head, body text): the
    lines up to the matching `})` form the body, parsed as a graph of its own."""
    out, i = [], 0
    while i < len(lines):
        lineno, raw = lines[i]
        line = raw.strip()
        if not line.endswith("={"):
            out.append((lineno, line))
            i += 1
            continue
        depth, body, i = 1, [], i + 1
        while i < len(lines):
            inner = lines[i][1].strip()
            if inner.endswith("={"):
                depth += 1
            elif inner == "})":
                depth -= 1
                if depth == 0:
                    break
            body.append(lines[i][1])
            i += 1
        if depth:
            raise ParseError(f"line {lineno}: a nested block is never closed with '}})'")
        head = line[:-len("{")] + "@body)"
        out.append((lineno, (head, "\n".join(body))))
        i += 1
    return out


__all__ = ["parse", "parse_type", "parse_attr", "ParseError"]
