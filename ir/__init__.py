"""kiln's IR: the op vocabulary (schemas, groups) and element types.

Imports nothing else of the project.
"""
from ir import dtypes
from ir.ops import Op, lookup
from ir.schema import Argument, FunctionSchema, Type, parse_schema

__all__ = ["Op", "lookup", "dtypes", "parse_schema", "FunctionSchema", "Argument", "Type"]
