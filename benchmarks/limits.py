"""The physical limits results are measured against: peak float32 FLOP/s of this CPU and
copy bandwidth of its memory.

Peak FLOP/s comes from a small kernel generated with llvmlite: a loop of independent
`llvm.fma` chains on explicit <W x float> vectors (W = 16 with AVX-512, 8 with AVX2), so
the FMA units never wait on a result. It runs on one thread and then on N Python threads
at once (ctypes releases the GIL during the call). Bandwidth is a large numpy copy,
counting bytes read plus bytes written, as STREAM's copy does.
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

CHAINS = 16  # independent accumulators: enough to cover FMA latency x FMA ports


@dataclass
class Limits:
    cpu: str
    vector_width: int
    threads: int
    peak_gflops_1t: float
    peak_gflops: float  # on `threads` threads
    copy_gbs: float

    def for_unit(self, unit: str) -> float | None:
        """The limit a throughput in `unit` is a fraction of, or None where none applies."""
        return {"GFLOP/s": self.peak_gflops, "GB/s": self.copy_gbs}.get(unit)

    def to_json(self) -> dict:
        return asdict(self)


def build_fma_kernel(width: int, chains: int = CHAINS):
    """IR for `void fma_peak_wW_cC(float* out, i64 iterations, float x, float y)`: each
    iteration updates `chains` vectors as acc = fma(acc, x, y), then stores their sum to
    out[0:width]. With |x| < 1 the accumulators converge, so no overflow or subnormals."""
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


def kernel_name(width: int, chains: int = CHAINS) -> str:
    return f"fma_peak_w{width}_c{chains}"


_kernels: dict[int, object] = {}


def fma_kernel(width: int):
    """The compiled kernel as a ctypes function (out, iterations, x, y) -> None."""
    if width not in _kernels:
        jit = host_jit()
        jit.add(build_fma_kernel(width))
        signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float,
                                     ctypes.c_float)
        _kernels[width] = signature(jit.address(kernel_name(width)))
    return _kernels[width]


def peak_gflops(width: int, threads: int, seconds: float, repeats: int) -> float:
    """Best GFLOP/s of `threads` concurrent runs of the FMA kernel, each ~`seconds` long."""
    kernel = fma_kernel(width)
    outs = [np.zeros(width, np.float32) for _ in range(threads)]
    flops_per_iteration = 2 * width * CHAINS
    iterations = _calibrate(kernel, outs[0], seconds)

    def run(out):
        kernel(out.ctypes.data, iterations, 0.999, 0.001)

    best = 0.0
    for _ in range(repeats):
        workers = [threading.Thread(target=run, args=(out,)) for out in outs]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - start
        best = max(best, threads * iterations * flops_per_iteration / elapsed / 1e9)
    return best


def _calibrate(kernel, out, seconds: float) -> int:
    iterations = 1 << 14
    while True:
        start = time.perf_counter()
        kernel(out.ctypes.data, iterations, 0.999, 0.001)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4 or iterations >= 1 << 40:
            return max(1, int(iterations * seconds / elapsed))
        iterations *= 4


def copy_gbs(megabytes: int, repeats: int) -> float:
    """Best GB/s of np.copyto between two fresh `megabytes` buffers (read + write)."""
    src = np.ones(megabytes << 18, np.float32)
    dst = np.zeros_like(src)
    dst.fill(1.0)  # touch every page now, so no timed copy pays for page faults
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        np.copyto(dst, src)
        best = max(best, 2 * src.nbytes / (time.perf_counter() - start) / 1e9)
    return best


def measure(threads: int, quick: bool) -> Limits:
    width = vector_width()
    seconds, repeats = (0.02, 5) if quick else (0.1, 7)
    return Limits(cpu=selected().name, vector_width=width, threads=threads,
                  peak_gflops_1t=peak_gflops(width, 1, seconds, repeats),
                  peak_gflops=peak_gflops(width, threads, seconds, repeats),
                  copy_gbs=copy_gbs(64 if quick else 256, repeats))
