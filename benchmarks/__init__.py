"""kiln's benchmark suite: `python -m benchmarks --help`.

registry    the suites, by name, with what each needs to run
contenders  kiln eager/compiled, numpy, PyTorch eager/compiled: which are available here
harness     Case/Impl, the correctness gate, alternating timed rounds
impls       one function written against the PyTorch API, as an Impl per contender
limits      peak FLOP/s (an llvmlite FMA kernel) and copy bandwidth of this machine
report      text tables and the JSON document; plot draws ratio bars (matplotlib)
cli         the command line

The suites: eager_overhead, elementwise, reductions, gemm, train (mlp_train and
transformer_train, checked against train_reference), compile_overhead.

Kept free of imports so that `--threads` can configure BLAS before numpy loads.
"""
