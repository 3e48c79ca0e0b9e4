"""What the optimisation passes buy, on the suite's graphs: an MLP forward, the GELU chain,
softmax, an attention block and layer norm.

The table times each graph eagerly and compiled (the native backend runs the passes,
then fused kernels as generated code). The notes under it count, from the schedule
before and after the passes: kernels launched, bytes they move (each kernel reads its
inputs and writes its outputs once), and memory for intermediates (one buffer each,
against the pool the memory planner reuses).
"""
from __future__ import annotations

import numpy as np

from benchmarks.harness import Case
from benchmarks.impls import NUMPY, TORCH, every_contender, nbytes


def mlp_forward(lib, x, w1, b1, w2, b2):
    return lib.nn.functional.linear(lib.relu(lib.nn.functional.linear(x, w1, b1)), w2, b2)


def gelu_chain(lib, x, w, b):
    return lib.nn.functional.gelu(x * w + b) * 0.5 + lib.tanh(x)


def softmax(lib, x):
    return lib.softmax(x, -1)


def attention(lib, q, k, v):
    scores = lib.matmul(q, k.transpose(-2, -1)) * (1.0 / q.shape[-1] ** 0.5)
    return lib.matmul(lib.softmax(scores, -1), v)


def layer_norm(lib, x, w, b):
    return lib.nn.functional.layer_norm(x, x.shape[-1:], w, b)


def _graphs(quick: bool):
    rng = np.random.default_rng(0)
    n = 64 if quick else 512

    def r(*shape):
        return rng.standard_normal(shape, dtype=np.float32)
    return [
        ("MLP forward 784-256-10", mlp_forward, [r(n, 784), r(256, 784) * 0.05, r(256),
                                                 r(10, 256) * 0.05, r(10)]),
        ("GELU chain", gelu_chain, [r(n * 4, 1024), r(1024), r(1024)]),
        ("softmax rows", softmax, [r(n * 4, 1024)]),
        ("attention block", attention, [r(4, n, 64), r(4, n, 64), r(4, n, 64)]),
        ("layer norm rows", layer_norm, [r(n * 4, 1024), r(1024), r(1024)]),
    ]


def _float64(fn):
    def run(*arrays):
        import eager
        with eager.no_grad():
            out = fn(eager, *(eager.tensor(a.astype(np.float64)) for a in arrays))
        return out.numpy()
    return run


def cases(quick: bool) -> list[Case]:
    out = []
    for name, fn, arrays in _graphs(quick):
        expected = (lambda f=fn, a=arrays: _float64(f)(*a))
        out.append(Case(name, every_contender(fn, None, arrays), expected=expected,
                        unit="GB/s", work=nbytes(*arrays), reference=(TORCH, NUMPY)))
    return out


def _captured(fn, arrays):
    import compiler
    import eager
    tensors = [eager.tensor(a) for a in arrays]
    compiled = compiler.compile(lambda *xs: fn(eager, *xs), backend="eager")
    with eager.no_grad():
        compiled(*tensors)
    return next(iter(compiled.entries.values())).regions[0]


def notes(quick: bool) -> str:
    from compiler.passes import optimize, plan_memory, traffic
    head = ("graph", "kernels", "bytes moved", "intermediates: own buffers -> pooled")
    rows = [head]
    for name, fn, arrays in _graphs(quick):
        before = _captured(fn, arrays)
        after = optimize(before)
        t0, t1 = traffic(before), traffic(after)
        m0, m1 = plan_memory(before), plan_memory(after)
        rows.append((name, f"{t0.kernels} -> {t1.kernels}",
                     f"{_mb(t0.bytes_moved)} -> {_mb(t1.bytes_moved)}",
                     f"{_mb(m0.bytes_without_reuse)} -> {_mb(m0.pooled_bytes)} unfused, "
                     f"{_mb(m1.bytes_without_reuse)} -> {_mb(m1.pooled_bytes)} fused"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["   the passes, counted from the schedule (before -> after):"]
    lines += ["   " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 2**20:.2f} MB"
