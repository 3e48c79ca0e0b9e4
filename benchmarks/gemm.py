"""float32 matrix multiply: square N x N for N in 64 ... 2048 (64 and 256 with --quick),
one tall-skinny product and one batched product shaped like attention scores.

kiln eager multiplies through numpy, so today it runs on the same BLAS as numpy and the
difference between them is kiln's dispatch and allocation; PyTorch brings its own BLAS.
Every contender uses the same thread count: `--threads N` sets OpenBLAS's (before numpy
loads) and torch's, and without it both use every core this process may use.
Throughput is GFLOP/s (2*M*N*K per product) against the measured peak FLOP/s on those
threads.
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Case
from benchmarks.impls import NUMPY, TORCH, every_contender, float64

SQUARES, QUICK_SQUARES = (64, 256, 512, 1024, 2048), (64, 256)
TALL_SKINNY, QUICK_TALL_SKINNY = (8192, 512, 64), (1024, 256, 32)  # M, K, N
BATCHED, QUICK_BATCHED = (32, 256, 64, 256), (8, 64, 32, 64)  # batch, M, K, N


def matmul(lib, a, b):
    return a @ b


def product(rng, batch: tuple, m: int, k: int, n: int, name: str) -> Case:
    """A Case for (batch..., m, k) @ (batch..., k, n), entries scaled so that every
    output is about unit size whatever k is (one absolute tolerance fits all)."""
    a = (rng.standard_normal((*batch, m, k)) / np.sqrt(k)).astype(np.float32)
    b = rng.standard_normal((*batch, k, n)).astype(np.float32)
    flops = 2.0 * m * n * k * int(np.prod(batch))
    return Case(name, every_contender(matmul, np.matmul, [a, b], compiled=False),
                expected=float64(np.matmul, [a, b]), unit="GFLOP/s", work=flops,
                reference=(TORCH, NUMPY), atol=1e-4)


def cases(quick: bool) -> list[Case]:
    rng = np.random.default_rng(0)
    squares = QUICK_SQUARES if quick else SQUARES
    m, k, n = QUICK_TALL_SKINNY if quick else TALL_SKINNY
    batch, bm, bk, bn = QUICK_BATCHED if quick else BATCHED
    return [product(rng, (), size, size, size, f"square {size}") for size in squares] + [
        product(rng, (), m, k, n, f"tall-skinny {m}x{k} @ {k}x{n}"),
        product(rng, (batch,), bm, bk, bn, f"batched {batch} x ({bm}x{bk} @ {bk}x{bn})"),
    ]
