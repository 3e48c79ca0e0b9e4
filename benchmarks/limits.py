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

Bandwidth is the best of four streaming kernels, generated as the peak kernel is, on
working sets from cache-sized to memory-sized (`COPY_FOOTPRINTS`), on one thread and on
N, best of several runs: a copy (one stream read, one written: STREAM's copy), an add
(two read, one written), a sum (one read), and libc's memcpy (whose non-temporal stores
copy 16 MiB half again as fast as the copy loop). Bytes read plus bytes written count. Reads
cost less than writes, so an add or a reduction moves more bytes a second than a copy:
held to the copy alone, numpy's add on 768 KiB read 122% of the limit. Each kernel
repeats its pass inside one call, so a small working set measures the cache, not the
call (numpy's copyto of 128 KiB spent a third of its time in the call). No working set
is given less bandwidth than a larger one (never_faster_when_larger). A case moving W
bytes per call is held to the bandwidth of the largest working set not over W: a 1 MB
add runs in cache, and held to memory bandwidth it read 490% of the limit. A test
checks that numpy's add, copy and sum and kiln's GEMM stay within the limits.
"""
from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import asdict, dataclass

import llvmlite.ir as ir
import numpy as np

from runtime.llvm import toolkit as L
from runtime.llvm.jit import host_jit, vector_width
from runtime.llvm.target import selected

COPY_FOOTPRINTS = (64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 16 << 20, 128 << 20)
"""Working sets (bytes of the arrays a kernel reads and writes): past L1 in L2 (64 KiB ..
1 MiB), in L3 (or the L2 of two cores), about the size of an L3, and well past any
cache."""
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


STREAMS = {"copy": (1, 1), "add": (2, 1), "sum": (1, 0), "memcpy": (1, 1)}
"""Each streaming kernel's arrays read and written per element."""
_UNROLL = 4  # vectors a trip: loads in flight


def build_stream_kernel(kind: str, width: int):
    """IR for `void stream_<kind>_wW(float* a, float* b, float* c, i64 n, i64 passes)`:
    `passes` times over n floats (a multiple of width * _UNROLL), c = a (copy: a vector
    loop; memcpy: llvm.memcpy, a call of libc's), c = a + b (add), or the sum of a into
    _UNROLL vector accumulators, stored to c[0:width] (sum).
    LLVM keeps every pass: it cannot tell the arrays apart, so a pass's stores may change
    what the next one reads (the sum's result counts every pass; a test checks it)."""
    f32 = ir.FloatType()
    vec = ir.VectorType(f32, width)
    ptr = f32.as_pointer()
    module = host_jit().new_module(f"stream_{kind}_w{width}")
    fn, b = L.define(module, f"stream_{kind}_w{width}",
                     ir.FunctionType(L.VOID, [ptr, ptr, ptr, L.I64, L.I64]),
                     ("a", "b", "c", "n", "passes"))
    a, bb, c, n, passes = fn.args
    zero = ir.Constant(vec, [0.0] * width)

    def one_pass(_, sums):
        if kind == "memcpy":  # libc's memcpy, with its non-temporal stores for large copies
            bytes_ = b.mul(n, L.i64(4))
            L.intrinsic(b, "memcpy", [c, a, bytes_, ir.Constant(L.I1, 0)], L.VOID,
                        (c.type, a.type, L.I64))
            return sums

        def step(i, sums):
            out = []
            for u in range(_UNROLL):
                at = b.add(i, L.i64(u * width))
                x = _load(b, L.at(b, a, at), vec)
                if kind == "sum":
                    out.append(b.fadd(sums[u], x))
                    continue
                if kind == "add":
                    x = b.fadd(x, _load(b, L.at(b, bb, at), vec))
                _store(b, x, L.at(b, c, at), vec)
            return out or sums
        return L.fold_range(b, 0, n, width * _UNROLL, sums, step, "i")

    sums = L.fold_range(b, 0, passes, 1, [zero] * _UNROLL, one_pass, "pass")
    if kind == "sum":
        total = L.pairwise(list(sums), b.fadd)
        _store(b, total, c, vec)
    b.ret_void()
    return module


def _load(b, element_ptr, vec):
    return b.load(b.bitcast(element_ptr, vec.as_pointer()), align=4)


def _store(b, value, element_ptr, vec):
    b.store(value, b.bitcast(element_ptr, vec.as_pointer()), align=4)


_streams: dict = {}


def stream_kernel(kind: str, width: int):
    """The compiled streaming kernel as a ctypes function (a, b, c, n, passes) -> None."""
    key = kind, width
    if key not in _streams:
        jit = host_jit()
        jit.add(build_stream_kernel(kind, width))
        signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64, ctypes.c_int64)
        _streams[key] = signature(jit.address(f"stream_{kind}_w{width}"))
    return _streams[key]


def stream_gbs(kind: str, footprint: int, threads: int, repeats: int) -> float:
    """Best GB/s (bytes read + written) of `threads` threads each running the `kind`
    streaming kernel over its share of arrays `footprint` bytes in all, pass after pass
    for COPY_BYTES_PER_TIMING bytes."""
    width = vector_width()
    reads, writes = STREAMS[kind]
    block = width * _UNROLL
    floats = max(block, footprint // (4 * (reads + writes)) // block * block)
    arrays = [np.ones(floats, np.float32) for _ in range(3)]  # every page touched now
    moved = 4 * floats * (reads + writes)
    passes = max(1, COPY_BYTES_PER_TIMING // moved)
    kernel = stream_kernel(kind, width)
    bounds = [floats * k // threads // block * block for k in range(threads + 1)]
    bounds[-1] = floats

    def task(start: int, end: int):
        a, b, c = (x[start:] for x in arrays)
        return lambda: kernel(a.ctypes.data, b.ctypes.data, c.ctypes.data, end - start,
                              passes)
    return moved * passes / _fastest([task(s, e) for s, e in zip(bounds, bounds[1:])],
                                     repeats) / 1e9


def copy_gbs(footprint: int, threads: int, repeats: int) -> float:
    """The bandwidth limit of a working set of `footprint` bytes: the best GB/s of the
    streaming kernels."""
    return max(stream_gbs(kind, footprint, threads, repeats) for kind in STREAMS)


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
                  copy_gbs=never_faster_when_larger(copies))


def never_faster_when_larger(rates: dict) -> dict:
    """Each working set's rate raised to the best of the larger ones: a larger working
    set is never faster, so where one measured faster (512 KiB over 256 KiB, a noisy
    neighbour or a call's fixed cost), the smaller one was measured short."""
    out, best = {}, 0.0
    for size in sorted(rates, reverse=True):
        best = out[size] = max(best, rates[size])
    return dict(sorted(out.items()))
