"""A compiled region's native kernels are profiler events of their own ("kernel"
category, inside the region's "region" event) with their work: 2MNK flops for a
product, bytes of their inputs and outputs; benchmarks/profile_step.py reads them
against the limits."""
import numpy as np

import eager
from eager.profiler import profile
from runtime.llvm.compile_service import wait_for_kernels


def _profiled(fn, *args):
    for _ in range(2):
        fn(*args)
        wait_for_kernels()
    with profile() as prof:
        fn(*args)
        fn(*args)
    return prof.events()


def test_each_native_kernel_is_an_event_with_its_flops_and_bytes_inside_its_region():
    w, b = eager.randn(64, 32), eager.randn(32)
    fn = eager.compile(lambda x: (x @ w + b).relu().sum(-1).exp())
    x = eager.randn(128, 64)
    events = _profiled(fn, x)
    kernels = [e for e in events if e.category == "kernel"]
    gemm = [e for e in kernels if e.name.startswith("kiln::gemm[mm")]
    assert len(gemm) == 2  # one a call
    assert gemm[0].flops == 2 * 128 * 32 * 64 + 128 * 32  # the product, its bias add
    assert gemm[0].bytes == 4 * (128 * 64 + 64 * 32 + 32 + 128 * 32)
    reduction = [e for e in kernels if e.name.startswith("kiln::reduction")]
    assert reduction and reduction[0].bytes == 4 * (128 * 32 + 128)
    for e in kernels:  # inside a region's event, as long as it at most
        assert e.cpu_parent is not None and e.cpu_parent.category == "region"
        assert e.cpu_time_total <= e.cpu_parent.cpu_time_total


def test_the_step_report_sums_each_kernel_a_step_and_the_regions_once():
    from benchmarks.profile_step import kernel_lines
    w = eager.randn(16, 16)
    fn = eager.compile(lambda x: (x @ w).tanh() @ w)
    events = _profiled(fn, eager.randn(8, 16))
    lines, in_regions, in_kernels = kernel_lines(events, steps=2)
    gemms = [ln for ln in lines if ln.name.startswith("kiln::gemm")]
    assert [ln.calls for ln in gemms] == [1, 1]  # a step: (x @ w).tanh(), then @ w
    assert sum(ln.flops for ln in gemms) == 2 * (2 * 8 * 16 * 16) + 8 * 16  # and the tanh
    regions = [e for e in events if e.category == "region"]
    assert np.isclose(in_regions, sum(e.cpu_time_total for e in regions) / 1e6 / 2)
    assert 0 < in_kernels <= in_regions
