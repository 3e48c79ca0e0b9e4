"""Prepared gemm()/bmm() calls, so that a repeated product costs a few microseconds of
Python instead of tens.

A request (api.GemmRequest: one gemm() or bmm() call) has a plan key: what its work
depends on besides the operands' addresses and the scalars: shapes, strides and dtypes
of the numpy operands, transposes, which epilogue parts are present, the thread count,
whether kernels may be specialised. The first time a key is seen its request runs the
general way; the second time it gets a plan, kept here: its native jobs (records of
every product piece, packing buffers of its own) with the operands' addresses taken
out, or, for one small product, its shape-specialised kernel. A call then allocates
the output, puts the addresses (and alpha and scale) in, and runs. Plans are made only
for calls with a new output and no C (beta == 0), and for products up to
config.PLAN_MAX_MACS (above that the Python is a small part of the time); at most
config.PLAN_LIMIT are kept (then they start over).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from runtime.cpu.gemm import config
from runtime.cpu.gemm import jobs as gemm_jobs
from runtime.cpu.gemm import kernels
from runtime.addresses import address

if TYPE_CHECKING:
    from runtime.cpu.gemm.api import GemmRequest

PLANS: dict[tuple, "Plan | SmallPlan"] = {}  # by plan key
_sightings = kernels.SecondSight()


def serve(request: GemmRequest, out_dtype=None) -> tuple:
    """(the plan key of `request` with gemm's `out_dtype`, its result if a plan computed
    it, else None). The key
    is what the request's work depends on (see above); None for a request no plan
    serves (an operand not a numpy array, a C, a given output) and for one whose plan
    is busy (that call goes the general way, unplanned). (An operand's address need not
    be aligned: the kernels assume whole-element strides, which the key holds, and x86
    loads need no alignment.)"""
    api, a, b, out, alpha, beta, _, trans_a, trans_b, epilogue, threads, specialise = request
    if out is not None or beta != 0 or type(a) is not np.ndarray or type(b) is not np.ndarray:
        return None, None
    key = (api, a.shape, a.strides, a.dtype, b.shape, b.strides, b.dtype, trans_a, trans_b,
           alpha == 1, threads, specialise)
    if out_dtype is not None:
        key = (*key, "out_dtype", np.dtype(out_dtype))
    if epilogue is not None:
        bias, residual = epilogue.bias, epilogue.residual
        if (bias is not None and type(bias) is not np.ndarray) or (
                residual is not None and type(residual) is not np.ndarray):
            return None, None
        key = (*key, epilogue.bias_axis, epilogue.activation, epilogue.scale == 1,
               None if bias is None else (bias.shape, bias.strides, bias.dtype),
               None if residual is None else (residual.shape, residual.strides,
                                              residual.dtype))
    plan = PLANS.get(key)
    if plan is None:
        return key, None
    result = plan(a, b, alpha, epilogue)
    return (key if result is not None else None), result


def make(key: tuple, kernel, batch: kernels.Batch, blocking, specialised, threads,
         out: np.ndarray, whole: bool = False,
         rounded: np.ndarray | None = None) -> "Plan | SmallPlan | None":
    """The plan for a request seen before, else None (and it is remembered as seen):
    the small.py kernel `specialised` if one call of it computes the whole batch
    (`whole`), else the batch's jobs (on `specialised`'s item where there is one)."""
    if not _sightings.again(key):
        return None
    call = batch.call
    if specialised is not None and whole:
        plan = SmallPlan(specialised, out.shape, out.dtype)
    elif batch.count * call.m * call.n * call.k <= config.PLAN_MAX_MACS:
        threads = gemm_jobs.threads_for(batch, specialised is not None, threads)
        scratch = gemm_jobs.Scratch()
        jobs = gemm_jobs.prepare(kernel, batch, blocking, threads,
                              specialised and specialised.item, scratch)
        plan = Plan(jobs, scratch, call, out.shape, out.dtype,
                    None if rounded is None else rounded.dtype)
    else:
        return None
    if len(PLANS) >= config.PLAN_LIMIT:
        PLANS.clear()
    PLANS[key] = plan
    return plan


def _operands(a, b, out, epilogue) -> dict:
    operands = {"a": a, "b": b, "out": out}
    if epilogue is not None:
        operands.update(bias=epilogue.bias, res=epilogue.residual)
    return operands


class SmallPlan:
    """Small products on one call of a shape-specialised kernel (small.py): through its
    runtime.fastcall entry on the arrays as given where it has one, else through ctypes
    on their addresses."""

    def __init__(self, kernel, shape: tuple, dtype: np.dtype):
        self.kernel, self.shape, self.dtype = kernel, shape, dtype
        self.names = [name for name, _ in kernel.key.args]
        self.fast = kernel.fast
        self.plain = self.names == ["a", "b", "out"]

    def __call__(self, a, b, alpha, epilogue) -> np.ndarray:
        if self.plain and self.fast is not None:
            return self.fast(a, b, np.empty(self.shape, self.dtype))
        out = np.empty(self.shape, self.dtype)
        operands = _operands(a, b, out, epilogue)
        if self.fast is not None:
            return self.fast(*[operands[name] for name in self.names])
        scalars = {"alpha": alpha, "scale": 1.0 if epilogue is None else epilogue.scale}
        self.kernel.fn(*[address(operands[name]) if name in operands else
                         scalars[name] for name in self.names], *self.kernel.pool_args)
        return out

    def run_call(self, call: kernels.Call) -> bool:
        """Run on the addresses and scalars of a kernels.Call."""
        self.kernel.run_call(call)
        return True


class Plan:
    """The native jobs of a request with the operands' addresses taken out of their
    records: each call adds them (and sets alpha and scale) into records of the plan's
    own and runs the jobs as prepared runtime.pool Items. The records and the packing
    buffers they point to serve one call at a time: a call that finds the plan busy
    returns None. `rounded_dtype`: each call also allocates the result rounded to it
    (kernels.Call.rounded), which it returns."""

    def __init__(self, jobs: list[gemm_jobs.Job], scratch: gemm_jobs.Scratch, call: kernels.Call,
                 shape: tuple, dtype: np.dtype, rounded_dtype: np.dtype | None = None):
        from runtime.pool import Items
        self.shape, self.dtype, self.scratch = shape, dtype, scratch  # the jobs' buffers
        self.rounded_dtype = rounded_dtype
        self.lock = threading.Lock()
        self.pointers = [(gemm_jobs.FIELDS.index(name), name)
                         for name in (*gemm_jobs.POINTERS, "rounded") if getattr(call, name)]
        self.alpha, self.scale = gemm_jobs.FIELDS.index("alpha"), gemm_jobs.FIELDS.index("scale")
        self.scalars = (call.alpha, call.scale)  # what the records hold until a call differs
        self.jobs = []
        for job in jobs:
            then = job.then.copy()
            for column, name in self.pointers:
                then[:, column] -= getattr(call, name)
            first = None if job.first is None else job.first.copy()
            if first is not None:
                first[:, 0] -= call.b  # the source of each packing of B
            records = (then, np.empty_like(then), first,
                       None if first is None else np.empty_like(first))
            items = Items(None if first is None else (
                job.pack_b, records[3].ctypes.data, len(first), first.strides[0]),
                (job.function, records[1].ctypes.data, len(then), then.strides[0]))
            self.jobs.append((records, items, job.threads, job.tables))

    def __call__(self, a, b, alpha, epilogue) -> np.ndarray | None:
        out = np.empty(self.shape, self.dtype)
        operands = _operands(a, b, out, epilogue)
        if self.rounded_dtype is not None:
            out = operands["rounded"] = np.empty(self.shape, self.rounded_dtype)
        addresses = {name: address(operands[name]) for _, name in self.pointers}
        done = self._run(addresses, alpha, 1.0 if epilogue is None else epilogue.scale)
        return out if done else None

    def run_call(self, call: kernels.Call) -> bool:
        """Run on the addresses and scalars of a kernels.Call; False if busy."""
        addresses = {name: getattr(call, name) for _, name in self.pointers}
        return self._run(addresses, call.alpha, call.scale)

    def _run(self, addresses: dict, alpha: float, scale: float) -> bool:
        if not self.lock.acquire(blocking=False):
            return False
        try:
            added = np.zeros(len(gemm_jobs.FIELDS), np.int64)
            for column, name in self.pointers:
                added[column] = addresses[name]
            same_scalars = (alpha, scale) == self.scalars
            for (then, records, first, packings), items, threads, _ in self.jobs:
                np.add(then, added, out=records)  # (the scalars' columns get 0 added)
                if not same_scalars:
                    scalars = records.view(np.float64)
                    scalars[:, self.alpha], scalars[:, self.scale] = alpha, scale
                if first is not None:
                    np.copyto(packings, first)
                    packings[:, 0] += addresses["b"]
                items.run(threads)
        finally:
            self.lock.release()
        return True
