"""Let eager's `mm` and `bmm` run on kiln's own GEMM instead of numpy's BLAS, through the
dispatcher's public registration API (the eager runtime itself never imports the
compiler):

    import compiler.gemm.eager
    compiler.gemm.eager.use_kiln_gemm()      # eager.mm now runs kiln's GEMM on the CPU
    compiler.gemm.eager.use_kiln_gemm(False) # back to numpy's BLAS

Only float32 and float64 take the new path; other dtypes keep numpy's kernel. Eager
calls run the shape-generic kernels (`specialise=False`): their sizes are not known
ahead, and a kernel compiled per size seen twice (50-150 ms each) would cost an eager
program with varying sizes far more than it saves; compiled graphs with fixed sizes are
where compiler/gemm/small.py's specialised kernels serve.
"""
from __future__ import annotations

from compiler.gemm import DTYPES
from eager.dispatcher import ATEN, DispatchKey
from eager.tensor import from_array
from ir.ops import Op

_numpy_kernels: dict = {}


def _kiln_kernel(op: Op, numpy_kernel):
    def kernel(self, mat2):
        if self.dtype.name not in DTYPES or mat2.dtype is not self.dtype:
            return numpy_kernel(self, mat2)
        from compiler.gemm.api import bmm, gemm
        from eager.kernels.linalg import bmm_rule, mm_rule
        (mm_rule if op is Op.MM else bmm_rule)(self, mat2)
        product = gemm if op is Op.MM else bmm
        return from_array(product(self._np(), mat2._np(), specialise=False))
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
