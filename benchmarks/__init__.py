"""kiln's benchmark suite: `python -m benchmarks --help`.

registry    the suites, by name, with what each needs to run
contenders  kiln eager, numpy, PyTorch: which are available here
harness     Case/Impl, the correctness gate, alternating timed rounds
limits      peak FLOP/s (an llvmlite FMA kernel) and copy bandwidth of this machine
report      text tables and the JSON document; plot draws ratio bars (matplotlib)
cli         the command line

Kept free of imports so that `--threads` can configure BLAS before numpy loads.
"""
