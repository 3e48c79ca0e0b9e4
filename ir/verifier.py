"""The verifier: def-before-use, single definition, arity and attribute types against the
op's schema, and (given a type rule) result types. Errors show the bad node in context."""
from __future__ import annotations

from ir.dtypes import DType
from ir.graph import Graph, Node, Value
from ir.ops import Op
from ir.schema import Argument


class VerificationError(ValueError):
    pass


_SCALAR_TYPES = {"int": (int,), "SymInt": (int, str), "float": (int, float),
                 "bool": (bool,), "str": (str,), "Scalar": (int, float, bool),
                 "ScalarType": (DType,), "Device": (str,), "Graph": (Graph,)}


def _context(graph: Graph, index: int, message: str) -> str:
    lines = str(graph).splitlines()
    row = index + 1  # the header line comes first
    shown = []
    for i in range(max(row - 2, 0), min(row + 3, len(lines))):
        shown.append(("-> " if i == row else "   ") + lines[i])
    return f"{message}\n" + "\n".join(shown)


def _attr_ok(value, arg: Argument) -> bool:
    if value is None:
        return arg.type.optional or arg.has_default and arg.default is None
    kinds = _SCALAR_TYPES.get(arg.type.base, (object,))
    if arg.type.is_list:
        if isinstance(value, int) and not isinstance(value, bool):
            return True  # int[1] accepts a single int
        return isinstance(value, tuple) and all(isinstance(v, kinds) for v in value)
    if arg.type.base in ("int", "SymInt") and isinstance(value, bool):
        return False
    return isinstance(value, kinds)


def _check_fused(node: Node) -> str | None:
    body = node.attr.get("body")
    if not isinstance(body, Graph):
        return "fused: the body attribute must be a graph"
    try:
        verify(body)
    except VerificationError as e:
        return f"fused: its body does not verify: {e}"
    inputs = node.inputs[0] if node.inputs else ()
    if [v.type for v in inputs] != [v.type for v in body.inputs]:
        return "fused: input types differ from the body's inputs"
    if [v.type for v in node.outputs] != [v.type for v in body.outputs]:
        return "fused: result types differ from the body's outputs"
    return None


def _check_node(node: Node) -> str | None:
    schema = node.op.schema
    tensor_args = [a for a in schema.arguments if a.type.base == "Tensor"]
    other_args = [a for a in schema.arguments if a.type.base != "Tensor"]
    if len(node.inputs) != len(tensor_args):
        return (f"{schema.qualified_name} takes {len(tensor_args)} tensor inputs, "
                f"got {len(node.inputs)}")
    for value, arg in zip(node.inputs, tensor_args):
        if value is None and not arg.type.optional:
            return f"{schema.qualified_name}: tensor argument '{arg.name}' is not optional"
        if isinstance(value, tuple) != arg.type.is_list and value is not None:
            return f"{schema.qualified_name}: argument '{arg.name}' expects {arg.type}"
    names = [k for k, _ in node.attrs]
    if names != [a.name for a in other_args]:
        return (f"{schema.qualified_name} expects attributes {[a.name for a in other_args]}, "
                f"got {names}")
    for (name, value), arg in zip(node.attrs, other_args):
        if not _attr_ok(value, arg):
            return f"{schema.qualified_name}: attribute {name}={value!r} is not a {arg.type}"
    returns = schema.returns
    if not (len(returns) == 1 and returns[0].type.is_list) and len(node.outputs) != len(returns):
        return (f"{schema.qualified_name} defines {len(returns)} results, "
                f"got {len(node.outputs)}")
    if node.op is Op.FUSED:
        return _check_fused(node)
    if node.op is Op.SCALAR and node.outputs[0].type.shape != ():
        return "scalar: a scalar constant has shape []"
    return None


def verify(graph: Graph, infer=None) -> Graph:
    """Check `graph`; return it unchanged or raise VerificationError.

    `infer(node) -> tuple[TensorType, ...]`, when given, computes result types (the
    compiler passes one built on the Meta kernels) to compare with the recorded ones.
    """
    defined: set[Value] = set()
    names: set[str] = set()
    for v in graph.inputs:
        if v.name in names:
            raise VerificationError(f"graph input %{v.name} is defined twice")
        names.add(v.name)
        defined.add(v)
    for i, node in enumerate(graph.nodes):
        for v in node.input_values():
            if v not in defined:
                raise VerificationError(_context(graph, i, f"%{v.name} is used before it is "
                                                 "defined (or with another type)"))
        problem = _check_node(node)
        if problem:
            raise VerificationError(_context(graph, i, problem))
        if infer is not None:
            expected = tuple(infer(node))
            actual = tuple(v.type for v in node.outputs)
            if expected != actual:
                raise VerificationError(_context(graph, i, "result types "
                                                 f"{[str(t) for t in actual]} differ from the "
                                                 f"op's rule {[str(t) for t in expected]}"))
        for v in node.outputs:
            if v.name in names:
                raise VerificationError(_context(graph, i, f"%{v.name} is defined twice"))
            names.add(v.name)
            defined.add(v)
    for v in graph.outputs:
        if v not in defined:
            raise VerificationError(f"graph output %{v.name} is never defined")
    return graph


__all__ = ["verify", "VerificationError"]
