"""Reductions on a (4096, 1024) float32 matrix ((512, 256) with --quick): sum, mean and
amax over the last dim and over dim 0, softmax and log_softmax of rows, layer_norm of
rows with weight and bias.

Reducing over the last dim walks contiguous rows; over dim 0 it walks columns, one
strided element per row, which is where a naive loop order falls over. Throughput is
GB/s of input plus output, against this machine's memory copy bandwidth (which cached
--quick sizes can pass). Inputs are uniform on [0, 1), so sums never cancel to near
zero and a relative tolerance holds.
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Case
from benchmarks.impls import NUMPY, TORCH, every_contender, float64, nbytes

SHAPE, QUICK_SHAPE = (4096, 1024), (512, 256)
EPS = 1e-5  # layer_norm's default


def _over(dim: int) -> list[tuple]:
    """(name, fn(lib, x), numpy spelling) of the plain reductions over `dim`."""
    return [("sum", lambda lib, x: x.sum(dim), lambda x: x.sum(dim)),
            ("mean", lambda lib, x: x.mean(dim), lambda x: x.mean(dim)),
            ("amax", lambda lib, x: x.amax(dim), lambda x: x.max(dim))]


def softmax(lib, x):
    return lib.nn.functional.softmax(x, -1)


def log_softmax(lib, x):
    return lib.nn.functional.log_softmax(x, -1)


def layer_norm(lib, x, w, b):
    return lib.nn.functional.layer_norm(x, (x.shape[-1],), w, b, EPS)


def softmax_numpy(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax_numpy(x):
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def layer_norm_numpy(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def cases(quick: bool) -> list[Case]:
    rows, columns = QUICK_SHAPE if quick else SHAPE
    rng = np.random.default_rng(0)
    x = rng.random((rows, columns), dtype=np.float32)
    w, b = (rng.standard_normal(columns, dtype=np.float32) for _ in range(2))
    reference = (TORCH, NUMPY)
    result = []
    for dim, label, out_bytes in ((-1, "last dim", rows * 4), (0, "dim 0", columns * 4)):
        for name, fn, numpy_fn in _over(dim):
            result.append(Case(f"{name} over {label}, {rows}x{columns}",
                               every_contender(fn, numpy_fn, [x]),
                               expected=float64(numpy_fn, [x]), unit="GB/s",
                               work=x.nbytes + out_bytes, reference=reference))
    for name, fn, numpy_fn, inputs in (
            ("softmax", softmax, softmax_numpy, [x]),
            ("log_softmax", log_softmax, log_softmax_numpy, [x]),
            ("layer_norm", layer_norm, layer_norm_numpy, [x, w, b])):
        result.append(Case(f"{name} of rows, {rows}x{columns}",
                           every_contender(fn, numpy_fn, inputs),
                           expected=float64(numpy_fn, inputs), unit="GB/s",
                           work=nbytes(*inputs, x), reference=reference))
    return result
