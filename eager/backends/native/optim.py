"""Fused optimiser steps: a parameter group's update (SGD, Adam, AdamW) as one native
call over a table of records, one per chunk of each parameter (codegen/optim.py's
kernel and record layout), in the spirit of PyTorch's multi-tensor `foreach` kernels.

eager/optim loads this module on the first step with foreach on (and falls back to
its per-tensor update where it cannot: no llvmlite, other devices, float16,
non-contiguous tensors). A group layout (its parameters' sizes and the kernel) keeps
its table between steps; a step writes the tensors' addresses and the scalars into it
and runs it through runtime/pool.py's Items, on the pool's threads from PARALLEL_FROM
elements in all, each thread claiming chunks of CHUNK elements.
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from runtime.cpu.optim_ir import (GROUP, OWN, RECORD_WORDS, START, STOP, UpdateSpec,
                                  emit_update)
from eager.profiler import record_function
from runtime.addresses import address
from runtime.llvm.jit import host_jit, vector_width
from runtime.pool import Items
from runtime.threads import num_threads

CHUNK = 1 << 15          # elements per record
PARALLEL_FROM = 1 << 16  # elements in a group before its step spans threads
_MAX_PLANS = 64

__all__ = ["UpdateSpec", "kernel", "step", "runs"]

runs = {"steps": 0}  # fused steps taken in this process (tests read it)


@functools.cache
def kernel(spec: UpdateSpec) -> int:
    """The address of spec's kernel, compiled once (and cached on disk by the JIT)."""
    width = vector_width()
    return host_jit().load_spec(spec.name, repr((spec, width)),
                                lambda module: emit_update(module, spec, width),
                                [spec.name])[spec.name]


class _Plan:
    """The record table of one group layout: which parameter and elements each record
    covers stay; pointers and scalars are written at each step."""

    def __init__(self, spec: UpdateSpec, sizes: tuple[int, ...]):
        chunks = [(k, s, min(s + CHUNK, n)) for k, n in enumerate(sizes)
                  for s in range(0, n, CHUNK)]
        self.owner = np.array([k for k, _, _ in chunks], np.intp)
        self.records = np.zeros((len(chunks), RECORD_WORDS), np.int64)
        self.records[:, START] = [s for _, s, _ in chunks]
        self.records[:, STOP] = [e for _, _, e in chunks]
        self.doubles = self.records.view(np.float64)
        self.group = np.zeros(8, np.float64)
        self.records[:, GROUP] = address(self.group)
        self.items = Items(None, (kernel(spec), address(self.records), len(chunks),
                                  RECORD_WORDS * 8))
        self.threads = num_threads() if sum(sizes) >= PARALLEL_FROM else 1
        self.lock = threading.Lock()


_plans: dict = {}


def step(spec: UpdateSpec, group_scalars: tuple, tensors: list, own_scalars: list) -> None:
    """One fused step: tensors[k] is [param, grad, *state] of parameter k as contiguous
    numpy arrays of spec.dtype and one size, own_scalars[k] its TENSOR_SCALARS; the
    arrays are updated in place."""
    key = (spec, tuple(t[0].size for t in tensors))
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        plan = _plans[key] = _Plan(spec, key[1])
    if not len(plan.owner):
        return  # only empty parameters
    with plan.lock:
        addresses = np.array([[address(a) for a in arrays] for arrays in tensors], np.int64)
        plan.records[:, :addresses.shape[1]] = addresses[plan.owner]
        plan.doubles[:, OWN:OWN + len(own_scalars[0])] = np.array(own_scalars)[plan.owner]
        plan.group[:len(group_scalars)] = group_scalars
        with record_function(f"kiln::fused_{spec.algorithm}_step"):
            plan.items.run(plan.threads)
        runs["steps"] += 1
