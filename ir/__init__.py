"""kiln's IR: the op vocabulary (schemas, groups), element types, and the graph IR
(Graph/Node/Value, printer, parser, verifier). Imports nothing else of the project.

The graph IR's names load on first use (eager needs only the vocabulary: `import eager`
need not load ir.graph, ir.parser and ir.verifier, ~2 ms)."""
import importlib

from ir import dtypes
from ir.ops import Op, lookup
from ir.schema import Argument, FunctionSchema, Type, parse_schema

_LAZY = {"Graph": "ir.graph", "GraphBuilder": "ir.graph", "Node": "ir.graph",
         "TensorType": "ir.graph", "Value": "ir.graph", "parse": "ir.parser",
         "ParseError": "ir.parser", "verify": "ir.verifier", "VerificationError": "ir.verifier"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'ir' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(_LAZY[name]), name)
    return value

__all__ = ["Op", "lookup", "dtypes", "parse_schema", "FunctionSchema", "Argument", "Type",
           "Graph", "GraphBuilder", "Node", "TensorType", "Value", "parse", "ParseError",
           "verify", "VerificationError"]
