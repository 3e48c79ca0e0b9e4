"""Convolutions: a 3x3 conv2d with bias and ReLU (32x64x32x32 -> 64 channels, float32;
8x16x16x16 -> 32 with --quick), a strided 7x7 stem conv, and a 2x2 max pool. kiln
computes a convolution as one im2col (the windows as columns, eager/kernels/windows.py)
and one batched GEMM (eager/nn/_convolution.py); numpy's contender is the same im2col with
sliding_window_view and one einsum-free matmul. Throughput is GFLOP/s of the
convolution's multiply-adds (2 per weight per output element); the pool's is GB/s.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from benchmarks.harness import Case
from benchmarks.impls import NUMPY, TORCH, every_contender, float64, nbytes

FULL = (32, 64, 32, 64)   # batch, in channels, height = width, out channels
QUICK = (8, 16, 16, 32)


def conv_relu(lib, x, w, b):
    return lib.nn.functional.relu(lib.nn.functional.conv2d(x, w, b, padding=1))


def stem(lib, x, w):
    return lib.nn.functional.conv2d(x, w, None, stride=2, padding=3)


def pool(lib, x):
    return lib.nn.functional.max_pool2d(x, 2)


def _conv_numpy(x, w, b=None, stride=1, padding=0):
    x = np.pad(x, [(0, 0), (0, 0), (padding,) * 2, (padding,) * 2])
    o, c, kh, kw = w.shape
    windows = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    n, _, oh, ow = windows.shape[:4]
    cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
    out = (cols @ w.reshape(o, -1).T).reshape(n, oh, ow, o).transpose(0, 3, 1, 2)
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def conv_relu_numpy(x, w, b):
    return np.maximum(_conv_numpy(x, w, b, padding=1), 0)


def stem_numpy(x, w):
    return _conv_numpy(x, w, stride=2, padding=3)


def pool_numpy(x):
    n, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max((3, 5))


def cases(quick: bool) -> list[Case]:
    n, c, size, o = QUICK if quick else FULL
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, size, size), dtype=np.float32)
    w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    image = rng.standard_normal((n, 3, 2 * size, 2 * size), dtype=np.float32)
    w7 = (rng.standard_normal((o, 3, 7, 7)) / np.sqrt(147)).astype(np.float32)
    stem_out = size  # (2 size + 6 - 7) // 2 + 1
    reference = (TORCH, NUMPY)
    return [
        Case(f"conv2d 3x3 + bias + relu, {n}x{c}x{size}x{size} -> {o}",
             every_contender(conv_relu, conv_relu_numpy, [x, w, b]),
             expected=float64(conv_relu_numpy, [x, w, b]), unit="GFLOP/s",
             work=2 * n * o * size * size * c * 9, reference=reference),
        Case(f"conv2d 7x7 stride 2 (a stem), {n}x3x{2 * size}x{2 * size} -> {o}",
             every_contender(stem, stem_numpy, [image, w7]),
             expected=float64(stem_numpy, [image, w7]), unit="GFLOP/s",
             work=2 * n * o * stem_out * stem_out * 3 * 49, reference=reference),
        Case(f"max_pool2d 2x2, {n}x{c}x{size}x{size}",
             every_contender(pool, pool_numpy, [x]), expected=float64(pool_numpy, [x]),
             unit="GB/s", work=nbytes(x) + x.nbytes // 4, reference=reference),
    ]
