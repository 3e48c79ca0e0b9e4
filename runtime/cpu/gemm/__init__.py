"""kiln's own BLAS: GEMM and batched GEMM on numpy arrays, with a fused epilogue, through
native code built with llvmlite.

    api.py      gemm(), bmm(), Epilogue: the entry points; GemmRequest, one call of them
    config.py   every tuning threshold
    kernels.py  the compiled packed kernels and what one call of them is (Call, Batch)
    jobs.py     a batch cut into pieces and run on runtime.pool's threads
    plans.py    repeated requests prepared once (a few microseconds a call)
    small.py    kernels specialised to small shapes, and one call covering many products
    tune.py     cache blocking: defaults from the CPU's caches, a small autotuner
    eager.py    kiln's GEMM under eager's mm and bmm, by dispatcher registration
    ir/         the LLVM IR emitters: micro- and macro-kernel, packing, tile store, small
"""

DTYPES = ("float32", "float64")
"""The element types kiln's GEMM kernels run."""
HALF_OPERANDS = {"float32": ("bfloat16", "float16")}
"""16-bit operands a product type also takes: widened to float32 while packed, or
(bfloat16, on CPUs with AVX512-BF16) packed in pairs for vdpbf16ps. A constant here, not
in emit/, so that planning a graph loads no code generator."""
