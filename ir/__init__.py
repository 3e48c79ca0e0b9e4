"""kiln's IR: the op vocabulary (schemas, groups), element types, and the graph IR
(Graph/Node/Value, printer, parser, verifier). Imports nothing else of the project."""
from ir import dtypes
from ir.graph import Graph, GraphBuilder, Node, TensorType, Value
from ir.ops import Op, lookup
from ir.parser import ParseError, parse
from ir.schema import Argument, FunctionSchema, Type, parse_schema
from ir.verify import VerificationError, verify

__all__ = ["Op", "lookup", "dtypes", "parse_schema", "FunctionSchema", "Argument", "Type",
           "Graph", "GraphBuilder", "Node", "TensorType", "Value", "parse", "ParseError",
           "verify", "VerificationError"]
