"""One function, every contender: Impls that compute `fn(lib, *inputs)` with lib = kiln
(`eager`) or PyTorch, eagerly or compiled, beside a numpy spelling of the same thing.

Suites write their work once against the PyTorch-shaped API, e.g.

    def gelu_chain(lib, x, w, b):
        return lib.nn.functional.gelu(x * w + b) * 0.5 + lib.tanh(x)

and `every_contender(gelu_chain, numpy_fn, arrays)` gives the Impls. Inputs become
tensors in `build`, outside any timing; the compiled contenders compile `fn` itself (a
code object of its own per case, so no cache is shared between cases) and their first
call, which traces and compiles, is the correctness check, before any timing.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from benchmarks.harness import Impl

KILN, KILN_COMPILED, NUMPY, TORCH, TORCH_COMPILED = (
    "kiln eager", "kiln compiled", "numpy", "torch eager", "torch.compile")


def every_contender(fn: Callable, numpy_fn: Callable | None, arrays: list[np.ndarray],
                    compiled: bool = True, numpy_contender: str = NUMPY) -> list[Impl]:
    """kiln eager, kiln compiled, numpy, torch eager, torch.compile, in that order
    (without the compiled ones when `compiled` is False, without numpy when `numpy_fn`
    is None)."""
    impls = [Impl(KILN, lambda: kiln_eager(fn, arrays))]
    if compiled:
        impls.append(Impl(KILN_COMPILED, lambda: kiln_compiled(fn, arrays)))
    if numpy_fn is not None:
        impls.append(Impl(numpy_contender, lambda: bound(numpy_fn, arrays)))
    impls.append(Impl(TORCH, lambda: torch_eager(fn, arrays)))
    if compiled:
        impls.append(Impl(TORCH_COMPILED, lambda: torch_compiled(fn, arrays)))
    return impls


def float64(numpy_fn: Callable, arrays: list[np.ndarray]) -> Callable[[], object]:
    """The expected answer: the numpy spelling applied to float64 copies of the inputs."""
    return lambda: numpy_fn(*(a.astype(np.float64) for a in arrays))


def nbytes(*arrays: np.ndarray) -> int:
    return sum(a.nbytes for a in arrays)


def bound(f: Callable, args: list) -> Callable[[], object]:
    return lambda: f(*args)


def kiln_eager(fn: Callable, arrays: list[np.ndarray]):
    import eager
    return bound(fn, [eager, *kiln_tensors(arrays)])


def kiln_compiled(fn: Callable, arrays: list[np.ndarray]):
    """The compiled function takes the tensors alone (the library is bound in a closure),
    as a user's compiled function does."""
    import eager
    return bound(eager.compile(lambda *tensors: fn(eager, *tensors)), kiln_tensors(arrays))


def torch_eager(fn: Callable, arrays: list[np.ndarray]):
    import torch
    return bound(fn, [torch, *torch_tensors(arrays)])


def torch_compiled(fn: Callable, arrays: list[np.ndarray]):
    import torch
    torch._dynamo.reset()  # earlier cases' code stays out of this one's caches and limits
    return bound(torch.compile(lambda *tensors: fn(torch, *tensors)), torch_tensors(arrays))


def kiln_tensors(arrays: list[np.ndarray]) -> list:
    import eager
    return [eager.tensor(a) for a in arrays]


def torch_tensors(arrays: list[np.ndarray]) -> list:
    import torch

    def tensor(a):
        if a.dtype.name == "bfloat16":  # (ml_dtypes' array: torch takes its 16-bit words)
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
        return torch.from_numpy(a.copy())
    return [tensor(a) for a in arrays]
