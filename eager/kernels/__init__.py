"""Kernels for the CPU (numpy) and Meta (shape and dtype only) dispatch keys.

Each family file holds, per op: its shape/dtype rule (shared by the CPU and Meta
kernels, so both raise the same errors) and its numpy kernel. Importing this package
registers them all.
"""
from eager.kernels import elementwise, indexing, linalg, reduction, shape  # noqa: F401
