"""kiln's GEMM under eager's `mm` and `bmm`.

By default eager's CPU kernels (eager/kernels/linalg.py) ask `product` for float32 and
float64 products of linalg.GEMM_MACS multiply-adds or more: kiln's GEMM runs them,
numpy's BLAS the smaller ones (and every product while the GEMM kernel compiles in the
background).
`use_kiln_gemm()` registers, through the dispatcher's public registration API, kernels
that run every float product on kiln's GEMM (the eager runtime itself never imports the
compiler):

    import eager.backends.native.gemm
    eager.backends.native.gemm.use_kiln_gemm()      # eager.mm now runs kiln's GEMM on the CPU
    eager.backends.native.gemm.use_kiln_gemm(False) # back to the default

Only float32 and float64 take kiln's path; other dtypes keep numpy's kernel. Eager
calls run the shape-generic kernels (`specialise=False`): their sizes are not known
ahead, and a kernel compiled per size seen twice (50-150 ms each) would cost an eager
program with varying sizes far more than it saves; compiled graphs with fixed sizes are
where runtime/cpu/gemm/small.py's specialised kernels serve.
"""
from __future__ import annotations

from runtime.cpu.gemm import DTYPES
from runtime.cpu.gemm.api import bmm, gemm
from eager.dispatcher import ATEN, DispatchKey
from eager.kernels.linalg import bmm_rule, mm_rule
from eager.tensor import from_array
from ir.ops import Op
from runtime.llvm.jit import KernelPending, deferring_call


def product(a, b, batched: bool, rounded: bool = False):
    """a @ b (numpy arrays of one float dtype; batched: bmm's 3-D operands) on kiln's
    GEMM, or None while its kernel compiles in the background (numpy runs it then).
    bfloat16 or float16 operands give a float32 product, or with `rounded` the product
    rounded to their type by the GEMM's store."""
    out_dtype = a.dtype if rounded else None
    try:
        return deferring_call(_bmm if batched else _gemm, (a, b, out_dtype))
    except KernelPending:
        return None


def _gemm(operands):
    a, b, out_dtype = operands
    return gemm(a, b, specialise=False, out_dtype=out_dtype)


def _bmm(operands):
    a, b, out_dtype = operands
    return bmm(a, b, specialise=False, out_dtype=out_dtype)


_numpy_kernels: dict = {}


def _kiln_kernel(op: Op, numpy_kernel):
    def kernel(self, mat2):
        if self.dtype.name not in DTYPES or mat2.dtype is not self.dtype:
            return numpy_kernel(self, mat2)
        (mm_rule if op is Op.MM else bmm_rule)(self, mat2)
        run = _gemm if op is Op.MM else _bmm
        return from_array(run((self._np(), mat2._np(), None)))
    kernel.__name__ = f"{op.schema.name}_kiln_gemm"
    return kernel


def use_kiln_gemm(enabled: bool = True) -> None:
    for op in (Op.MM, Op.BMM):
        handle = ATEN[op]
        if enabled:
            if op not in _numpy_kernels:
                _numpy_kernels[op] = handle.kernels[DispatchKey.CPU]
            handle.register(DispatchKey.CPU, _kiln_kernel(op, _numpy_kernels[op][0]))
        elif op in _numpy_kernels:
            fn, where = _numpy_kernels.pop(op)
            handle.register(DispatchKey.CPU, fn, where)


def using_kiln_gemm() -> bool:
    return bool(_numpy_kernels)
