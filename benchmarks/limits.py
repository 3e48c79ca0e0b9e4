"""The physical limits results are measured against: peak float32 FLOP/s of the CPU
target (this CPU's, or KILN_CPU's) and copy bandwidth at each level of the memory
hierarchy.

Peak FLOP/s comes from a small kernel generated with llvmlite: a loop of independent
`llvm.fma` chains on explicit <W x float> vectors (W = 16 with AVX-512, 8 with AVX2), so
the FMA units never wait on a result. There are as many chains as fit the vector
registers with the two broadcast operands (`accumulators`): 16 accumulators on AVX2's 16 ymm
registers spilled to the stack and halved the peak. It runs on one thread and then on N
Python threads at once (ctypes releases the GIL during the call); the best of several
runs counts.

Bandwidth is numpy copies (which release the GIL) on working sets from cache-sized to
memory-sized (`COPY_FOOTPRINTS`), on one thread and on N, best of several runs, counting
bytes read plus bytes written as STREAM's copy does. A case moving W bytes per call is
held to the copy bandwidth of the largest working set not over W: a 1 MB add runs in
cache, and held to memory bandwidth it read 490% of the limit.
"""
from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import asdict, dataclass

import llvmlite.ir as ir
import numpy as np

from runtime.jit import host_jit, vector_width
from runtime.target import selected

COPY_FOOTPRINTS = (256 << 10, 2 << 20, 16 << 20, 128 << 20)
"""Bytes read plus written by one copy: in L2, in L3 (or L2 of two cores), about the
size of an L3, and well past any cache."""
COPY_BYTES_PER_TIMING = 64 << 20  # small working sets are copied again and again


@dataclass
class Limits:
    cpu: str
    vector_width: int
    threads: int
    peak_gflops_1t: float
    peak_gflops: float  # on `threads` threads
    copy_gbs: dict[int, float]  # working set (bytes read + written) -> best GB/s

    def for_work(self, unit: str, work: float) -> float | None:
        """The limit a throughput in `unit` of a case doing `work` per call is a fraction
        of: the peak on `threads` threads for GFLOP/s; for GB/s the copy bandwidth of the
        largest working set not over `work` bytes (the smallest if every one is); else
        None."""
        if unit == "GFLOP/s":
            return self.peak_gflops
        if unit != "GB/s" or not self.copy_gbs:
            return None
        fitting = [size for size in self.copy_gbs if size <= work]
        return self.copy_gbs[max(fitting) if fitting else min(self.copy_gbs)]

    def to_json(self) -> dict:
        return asdict(self)


def accumulators(width: int) -> int:
    """Independent accumulators of the peak kernel: enough to cover FMA latency x FMA
    ports (4 x 2 on Zen and Skylake), and with the two broadcast operands within the 32
    registers of AVX-512 (<16 x float>) or the 16 of AVX2 and SSE (narrower)."""
    return 16 if width >= 16 else 12


def build_fma_kernel(width: int, chains: int | None = None):
    """IR for `void fma_peak_wW_cC(float* out, i64 iterations, float x, float y)`: each
    iteration updates `chains` vectors as acc = fma(acc, x, y), then stores their sum to
    out[0:width]. With |x| < 1 the accumulators converge, so no overflow or subnormals.
    `chains` defaults to `accumulators(width)`."""
    chains = accumulators(width) if chains is None else chains
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vec = ir.VectorType(f32, width)
    name = kernel_name(width, chains)
    module = host_jit().new_module(name)
    fma = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{width}f32")
    kernel = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), i64, f32, f32]),
                         name)
    out, iterations, x, y = kernel.args
    for arg, arg_name in zip(kernel.args, ("out", "iterations", "x", "y")):
        arg.name = arg_name
    entry, loop, done = (kernel.append_basic_block(n) for n in ("entry", "loop", "done"))

    b = ir.IRBuilder(entry)
    xs, ys = _broadcast(b, x, vec), _broadcast(b, y, vec)
    start = [ir.Constant(vec, [float(k + 1)] * width) for k in range(chains)]
    b.branch(loop)

    b.position_at_end(loop)
    counter = b.phi(i64, "i")
    counter.add_incoming(ir.Constant(i64, 0), entry)
    accs = []
    for k in range(chains):
        acc = b.phi(vec, f"acc{k}")
        acc.add_incoming(start[k], entry)
        accs.append(acc)
    updated = [b.call(fma, [acc, xs, ys]) for acc in accs]
    following = b.add(counter, ir.Constant(i64, 1))
    for acc, new in zip(accs, updated):
        acc.add_incoming(new, loop)
    counter.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, iterations), loop, done)

    b.position_at_end(done)
    total = updated[0]
    for v in updated[1:]:
        total = b.fadd(total, v)
    b.store(total, out, align=4)
    b.ret_void()
    return module


def _broadcast(b, scalar, vec):
    """insertelement + zero-mask shufflevector: becomes one vbroadcastss."""
    lane0 = b.insert_element(ir.Constant(vec, None), scalar, ir.Constant(ir.IntType(32), 0))
    return b.shuffle_vector(lane0, ir.Constant(vec, None),
                            ir.Constant(ir.VectorType(ir.IntType(32), vec.count), None))


def kernel_name(width: int, chains: int) -> str:
    return f"fma_peak_w{width}_c{chains}"


_kernels: dict[int, object] = {}


def fma_kernel(width: int):
    """The compiled kernel with `accumulators(width)` chains, as a ctypes function
    (out, iterations, x, y) -> None."""
    if width not in _kernels:
        jit = host_jit()
        jit.add(build_fma_kernel(width))
        signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float,
                                     ctypes.c_float)
        _kernels[width] = signature(jit.address(kernel_name(width, accumulators(width))))
    return _kernels[width]


def peak_gflops(width: int, threads: int, seconds: float, repeats: int) -> float:
    """Best GFLOP/s of `threads` concurrent runs of the FMA kernel, each ~`seconds` long."""
    kernel = fma_kernel(width)
    outs = [np.zeros(width, np.float32) for _ in range(threads)]
    iterations = _calibrate(kernel, outs[0], seconds)
    flops = threads * iterations * 2 * width * accumulators(width)
    return flops / _fastest([lambda out=out: kernel(out.ctypes.data, iterations, 0.999, 0.001)
                             for out in outs], repeats) / 1e9


def _calibrate(kernel, out, seconds: float) -> int:
    iterations = 1 << 14
    while True:
        start = time.perf_counter()
        kernel(out.ctypes.data, iterations, 0.999, 0.001)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4 or iterations >= 1 << 40:
            return max(1, int(iterations * seconds / elapsed))
        iterations *= 4


def copy_gbs(footprint: int, threads: int, repeats: int) -> float:
    """Best GB/s (read + write) of `threads` threads each copying its share of two
    buffers of `footprint` / 2 bytes with np.copyto, again and again for
    COPY_BYTES_PER_TIMING bytes in all."""
    src = np.ones(footprint // 8, np.float32)
    dst = np.zeros_like(src)
    dst.fill(1.0)  # touch every page now, so no timed copy pays for page faults
    calls = max(1, COPY_BYTES_PER_TIMING // footprint)
    bounds = np.linspace(0, src.size, threads + 1).astype(int)

    def copies(start, end):
        for _ in range(calls):
            np.copyto(dst[start:end], src[start:end])

    tasks = [lambda start=start, end=end: copies(start, end)
             for start, end in zip(bounds[:-1], bounds[1:])]
    return footprint * calls / _fastest(tasks, repeats) / 1e9


def _fastest(tasks, repeats: int) -> float:
    """Shortest of `repeats` runs of all `tasks` at once, one thread each, timed from a
    common start (threads already running) to the last one's end."""
    best = float("inf")
    for _ in range(repeats):
        ready = threading.Barrier(len(tasks) + 1)

        def worker(task):
            ready.wait()
            task()
        workers = [threading.Thread(target=worker, args=(task,)) for task in tasks]
        for w in workers:
            w.start()
        ready.wait()
        start = time.perf_counter()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - start)
    return best


def measure(threads: int, quick: bool) -> Limits:
    width = vector_width()
    seconds, repeats = (0.02, 5) if quick else (0.1, 7)
    copies = {size: max(copy_gbs(size, count, repeats) for count in {1, threads})
              for size in COPY_FOOTPRINTS}
    return Limits(cpu=selected().name, vector_width=width, threads=threads,
                  peak_gflops_1t=peak_gflops(width, 1, seconds, repeats),
                  peak_gflops=peak_gflops(width, threads, seconds, repeats),
                  copy_gbs=copies)
