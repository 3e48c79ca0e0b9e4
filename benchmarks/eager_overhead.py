"""Eager overhead: what one tiny op costs when the arithmetic is nearly free.

On 2x3 @ 3x2 or an 8-element add, the time is the framework's own: argument parsing,
dispatch, autograd bookkeeping, allocation. numpy is the floor (no dispatcher, no
autograd), PyTorch the comparison. Also: import time in a fresh process, and what the
profiler hook costs when no profiler is active versus when one is.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from benchmarks.first_call import fresh_env
from benchmarks.harness import Case, Impl

KILN, NUMPY, TORCH = "kiln eager", "numpy", "torch eager"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cases(quick: bool) -> list[Case]:
    """The sizes are tiny by design, so `quick` changes nothing here."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((3, 2)).astype(np.float32)
    g = np.ones((2, 2), np.float32)
    x = rng.standard_normal(8).astype(np.float32)
    y = rng.standard_normal(8).astype(np.float32)
    a64, b64, g64 = a.astype(np.float64), b.astype(np.float64), g.astype(np.float64)
    return [
        Case("matmul 2x3 @ 3x2", [
            Impl(KILN, lambda: _binary(_kiln(a), _kiln(b), lambda p, q: p @ q)),
            Impl(NUMPY, lambda: _binary(a, b, lambda p, q: p @ q)),
            Impl(TORCH, lambda: _binary(_torch(a), _torch(b), lambda p, q: p @ q)),
        ], expected=lambda: a64 @ b64, reference=(TORCH, NUMPY)),
        Case("matmul 2x3 @ 3x2, requires_grad, forward", [
            Impl(KILN, lambda: _binary(_kiln(a, True), _kiln(b, True), lambda p, q: p @ q)),
            Impl(TORCH, lambda: _binary(_torch(a, True), _torch(b, True), lambda p, q: p @ q)),
        ], expected=lambda: a64 @ b64, reference=(TORCH,)),
        Case("matmul 2x3 @ 3x2, requires_grad, forward+backward", [
            Impl(KILN, lambda: _forward_backward(_kiln(a, True), _kiln(b, True), _kiln(g))),
            Impl(NUMPY, lambda: _numpy_forward_backward(a, b, g), label="numpy (by hand)"),
            Impl(TORCH, lambda: _forward_backward(_torch(a, True), _torch(b, True), _torch(g))),
        ], expected=lambda: (g64 @ b64.T, a64.T @ g64), reference=(TORCH, "numpy (by hand)")),
        Case("add 8 + 8", [
            Impl(KILN, lambda: _binary(_kiln(x), _kiln(y), lambda p, q: p + q)),
            Impl(NUMPY, lambda: _binary(x, y, lambda p, q: p + q)),
            Impl(TORCH, lambda: _binary(_torch(x), _torch(y), lambda p, q: p + q)),
        ], expected=lambda: x.astype(np.float64) + y, reference=(TORCH, NUMPY)),
        Case("mul 8 * 0.5 (a Python number)", [
            Impl(KILN, lambda: _binary(_kiln(x), 0.5, lambda p, q: p * q)),
            Impl(NUMPY, lambda: _binary(x, 0.5, lambda p, q: p * q)),
            Impl(TORCH, lambda: _binary(_torch(x), 0.5, lambda p, q: p * q)),
        ], expected=lambda: x.astype(np.float64) * 0.5, reference=(TORCH, NUMPY)),
        _profiler_case(a, b, a64 @ b64),
        Case("import time, fresh process", [
            Impl(KILN, lambda: _import_time("eager"), label="import eager"),
            Impl(NUMPY, lambda: _import_time("numpy"), label="import numpy"),
            Impl(TORCH, lambda: _import_time("torch"), label="import torch",
                 full_only="~2 s a fresh process"),
        ], unit="", self_timed=True, reference=("import numpy",)),
    ]


def _kiln(array: np.ndarray, requires_grad: bool = False):
    import eager
    return eager.tensor(array, requires_grad=requires_grad)


def _torch(array: np.ndarray, requires_grad: bool = False):
    import torch
    return torch.tensor(array, requires_grad=requires_grad)


def _binary(p, q, op):
    return lambda: op(p, q)


def _forward_backward(a, b, g):
    """One training-shaped step of a kiln or torch matmul: forward, backward, grads."""
    def step():
        a.grad = b.grad = None
        (a @ b).backward(g)
        return a.grad, b.grad
    return step


def _numpy_forward_backward(a, b, g):
    """The same arithmetic written out: the floor with no autograd at all."""
    def step():
        a @ b
        return g @ b.T, a.T @ g
    return step


def _profiler_case(a: np.ndarray, b: np.ndarray, expected: np.ndarray) -> Case:
    """aten::mm called three ways: through a copy of the dispatcher's entry point that
    has no recorder check, as shipped (the check sees `_recorder is None`), and with a
    profiler recording. The first two should differ by noise only."""
    def unchecked():
        from eager import dispatcher
        mm = dispatcher.find("mm")
        fast, tls = mm._fast, dispatcher.tls

        def call(*args, **kwargs):  # OpHandle.entry without `if _recorder is not None`
            keys = args[0]._keys | args[1]._keys
            kernel = fast.get(((keys | tls.include) & ~tls.exclude) << 8 | keys)
            return (kernel or mm)(*args, **kwargs)
        return _binary(_kiln(a), _kiln(b), call)

    def shipped():
        from eager import dispatcher
        return _binary(_kiln(a), _kiln(b), dispatcher.find("mm"))

    def profiling():
        from eager import profiler
        return profiler.profile()

    return Case("aten::mm 2x3 @ 3x2, profiler hook", [
        Impl(KILN, unchecked, label="no recorder check"),
        Impl(KILN, shipped, label="recorder None (as shipped)"),
        Impl(KILN, shipped, label="profiler active", context=profiling),
    ], expected=lambda: expected, reference=("recorder None (as shipped)",))


def _import_time(module: str):
    """A function that imports `module` in a new interpreter and returns the seconds the
    import statement took there (interpreter start-up excluded)."""
    code = (f"import time; t = time.perf_counter(); import {module}; "
            f"print(time.perf_counter() - t)")
    env = fresh_env()  # bytecode cached, as for an installed package (and numpy's)

    def run() -> float:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=REPO, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"import {module} failed: {done.stderr.strip()[-300:]}")
        return float(done.stdout.split()[-1])
    return run
