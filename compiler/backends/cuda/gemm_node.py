"""A fused `gemm` node as a CUDA kernel: its body read as the native backend reads it
(backends/gemm_plan.py: prologue, product, transpose flags, the store's
bias/activation/scale/residual, the rest), served by runtime/cuda/codegen/gemm.py's
tiled SGEMM/DGEMM with that store as its fused epilogue.

    gemm_call(node, layouts) -> GemmCall: the kernel's request for the operands' layouts
                                and how to make its launch arguments

It serves a plan of one 2-D product of float32 or float64 matrices whose store ends the
body; CannotLower, with the reason, for the rest: a prologue (elementwise ops or views
before the product other than the transposes its flags take), a batched product (bmm),
an epilogue past the store, an operand that is neither rows nor columns in memory.

The kernel reads a matrix as rows with a leading dimension, or (its transpose flag) as
columns: an operand whose memory runs down its columns (a transposed view) is read in
place with the flag flipped, so only the layout decides the kernel, as for the
pointwise kernels. Small outputs, which the default tiles would cover with one block,
take SMALL_TILES (32 x 32, 64 threads) for a grid of more blocks; this choice is not
measured on a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from compiler.backends.gemm_plan import plan_gemm_node
from runtime.layout import CannotLower
from runtime.cuda.codegen import VECTOR_BYTES
from runtime.cuda.codegen.gemm import DEFAULT_TILES, SMALL_TILES, CudaGemmRequest
from runtime.cpu.gemm.emit.kernel import EpilogueSpec
from ir.graph import Node


@dataclass(frozen=True)
class GemmCall:
    """One gemm node's kernel for one layout of its operands: `request` (what
    runtime/cuda/codegen/gemm.py generates), the sizes, and for each matrix the body input it
    is (an index into the node's inputs) with its leading dimension (elements); `bias`
    is (input, element stride), `residual` (input, leading dimension), or None."""
    request: CudaGemmRequest
    m: int
    n: int
    k: int
    a: tuple[int, int]
    b: tuple[int, int]
    scale: float
    bias: tuple[int, int] | None
    residual: tuple[int, int] | None

    @property
    def grid(self) -> tuple:
        return self.request.tiles.grid_for(self.m, self.n)

    def arguments(self, inputs: list, out) -> list:
        """The kernel's arguments in request.arguments() order: `inputs` are the node's
        inputs and `out` its output as the kernel takes pointers (numpy arrays for the
        emulator, device addresses for the driver), each at its first element. C is
        not read (beta 0): out stands in for its pointer."""
        (a, lda), (b, ldb) = self.a, self.b
        args = [self.m, self.n, self.k, 1.0, inputs[a], lda, inputs[b], ldb, 0.0, out, 0,
                out, max(self.n, 1), self.scale]
        if self.bias is not None:
            args += [inputs[self.bias[0]], self.bias[1]]
        if self.residual is not None:
            args += [inputs[self.residual[0]], self.residual[1]]
        return args


def check_plan(node: Node):
    """The plan of gemm `node` if the CUDA GEMM can serve it, else CannotLower saying why."""
    try:
        plan = plan_gemm_node(node.attr["body"])
    except CannotLower as e:
        raise CannotLower(str(e)) from None
    if plan.prologue is not None:
        ops = ", ".join(sorted({n.op.name.lower() for n in plan.prologue.nodes}))
        raise CannotLower(f"a prologue before the product ({ops}): the CUDA GEMM reads "
                          f"its operands as they are in memory")
    if plan.batched:
        raise CannotLower("a batched product (bmm): the CUDA GEMM computes one matrix")
    if plan.rest is not None:
        ops = ", ".join(sorted({n.op.name.lower() for n in plan.rest.nodes}))
        raise CannotLower(f"an epilogue past what the GEMM's store fuses ({ops})")
    return plan


def gemm_call(node: Node, layouts: list) -> GemmCall:
    """The kernel of gemm `node` for inputs laid out like `layouts` (one per body input:
    numpy arrays, or anything with their shape, strides in bytes, itemsize, and an
    `address`, its first element's); the output is contiguous and fresh, so aligned.
    The request is `aligned` (16-byte vector loads and stores) where A's and B's
    addresses and every leading dimension are multiples of 16 bytes."""
    plan = check_plan(node)
    inputs = node.attr["body"].inputs
    (m, n), dtype = plan.result.type.shape, plan.result.type.dtype.name
    a_input, b_input = (inputs.index(v) for v in plan.operands)
    (lda, trans_a), (ldb, trans_b) = (
        _as_matrix(layouts[i], flag, name)
        for i, flag, name in ((a_input, plan.transposes[0], "A"),
                              (b_input, plan.transposes[1], "B")))
    k = plan.operands[0].type.shape[0 if plan.transposes[0] else 1]
    store = plan.store
    bias = residual = None
    if store.bias is not None:
        i = inputs.index(store.bias)
        bias = (i, _strides(layouts[i])[0])
    if store.residual is not None:
        i = inputs.index(store.residual)
        ld, transposed = _as_matrix(layouts[i], False, "the residual")
        if transposed:
            raise CannotLower("a residual laid out by columns: the store reads it by rows")
        residual = (i, ld)
    epilogue = EpilogueSpec("col" if bias else None, store.activation, residual is not None)
    tiles = DEFAULT_TILES[dtype]
    if m <= tiles.block_m and n <= tiles.block_n:
        tiles = SMALL_TILES
    request = CudaGemmRequest(dtype, trans_a, trans_b, epilogue, tiles=tiles)
    itemsize = layouts[a_input].itemsize
    matrices = [(layouts[a_input], lda), (layouts[b_input], ldb)]
    if all(address_of(x) % VECTOR_BYTES == 0 and (ld * itemsize) % VECTOR_BYTES == 0
           for x, ld in matrices) and (n * itemsize) % VECTOR_BYTES == 0:
        request = replace(request, aligned=True)
    return GemmCall(request, m, n, k, (a_input, lda), (b_input, ldb), store.scale, bias,
                    residual)


def address_of(layout) -> int:
    return layout.ctypes.data if isinstance(layout, np.ndarray) else layout.address


def _strides(layout) -> list[int]:
    """Element strides; CannotLower for a negative one (the kernel walks forwards)."""
    strides = [s // layout.itemsize for s in layout.strides]
    if any(s < 0 for size, s in zip(layout.shape, strides) if size > 1):
        raise CannotLower("an operand with a negative stride")
    return strides


def _as_matrix(layout, transposed: bool, name: str) -> tuple[int, bool]:
    """(leading dimension, transpose flag) reading a 2-D operand laid out as `layout`
    that the plan reads with flag `transposed`: rows as they are, or columns as the
    rows of its transpose (the flag flipped)."""
    (rows, cols), (row_stride, col_stride) = layout.shape, _strides(layout)
    if cols <= 1 or col_stride == 1:
        return (row_stride if rows > 1 else max(cols, 1)), transposed
    if rows <= 1 or row_stride == 1:
        return (col_stride if cols > 1 else max(rows, 1)), not transposed
    raise CannotLower(f"{name} has neither rows nor columns contiguous (element strides "
                      f"{row_stride}, {col_stride})")
