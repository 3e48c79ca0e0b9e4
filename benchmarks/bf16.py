"""bfloat16 beside float32: the same products and the same training steps in each, kiln
against PyTorch on this machine, as GFLOP/s and steps/s.

- GEMM squares: `a @ b` of bfloat16 tensors and of float32 ones. On CPUs with
  AVX512-BF16 kiln's bfloat16 product keeps its operands in 16 bits and multiplies them
  with vdpbf16ps (as PyTorch's oneDNN does); elsewhere it widens them to float32 while it
  packs them and runs the float32 kernel (conversion + float32 FMA, both libraries), and
  rounds once in its store.
- The MLP training step of the mlp_train suite (784-256-256-10, batch 128, Adam) and the
  char transformer step of transformer_train, each under
  `autocast("cpu", dtype=bfloat16)` (the products in bfloat16, softmax, norms and the
  loss in float32, float32 weights and gradients) and in float32, for both libraries.

The gates: products within bfloat16's rounding of the float64 answer; the first step's
loss within 2e-2 of the float64 model's (bfloat16's products round at 2**-8).
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

from benchmarks import train
from benchmarks.gemm import matmul
from benchmarks.harness import Case, Impl
from benchmarks.impls import (KILN, KILN_COMPILED, TORCH, kiln_eager, kiln_tensors, torch_eager,
                              torch_tensors)

SQUARES, QUICK_SQUARES = (256, 512, 1024, 2048), (256,)


def _labelled(contender: str, dtype: str) -> str:
    return f"{contender}, {dtype}"


def _impl(contender: str, dtype: str, build) -> Impl:
    return Impl(contender, build, label=_labelled(contender, dtype))


def kiln_bfloat16_path() -> str:
    """How kiln's GEMM multiplies bfloat16 on this CPU, as the table names it."""
    from runtime.cpu.gemm.kernels import dot_products
    return "vdpbf16ps" if dot_products() else "widened, float32 FMA"


def square(rng, n: int) -> Case:
    a = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    halves = [a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)]
    impls = []
    for dtype, arrays in (("bfloat16", halves), ("float32", [a, b])):
        path = f" ({kiln_bfloat16_path()})" if dtype == "bfloat16" else ""
        impls += [_impl(KILN, dtype + path, functools.partial(kiln_eager, matmul, arrays)),
                  _impl(TORCH, dtype, functools.partial(torch_eager, matmul, arrays))]
    exact = [h.astype(np.float64) for h in halves]  # what both dtypes' products approach
    return Case(f"square {n}", impls, expected=lambda: exact[0] @ exact[1], unit="GFLOP/s",
                work=2.0 * n ** 3, reference=(_labelled(TORCH, "bfloat16"),),
                rtol=2 ** -7, atol=2e-2)


def autocast_step(t: train.Training) -> Case:
    """A training step under autocast bfloat16 beside the same step in float32."""
    def trainer(lib_name: str, autocast: str | None, compile_step: bool = False):
        def make():
            lib = __import__(lib_name)
            tensors = kiln_tensors if lib_name == "eager" else torch_tensors
            return train._trainer(lib, tensors, t.model, t.optimizer, t.loss, t.initial(),
                                  t.data, compile_step=lib.compile if compile_step else None,
                                  autocast=autocast)
        return make

    impls = [_impl(KILN, "autocast bfloat16", trainer("eager", "bfloat16")),
             Impl(KILN_COMPILED, trainer("eager", "bfloat16", compile_step=True),
                  label="kiln compiled (whole step), autocast bfloat16"),
             _impl(TORCH, "autocast bfloat16", trainer("torch", "bfloat16")),
             _impl(KILN, "float32", trainer("eager", None)),
             Impl(KILN_COMPILED, trainer("eager", None, compile_step=True),
                  label="kiln compiled (whole step), float32"),
             _impl(TORCH, "float32", trainer("torch", None))]
    return Case(t.name, impls, expected=t.expected, unit="steps/s",
                reference=(_labelled(TORCH, "autocast bfloat16"),), rtol=2e-2, atol=1e-3)


def cases(quick: bool) -> list[Case]:
    """--quick: one square and the MLP step; the char transformer's step (two of its six
    contenders compile it: ~15 s on two cores) is the full run's."""
    rng = np.random.default_rng(0)
    steps = [train.mlp_training()] + ([] if quick else [train.transformer_training()])
    return [square(rng, n) for n in (QUICK_SQUARES if quick else SQUARES)] + [
        autocast_step(t) for t in steps]
