"""Elementwise work on 4M float32 elements (256K with --quick): a bias-GELU chain of six
ops (x is 4096x1024, w and b are rows of 1024), and add, mul, exp alone; and rows of an
8192x256 table picked by 4096 indices (1024 with --quick) then scaled and shifted (an
embedding lookup: a gather at the head of an elementwise kernel when compiled).

Each op reads its inputs and writes its output once at best, so memory bandwidth is the
limit: throughput is GB/s of inputs plus output, and the fraction is of this machine's
copy bandwidth. The eager contenders write every intermediate of the chain to memory;
a fusing compiler need not. At --quick sizes the arrays fit in cache, so the fraction of
memory bandwidth can pass 100%.
"""
from __future__ import annotations

import math

import numpy as np

from benchmarks.harness import Case
from benchmarks.impls import NUMPY, TORCH, every_contender, float64, nbytes

ROWS, COLUMNS = 4096, 1024
QUICK_ROWS = 256
TABLE_ROWS, TABLE_COLUMNS = 8192, 256
# six float32 ops, two of them transcendental: PyTorch's vectorised GELU on 2 threads
# came out 5.2e-05 off (near zero, where the relative part of the tolerance is nothing)
# in about one run of five; the other cases keep the harness's 1e-05
CHAIN_ATOL = 1e-4


def gelu_chain(lib, x, w, b):
    return lib.nn.functional.gelu(x * w + b) * 0.5 + lib.tanh(x)


def add(lib, x, y):
    return x + y


def mul(lib, x, y):
    return x * y


def exp(lib, x):
    return lib.exp(x)


def embedding_rows(lib, table, index, b):
    return lib.nn.functional.embedding(index, table) * 2.0 + b


def embedding_rows_numpy(table, index, b):
    return table[index] * 2.0 + b


def gelu_chain_numpy(x, w, b):
    from scipy.special import erf  # numpy has none
    z = x * w + b
    return 0.5 * z * (1.0 + erf(z * (1.0 / math.sqrt(2.0)))) * 0.5 + np.tanh(x)


def gelu_chain_float64(x, w, b):
    """The reference: math.erf element by element, independent of scipy."""
    z = x * w + b
    erf = np.frompyfunc(math.erf, 1, 1)(z / math.sqrt(2.0)).astype(np.float64)
    return 0.5 * z * (1.0 + erf) * 0.5 + np.tanh(x)


def cases(quick: bool) -> list[Case]:
    rows = QUICK_ROWS if quick else ROWS
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((rows, COLUMNS), dtype=np.float32) for _ in range(2))
    w, b = (rng.standard_normal(COLUMNS, dtype=np.float32) for _ in range(2))
    size = f"{rows * COLUMNS // 1024}K"
    reference = (TORCH, NUMPY, "numpy + scipy")
    return [
        Case(f"gelu(x*w+b)*0.5 + tanh(x), {size}",
             every_contender(gelu_chain, gelu_chain_numpy, [x, w, b],
                             numpy_contender="numpy + scipy"),
             expected=float64(gelu_chain_float64, [x, w, b]),
             unit="GB/s", work=nbytes(x, w, b, x), reference=reference, atol=CHAIN_ATOL),
        Case(f"add {size} + {size}", every_contender(add, np.add, [x, y]),
             expected=float64(np.add, [x, y]), unit="GB/s", work=nbytes(x, y, x),
             reference=reference),
        Case(f"mul {size} * {size}", every_contender(mul, np.multiply, [x, y]),
             expected=float64(np.multiply, [x, y]), unit="GB/s", work=nbytes(x, y, x),
             reference=reference),
        Case(f"exp {size}", every_contender(exp, np.exp, [x]),
             expected=float64(np.exp, [x]), unit="GB/s", work=nbytes(x, x),
             reference=reference),
        _embedding_case(rng, 1024 if quick else 4096, reference),
    ]


def _embedding_case(rng, lookups: int, reference) -> Case:
    table = rng.standard_normal((TABLE_ROWS, TABLE_COLUMNS), dtype=np.float32)
    index = rng.integers(0, TABLE_ROWS, lookups)
    b = rng.standard_normal(TABLE_COLUMNS, dtype=np.float32)
    out = np.empty((lookups, TABLE_COLUMNS), np.float32)
    return Case(f"embedding rows * 2 + b, {lookups} of {TABLE_ROWS}x{TABLE_COLUMNS}",
                every_contender(embedding_rows, embedding_rows_numpy, [table, index, b]),
                expected=lambda: embedding_rows_numpy(table.astype(np.float64), index, b),
                unit="GB/s", work=nbytes(out, index, b, out), reference=reference)
