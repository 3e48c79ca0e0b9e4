"""LLVM IR of kiln's GEMM: the register micro-kernel and macro-kernel loops (kernel.py),
packing (pack.py), the tile store with its fused epilogue (store.py), the shape-specialised
small kernels (small.py), and the tile types they share (tools.py), on runtime/llvm/toolkit.py."""
