"""Code generation: LLVM IR for the host CPU (elementwise and row kernels, GEMM, math)."""
