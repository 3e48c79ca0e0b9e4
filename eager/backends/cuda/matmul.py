"""CUDA kernels of eager's mm, bmm, addmm, mv and dot through kiln's tiled GEMM
(runtime/cuda/codegen/gemm.py): float32 and float64.

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
from eager.backends.cuda.pointwise import check_dtypes, copy_into, device_of
from eager.dispatcher import ATEN, AUTOGRAD_KEYS, DispatchKey, exclude_keys
from eager.tensor import ops
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


def _gemm(out, a, b, c=None, beta=0.0, alpha=1.0):
    """out = alpha * a @ b + beta * c, out contiguous (m x n)."""
    m, n = out._shape
    k = a._shape[1]
    if m == 0 or n == 0:
        return out
    dtype = out.dtype.name
    if dtype not in ("float32", "float64"):
        check_dtypes("mm", out.dtype)  # float16 names itself
        raise NotImplementedError(f"Could not run 'aten::mm' with arguments from the 'CUDA' "
                                  f"backend: kiln's CUDA GEMM is float32 or float64, not "
                                  f"{dtype}")
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
    return _gemm(D.empty(shaped.shape, shaped.dtype, dev), self, mat2)


def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    shaped = ATEN[Op.ADDMM].kernels[DispatchKey.Meta][0](self, mat1, mat2, beta=beta,
                                                          alpha=alpha)
    dev = device_of("addmm", (self, mat1, mat2))
    out = D.empty(shaped.shape, shaped.dtype, dev)
    return _gemm(out, mat1, mat2, self, float(beta), float(alpha))


def bmm(self, mat2):
    shaped = ATEN[Op.BMM].kernels[DispatchKey.Meta][0](self, mat2)
    out = D.empty(shaped.shape, shaped.dtype, device_of("bmm", (self, mat2)))
    for i in range(shaped.shape[0]):
        piece = D.empty(shaped.shape[1:], shaped.dtype, out.device)
        _gemm(piece, ops.select(self, 0, i), ops.select(mat2, 0, i))
        copy_into(ops.select(out, 0, i), piece)
    return out


def mv(self, vec):
    ATEN[Op.MV].kernels[DispatchKey.Meta][0](self, vec)
    with exclude_keys(*AUTOGRAD_KEYS):
        return ops.squeeze(mm(self, ops.unsqueeze(vec, 1)), [1])


def dot(self, tensor):
    ATEN[Op.DOT].kernels[DispatchKey.Meta][0](self, tensor)
    with exclude_keys(*AUTOGRAD_KEYS):
        return ops.sum(ops.mul(self, tensor))


KERNELS = {Op.MM: mm, Op.ADDMM: addmm, Op.BMM: bmm, Op.MV: mv, Op.DOT: dot}
