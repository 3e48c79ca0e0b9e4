"""CUDA kernels of eager's mm, bmm, addmm, mv and dot through kiln's tiled GEMM
(runtime/cuda/codegen/gemm.py): float32 and float64; float16 and bfloat16 widened to
float32 (widened.py), the product accumulated in float32 and rounded once, as on the
CPU. Integer products (mm, bmm, addmm, mv) are refused, naming the dtype, as PyTorch's
CUDA refuses them; dot, a sum of products, takes every dtype (its sum in its own type,
so integers wrap as on the CPU).

An operand whose rows or columns are contiguous is read in place (a transposed view is
the GEMM's transpose flag, as linear's `w.t()`); any other is copied contiguous first.
addmm's `self` is the GEMM's C (beta * C, a row broadcast when it is a vector) and
alpha its alpha. Products with fewer than SMALL_OUTPUT elements of output run on
SMALL_TILES (32 x 32 blocks of 64 threads: more blocks for a small product, and a
short run on the emulator), larger ones on the dtype's default tiles. bmm launches one
product per batch element.
"""
from __future__ import annotations

from runtime.cuda.codegen.gemm import SMALL_TILES, CudaGemmRequest, gemm_kernel
from eager.backends.cuda import device as D
from eager.backends.cuda.pointwise import copy_into, device_of
from eager.backends.cuda.widened import widened
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.tensor import ops
from ir import dtypes
from ir.ops import Op

SMALL_OUTPUT = 256 * 256


def _operand(t):
    """(tensor, transposed, leading dimension) of a matrix as the GEMM reads it."""
    rows, cols = t._shape
    s0, s1 = t._stride
    if s1 == 1 or cols == 1:
        return t, False, max(s0, cols, 1)
    if s0 == 1 or rows == 1:
        return t, True, max(s1, rows, 1)
    return ops.clone(t), False, max(cols, 1)


def _gemm(op: Op, out, a, b, c=None, beta=0.0, alpha=1.0):
    """out = alpha * a @ b + beta * c, out contiguous (m x n)."""
    m, n = out._shape
    k = a._shape[1]
    if m == 0 or n == 0:
        return out
    dtype = out.dtype.name
    if dtype not in ("float32", "float64"):
        raise NotImplementedError(f"Could not run 'aten::{op.schema.name}' with arguments from "
                                  f"the 'CUDA' backend: kiln's CUDA GEMM is float32 or float64 "
                                  f"(float16 and bfloat16 through float32), not {dtype}")
    a, trans_a, lda = _operand(a)
    b, trans_b, ldb = _operand(b)
    ldc = 0
    if c is not None and beta != 0:
        if c.dim() == 2 and c._shape == out._shape and c._stride == (n, 1):
            ldc = n
        elif c.dim() <= 1 or c._shape[0] == 1:  # one row for every row of out
            row = c.reshape([-1]).expand([n])
            c = row if row._stride == (1,) else ops.clone(row)
        else:
            c, ldc = ops.clone(c.expand([m, n])), n
    else:
        c, beta = out, 0.0
    tiles = SMALL_TILES if m * n < SMALL_OUTPUT else None
    request = CudaGemmRequest(dtype, trans_a, trans_b, tiles=tiles)
    kernel = gemm_kernel(request)
    args = [m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, out, n, 1.0]
    D.launch(kernel, request.tiles.grid_for(m, n), args, out.device)
    return out


def mm(self, mat2):
    shaped = ATEN[Op.MM].kernels[DispatchKey.Meta][0](self, mat2)
    dev = device_of("mm", (self, mat2))
    return _gemm(Op.MM, D.empty(shaped.shape, shaped.dtype, dev), self, mat2)


def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    shaped = ATEN[Op.ADDMM].kernels[DispatchKey.Meta][0](self, mat1, mat2, beta=beta,
                                                          alpha=alpha)
    dev = device_of("addmm", (self, mat1, mat2))
    out = D.empty(shaped.shape, shaped.dtype, dev)
    return _gemm(Op.ADDMM, out, mat1, mat2, self, float(beta), float(alpha))


def bmm(self, mat2):
    shaped = ATEN[Op.BMM].kernels[DispatchKey.Meta][0](self, mat2)
    out = D.empty(shaped.shape, shaped.dtype, device_of("bmm", (self, mat2)))
    for i in range(shaped.shape[0]):
        piece = D.empty(shaped.shape[1:], shaped.dtype, out.device)
        _gemm(Op.BMM, piece, ops.select(self, 0, i), ops.select(mat2, 0, i))
        copy_into(ops.select(out, 0, i), piece)
    return out


def mv(self, vec):
    shaped = ATEN[Op.MV].kernels[DispatchKey.Meta][0](self, vec)
    out = D.empty((shaped.shape[0], 1), shaped.dtype, device_of("mv", (self, vec)))
    with exclude_keys(*AUTOGRAD_KEYS):
        return ops.squeeze(_gemm(Op.MV, out, self, ops.unsqueeze(vec, 1)), [1])


def dot(self, tensor):
    shaped = ATEN[Op.DOT].kernels[DispatchKey.Meta][0](self, tensor)
    with exclude_keys(*AUTOGRAD_KEYS):
        return ops.sum(ops.mul(self, tensor), dtype=shaped.dtype)


KERNELS = {**{op: widened(op, kernel, dtypes.HALF) for op, kernel in (
    (Op.MM, mm), (Op.ADDMM, addmm), (Op.BMM, bmm), (Op.MV, mv))},
    Op.DOT: widened(Op.DOT, dot)}
