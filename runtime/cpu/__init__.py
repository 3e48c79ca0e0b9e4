"""The CPU kernel generators, on runtime/llvm/toolkit.py (the IR toolkit):

    kernel_spec.py   what a pointwise or row kernel computes, known without building IR
    kernel_ir.py     its LLVM IR: elementwise and row kernels (accumulators.py their
                     reductions, gather.py their gathered loads, values.py one op's
                     values in lanes, vmath.py the vectorised math functions)
    kernels.py       a kernel as something to compile (it pickles for a worker) and read
    launch.py        a kernel's call prepared per layout, on runtime.pool's threads
    optim_ir.py      the optimisers' fused update kernels
    erf.py           erf and erfinv in numpy, and the emitter of erfinv
    gemm/            kiln's GEMM: packed and small kernels, plans, jobs, tuning (emit/:
                     its LLVM IR)
"""
