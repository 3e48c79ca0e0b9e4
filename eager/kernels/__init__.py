"""Kernels for the CPU (numpy) and Meta (shape and dtype only) dispatch keys, and the op
records (ir/records.py) they sit beside.

Each family file holds, per op, one block: its record (names, derivative, and for a
pointwise op its numpy function, dtype rule and code emitter), its shape/dtype rule
(shared by the CPU and Meta kernels, so both raise the same errors) and its kernel.
Pointwise ops get their kernels made from their records here. Importing this package
registers them all.
"""
from eager.kernels import (binary, copies, elementwise, gated, group_norm,  # noqa: F401
                           indexing, linalg, membership, moments, normalization, norms,
                           products, reduction, rounding, shape, ternary, trig, unary,
                           windows)
from ir.records import RECORDS

for _record in RECORDS.values():
    if _record.pointwise is not None:
        elementwise.register_pointwise(_record)
for _record in RECORDS.values():  # after their twins
    if _record.inplace_of is not None and RECORDS[_record.inplace_of].pointwise is not None:
        elementwise.register_inplace(_record)
