"""Code generation: LLVM IR only (no numpy arrays, no threads): pointwise.py builds the
elementwise and row kernels, gather.py their gathered loads, values.py one op's values in
lanes, vmath.py the vectorised math functions. The GEMM's emitters are in
compiler/gemm/ir."""
