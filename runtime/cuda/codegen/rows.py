"""Row kernels for CUDA: fused reductions with the elementwise ops over the same rows
(sum, mean, amax, amin, argmax, argmin; softmax, log_softmax and layer_norm, which the
passes decompose into such rows), one block per row.

A block takes rows ctaid, ctaid + nctaid, ...; each row runs in the CPU's passes
(runtime/cpu/kernel_ir.RowPasses): in a pass every thread walks the row's elements tid,
tid + ntid, ..., computing the values the pass needs, accumulating its reductions
(accumulators.py, one scalar each) and storing the full-row outputs ready by then;
reduce.block_reduce then gives every thread the row's reduced values, and the per-row
ops between passes run in every thread. Thread 0 stores the per-row outputs.

The row length, the rows (the outer dims) and their strides are compiled in (a compiled
graph's node: a kernel per layout) or, with CudaSpec.rank, launch arguments (eager's
reductions, softmax and the like: one kernel per op, dtypes and rank serving every
shape); the block size is then the caller's, fixed when the kernel is made.
"""
from __future__ import annotations

from runtime.cpu import kernel_ir as K
from runtime.cpu import values as V
from runtime.cpu.accumulators import accumulate
from runtime.cuda.codegen import CudaKernel
from runtime.cuda.codegen.kernel_ir import CudaSpec, KernelBuilder
from runtime.cuda.codegen.reduce import WARP, block_reduce
from runtime.llvm import toolkit as llvm_ir
from runtime.llvm.toolkit import I64, i64

MAX_THREADS = 256  # threads per block of a row kernel at most


def threads_for(inner: int) -> int:
    """Threads per block for rows of `inner` elements: one warp up to 32 elements, else
    128 to MAX_THREADS (whole warps, one element each): ptxas sizes registers for full
    occupancy from the launch bound, and at 64 or 96 threads it allowed a double
    log_softmax row 32 registers and spilled (at 32, 128 and up: 35-38, none)."""
    if inner <= WARP:
        return WARP
    return min(MAX_THREADS, max(4 * WARP, -(-inner // WARP) * WARP))


def build_rows(spec: CudaSpec, threads: int | None = None) -> CudaKernel:
    """The row kernel of `spec` (a reduction KernelSpec): one block per row, of
    `threads` (threads_for the compiled row length, or MAX_THREADS, when None)."""
    threads = threads or (threads_for(spec.inner[0]) if spec.rank is None else MAX_THREADS)
    if threads % WARP or not WARP <= threads <= WARP * WARP:
        raise ValueError(f"a row kernel's block is whole warps, up to 1024 threads; "
                         f"got {threads}")
    k = KernelBuilder(spec, threads)
    b, target, kernel = k.b, k.target, spec.kernel
    n_in = len(kernel.inputs)
    inner = k.sizes[-1]
    inner_strides = [strides[-1] for strides in k.strides]
    plan = K.RowPasses(kernel)
    S = V.Lanes(b, None)
    block, blocks = (b.zext(target.special_register(b, name), I64)
                     for name in ("ctaid", "nctaid"))
    tid, ntid = (b.zext(target.special_register(b, name), I64) for name in ("tid", "ntid"))

    with llvm_ir.for_range(b, block, k.product(k.sizes[:-1]), blocks, "row") as r:
        bases = k.offsets(r, slice(None, -1))
        known = {v: k.load(j, bases[j]) for j, v in enumerate(kernel.inputs)
                 if v in kernel.per_row}
        k.constants(known)

        def at(j, i):
            stride = inner_strides[j]
            return b.add(bases[j], b.mul(i, i64(stride) if isinstance(stride, int) else stride))

        def one_pass(needed, accs, stores, reloads):
            with llvm_ir.for_range(b, tid, inner, ntid, "element") as i:
                env = dict(known)
                for j, v in enumerate(kernel.inputs):
                    if v not in kernel.per_row:
                        env[v] = k.load(j, at(j, i))
                for node in kernel.nodes:
                    if node.outputs[0] in needed:
                        k.compute(node, env, S)
                for node, acc in accs.items():
                    accumulate(b, None, node, acc, env[node.inputs[0]], i)
                for j, v in stores:
                    k.store(n_in + j, at(n_in + j, i), env[v])
            for node, acc in accs.items():
                known[node.outputs[0]] = block_reduce(k, node, acc)

        plan.run(k, known, S, one_pass)
        with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
            for j, v in enumerate(kernel.outputs):
                if v in kernel.per_row:
                    k.store(n_in + j, bases[n_in + j], known[v])
    return k.finish()

