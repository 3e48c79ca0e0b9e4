"""CUDA without nvcc: the driver API through ctypes, device memory, kernels as PTX.

    driver.py      libcuda through ctypes (or the emulated driver: KILN_CUDA=emulate)
    allocator.py   device memory: a caching allocator over the driver
    emulated.py    a driver that runs kernels on the host (emulator/)
    nvptx.py       LLVM IR -> PTX through llvmlite's NVPTX target; ptxas checks
    codegen/       the CUDA kernels' LLVM IR: elementwise, rows, reductions, GEMM
    emulator/      the interpreter of a kernel's LLVM IR over grid and block
"""
