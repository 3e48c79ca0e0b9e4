"""Eager's generated CPU kernels, from runtime/cpu's generators: they take over from the
numpy kernels where an op is large enough to pay for a native call.

    pointwise.py   pointwise ops from their records (one kernel per op, dtypes, layout)
    rows.py        reductions, softmax, log_softmax, layer norm over rows
    windows.py     im2col of floats
    gemm.py        kiln's GEMM under mm and bmm
    optim.py       the optimisers' fused update kernels
    membership.py  isin's scan of a small test set
"""
