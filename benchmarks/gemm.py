"""Matrix multiply: kiln's own GEMM against numpy's BLAS (OpenBLAS) and PyTorch's, same
thread count, same run, as GFLOP/s (2*M*N*K per product) and the ratio to numpy.

Cases: float32 squares N = 64 ... 2048 (64, 128 and 256 with --quick), float64 squares,
the awkward shapes (primes, tall-skinny), a batched product shaped like attention
scores, and a linear layer with bias and relu at MLP shapes (128x784 @ 784x256), which
kiln fuses into the GEMM's store and numpy does in three steps.

Contenders:
- "kiln GEMM": runtime.cpu.gemm.api on numpy arrays, the library call (as np.matmul
  is numpy's); it allocates its output, as np.matmul does.
- "kiln compiled": `eager.compile` of the same PyTorch-shaped function over kiln tensors:
  shapes are known when it compiles, and the graph's epilogue is fused into the GEMM.
- "kiln eager": kiln's eager `@`, whose CPU kernel is numpy's BLAS (kiln's GEMM goes
  under it only with eager.backends.native.gemm.use_kiln_gemm()): the difference to numpy is
  kiln's dispatch and allocation.
Every contender uses the same thread count: `--threads N` sets OpenBLAS's (before numpy
loads), torch's and kiln's; without it, all use every core this process may use.
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Case, Impl
from benchmarks.impls import NUMPY, every_contender, float64

KILN_GEMM = "kiln GEMM"

SQUARES, QUICK_SQUARES = (64, 128, 256, 512, 1024, 2048), (64, 128, 256)
SQUARES_F64, QUICK_SQUARES_F64 = (256, 1024), (256,)
# (M, K, N): primes, and the tall-skinny products of the issue (K, then N, small)
AWKWARD, QUICK_AWKWARD = ((127, 513, 255), (4096, 64, 4096), (8192, 512, 64)), (
    (127, 513, 255), (1024, 64, 1024))
BATCHED, QUICK_BATCHED = (32, 256, 64, 256), (8, 64, 32, 64)  # batch, M, K, N
LINEAR = (128, 784, 256)  # batch, in features, out features


def matmul(lib, a, b):
    return a @ b


def linear_relu(lib, x, w, bias):
    return lib.nn.functional.relu(lib.nn.functional.linear(x, w, bias))


def linear_relu_numpy(x, w, bias):
    return np.maximum(x @ w.T + bias, 0)


def kiln_gemm(arrays: list[np.ndarray], **options):
    from runtime.cpu.gemm.api import Epilogue, bmm, gemm
    a, b, *rest = arrays
    product = gemm if a.ndim == 2 and b.ndim == 2 else bmm
    if rest:
        options["epilogue"] = Epilogue(bias=rest[0], activation="relu")
    return lambda: product(a, b, **options)


def product(rng, batch: tuple, m: int, k: int, n: int, name: str,
            dtype=np.float32) -> Case:
    """A Case for (batch..., m, k) @ (batch..., k, n), entries scaled so that every
    output is about unit size whatever k is (one absolute tolerance fits all)."""
    a = (rng.standard_normal((*batch, m, k)) / np.sqrt(k)).astype(dtype)
    b = rng.standard_normal((*batch, k, n)).astype(dtype)
    flops = 2.0 * m * n * k * int(np.prod(batch))
    impls = [Impl(KILN_GEMM, lambda: kiln_gemm([a, b]))] + every_contender(
        matmul, np.matmul, [a, b])
    return Case(name, impls, expected=float64(np.matmul, [a, b]), unit="GFLOP/s",
                work=flops, reference=(NUMPY,), atol=1e-4)


def linear(rng) -> Case:
    batch, fan_in, fan_out = LINEAR
    x = rng.standard_normal((batch, fan_in)).astype(np.float32)
    w = (rng.standard_normal((fan_out, fan_in)) / np.sqrt(fan_in)).astype(np.float32)
    bias = rng.standard_normal(fan_out).astype(np.float32)
    arrays = [x, w, bias]
    impls = [Impl(KILN_GEMM, lambda: kiln_gemm(arrays, trans_b=True))] + every_contender(
        linear_relu, linear_relu_numpy, arrays)
    return Case(f"linear+bias+relu {batch}x{fan_in} @ {fan_in}x{fan_out}", impls,
                expected=float64(linear_relu_numpy, arrays), unit="GFLOP/s",
                work=2.0 * batch * fan_in * fan_out, reference=(NUMPY,), atol=1e-4)


def cases(quick: bool) -> list[Case]:
    rng = np.random.default_rng(0)
    squares = QUICK_SQUARES if quick else SQUARES
    squares_f64 = QUICK_SQUARES_F64 if quick else SQUARES_F64
    awkward = QUICK_AWKWARD if quick else AWKWARD
    batch, bm, bk, bn = QUICK_BATCHED if quick else BATCHED
    return (
        [product(rng, (), n, n, n, f"square {n}") for n in squares]
        + [product(rng, (), n, n, n, f"square {n} float64", np.float64) for n in squares_f64]
        + [product(rng, (), m, k, n, f"{m}x{k} @ {k}x{n}") for m, k, n in awkward]
        + [product(rng, (batch,), bm, bk, bn, f"batched {batch} x ({bm}x{bk} @ {bk}x{bn})"),
           linear(rng)])
