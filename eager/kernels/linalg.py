"""Matrix products: dot, mv, mm, bmm, addmm on numpy's BLAS, and mm and bmm of floats
large enough on kiln's GEMM (eager/backends/native/gemm.py). Errors use PyTorch's text."""
from __future__ import annotations

import numpy as np

from eager.kernels._common import (compute_np, load_native, meta_from_rule, operand,
                                   register, result, scalar_value, type_word)
from eager.kernels.gradients import sum_to
from eager.kernels.shape import expand
from ir.records import declare
from eager.tensor import from_array, ops
from ir import dtypes
from ir.ops import Op


_C_TYPE = {"float32": "float", "float64": "double", "float16": "c10::Half",
           "bfloat16": "c10::BFloat16", "int64": "long int", "int32": "int",
           "int16": "short int", "int8": "signed char", "uint8": "unsigned char",
           "bool": "bool"}  # (PyTorch's C++ names, as its messages print them)


def _same_dtype(name_a, a, name_b, b):
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected {name_a} and {name_b} to have the same dtype, but got: "
                           f"{_C_TYPE[a.dtype.name]} != {_C_TYPE[b.dtype.name]}")


def _same_dtype_words(message, a, b):
    """The variant of the check whose message names the types as Float, Double, ..."""
    if a.dtype is not b.dtype:
        raise RuntimeError(message.format(type_word(a.dtype), type_word(b.dtype)))


def _need_dim(name, t, ndim, what):
    if t.dim() != ndim:
        raise RuntimeError(f"{name} must be a {what}, got {t.dim()}-D tensor")


def dot_rule(self, tensor):
    if self.dim() != 1 or tensor.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {self.dim()}D and {tensor.dim()}D "
                           "tensors")
    if self._shape[0] != tensor._shape[0]:
        n, m = self._shape[0], tensor._shape[0]
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to "
                           f"have the same number of elements, but got {n} and {m} elements "
                           "respectively")
    _same_dtype_words("dot : expected both vectors to have same dtype, but found {} and {}",
                      self, tensor)
    return (), self.dtype


def mv_rule(self, vec):
    if self.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got 1, {self.dim()}, {vec.dim()}")
    if self._shape[1] != vec._shape[0]:
        raise RuntimeError(f"size mismatch, got input ({self._shape[0]}), mat "
                           f"({self._shape[0]}x{self._shape[1]}), vec ({vec._shape[0]})")
    _same_dtype("self", self, "vec", vec)
    return (self._shape[0],), self.dtype


def mm_rule(self, mat2):
    if len(self._shape) != 2 or len(mat2._shape) != 2:  # (checked inline: the hot path)
        _need_dim("self", self, 2, "matrix")
        _need_dim("mat2", mat2, 2, "matrix")
    (n, k), (k2, m) = self._shape, mat2._shape
    if k != k2:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({n}x{k} and {k2}x{m})")
    if self.dtype is not mat2.dtype:
        _same_dtype("m1", self, "m2", mat2)
    return (n, m), self.dtype


def bmm_rule(self, mat2):
    _need_dim("batch1", self, 3, "3D tensor")
    _need_dim("batch2", mat2, 3, "3D tensor")
    b, n, k = self._shape
    if mat2._shape[0] != b or mat2._shape[1] != k:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: "
                           f"[{b}, {k}] but got: [{mat2._shape[0]}, {mat2._shape[1]}].")
    _same_dtype("batch1", self, "batch2", mat2)
    return (b, n, mat2._shape[2]), self.dtype


def addmm_rule(self, mat1, mat2, *, beta=1, alpha=1):
    shape, dt = mm_rule(mat1, mat2)
    _same_dtype_words("self and mat2 must have the same dtype, but got {} and {}", self, mat2)
    expand(self, shape)  # self must expand to the product's shape: PyTorch's error if not
    return shape, dt


def _matmul_kernel(rule, product=np.matmul, batched=None):
    """`batched`: False for mm, True for bmm: products of GEMM_MACS or more run on kiln's
    GEMM (eager/backends/native/gemm.py), where it is loaded."""
    def kernel(self, other):
        _, dt = rule(self, other)
        half = dt in dtypes.HALF  # computed in float32, rounded once
        if batched is not None and self._shape[-2] >= GEMM_EDGE and \
                other._shape[-1] >= GEMM_EDGE and (half or dt in _GEMM_DTYPES):  # (tiny: fast)
            r = _product(self._np(), other._np(), batched, rounded=half)
            if r is not None:
                return from_array(r)
        a, b = (operand(self, _F32), operand(other, _F32)) if half else (self._np(), other._np())
        r = product(a, b)  # the rule made both operands of type dt
        r = r if type(r) is np.ndarray else np.asarray(r)
        return result(r, dt) if half else from_array(r)
    kernel.__name__ = rule.__name__.replace("_rule", "_cpu")
    return kernel


_F32 = np.dtype(np.float32)
GEMM_MACS = 1 << 19
GEMM_EDGE = 16
"""From GEMM_MACS multiply-adds (a batch's together), with GEMM_EDGE rows and columns or
more, float mm, bmm and addmm run on kiln's GEMM (eager/backends/native/gemm.py, loaded at the
first such product); numpy's BLAS runs smaller products, where calling it costs less.
Measured on one thread (znver5), numpy's time / kiln's: 64x64x64 (262K) 0.74, 96^3
(885K) 1.33, 128^3 1.67, 512x32x512 1.96, 8 x (64x32 @ 32x64) 1.31, 128x784x10 (10
columns) 0.93, 8x1024x8 0.31."""


def _product(a: np.ndarray, b: np.ndarray, batched: bool, rounded: bool = False):
    """a @ b (float arrays of one dtype) on kiln's GEMM where it takes the product, else
    None (numpy's BLAS runs it). bfloat16 and float16 operands give a float32 product,
    or with `rounded` one rounded to their type by the GEMM's store: the GEMM widens
    them while packing them, with no conversion pass in numpy either way."""
    *batch, m, k = a.shape
    if m * k * b.shape[-1] * (batch[0] if batch else 1) < GEMM_MACS:
        return None
    gemm = _gemm or native_gemm()
    return None if gemm is None else gemm.product(a, b, batched, rounded)


_GEMM_DTYPES = frozenset({dtypes.float32, dtypes.float64})
_gemm = None  # eager/backends/native/gemm.py once loaded, False where it cannot be


def native_gemm():
    """eager/backends/native/gemm.py, loaded at the first product large enough for it; None
    where numpy must serve (KILN_EAGER_NATIVE=0, no llvmlite)."""
    global _gemm
    if _gemm is None:
        _gemm = load_native(_import_gemm)
    return _gemm or None


def _import_gemm():
    from eager.backends.native import gemm as eager
    return eager


for _op, _rule in ((Op.DOT, dot_rule), (Op.MV, mv_rule)):
    register(_op, _matmul_kernel(_rule), meta_from_rule(_rule))
register(Op.BMM, _matmul_kernel(bmm_rule, batched=True), meta_from_rule(bmm_rule))
# ndarray.dot: the same BLAS call as np.matmul for two matrices (the same bits, checked
# over layouts), without the ufunc machinery: 2x3 @ 3x2 in 0.27 us instead of 0.71
register(Op.MM, _matmul_kernel(mm_rule, np.ndarray.dot, batched=False),
         meta_from_rule(mm_rule))


def addmm_cpu(self, mat1, mat2, *, beta=1, alpha=1):
    """Not its record's formula in numpy: the product is made by kiln's GEMM or BLAS and
    the bias added into it in place, which a formula over fresh arrays cannot say
    (tests/compiler/test_decompositions.py compares the two)."""
    _, dt = addmm_rule(self, mat1, mat2, beta=beta, alpha=alpha)
    ct = compute_np(dt)
    prod = _product(mat1._np(), mat2._np(), batched=False) \
        if (dt in _GEMM_DTYPES or dt in dtypes.HALF) and mat1._shape[0] >= GEMM_EDGE and \
        mat2._shape[1] >= GEMM_EDGE else None
    if prod is None:
        prod = np.matmul(operand(mat1, ct), operand(mat2, ct))
    alpha, beta = scalar_value(alpha), scalar_value(beta)
    if alpha != 1:
        prod *= alpha
    if beta == 0:  # PyTorch: self is ignored, so NaN/inf in it do not propagate
        return result(prod, dt)
    bias = operand(self, ct)
    if type(prod) is np.ndarray and prod.shape == np.broadcast_shapes(prod.shape, bias.shape):
        np.add(prod, bias if beta == 1 else beta * bias, out=prod)  # into the fresh product
        return result(prod, dt)
    return result(prod + (bias if beta == 1 else beta * bias), dt)


register(Op.ADDMM, addmm_cpu, meta_from_rule(addmm_rule))


# records: names and derivatives -----------------------------------------------------
DOT = declare(Op.DOT, function=True, method=True)


@DOT.derivative("DotBackward0", "self tensor", save="self tensor")
def _(ctx, g):
    return g * ctx.tensor, g * ctx.self


MV = declare(Op.MV, function=True, method=True)


@MV.derivative("MvBackward0", "self vec", save="self vec")
def _(ctx, g):
    return (ops.mm(ops.unsqueeze(g, 1), ops.unsqueeze(ctx.vec, 0)),
            ops.mv(ops.t(ctx.self), g))


MM = declare(Op.MM, function=True, method=True)


@MM.derivative("MmBackward0", "self mat2", save="self mat2")
def _(ctx, g):
    return (_product_like(g, ops.t(ctx.mat2), ctx.self) if ctx.needs_input_grad(0) else None,
            _product_like(ops.t(ctx.self), g, ctx.mat2) if ctx.needs_input_grad(1) else None)


def _product_like(a, b, like):
    """a @ b laid out as `like`, the operand it is the gradient of (PyTorch's
    mm_mat1_backward / mm_mat2_backward): for a column-major `like`, a transposed weight
    such as linear's `w.t()`, the product is computed transposed, so the gradient reaching
    `w` is contiguous and its .grad needs no copy."""
    rows, _ = like._shape
    if like._stride == (1, rows) and not like.is_contiguous():
        return ops.t(ops.mm(ops.t(b), ops.t(a)))
    return ops.mm(a, b)


BMM = declare(Op.BMM, function=True, method=True)


@BMM.derivative("BmmBackward0", "self mat2", save="self mat2")
def _(ctx, g):
    return (ops.bmm(g, ops.transpose(ctx.mat2, 1, 2)) if ctx.needs_input_grad(0) else None,
            ops.bmm(ops.transpose(ctx.self, 1, 2), g) if ctx.needs_input_grad(1) else None)


ADDMM = declare(Op.ADDMM, function=True, method=True)


@ADDMM.decomposition
def _(F, self, mat1, mat2, *, beta=1, alpha=1):
    product = F.mm(mat1, mat2)
    product = product if alpha == 1 else product * alpha
    if beta == 0:  # PyTorch: self is ignored, so NaN and inf in it do not propagate
        return product
    return product + (self if beta == 1 else self * beta)


@ADDMM.derivative("AddmmBackward0", "self mat1 mat2",
                  save="self_sizes mat1 mat2 beta alpha")


def _(ctx, g):
    alpha, beta = ctx.alpha, ctx.beta
    grad_self = sum_to(g if beta == 1 else g * beta, ctx.self_sizes)
    grad_1 = grad_2 = None
    if ctx.needs_input_grad(1):
        grad_1 = _product_like(g, ops.t(ctx.mat2), ctx.mat1)
        grad_1 = grad_1 if alpha == 1 else grad_1 * alpha
    if ctx.needs_input_grad(2):
        grad_2 = _product_like(ops.t(ctx.mat1), g, ctx.mat2)
        grad_2 = grad_2 if alpha == 1 else grad_2 * alpha
    return grad_self, grad_1, grad_2
