"""Code generation: LLVM IR only (no numpy arrays, no threads): pointwise.py builds the
elementwise and row kernels, accumulators.py their reductions, gather.py their gathered
loads, values.py one op's values in lanes, vmath.py the vectorised math functions, all on
runtime/llvm/toolkit.py (the IR toolkit). The GEMM's emitters are in runtime/cpu/gemm/ir."""
