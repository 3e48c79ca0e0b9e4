"""Every op of the vocabulary that has a CPU kernel has a CUDA kernel, or is on NOT_ON_CUDA
with the reason. Driven by the eager op tables (each case's first non-empty sample, in
float32 where the case takes it), run on CUDA tensors and compared with the CPU, so an op
added to the vocabulary is covered here too, and an op that gains a CUDA kernel must leave
the list. On a GPU where the driver finds one, else on the emulated device.

Dtypes: kiln's CUDA kernels compute in bool, int32, int64, float32 and float64;
elementwise ops, copies and casts in float16, bfloat16, uint8, int8 and int16 too, and
the other kernels that compute widen those (eager/backends/cuda/widened.py). What stays
refused in float16 raises NotImplementedError naming float16 and the CUDA backend.
"""
import numpy as np
import pytest

import eager
import op_table
import op_table_shape
import test_cuda_tensors
from eager.dispatcher import ATEN, DispatchKey
from ir.ops import Op
from ir.records import RECORDS
from op_cases import Maker, convert, flat_outputs

gpu = test_cuda_tensors.gpu  # the autouse fixture: a GPU, else an emulated device

def _why_not_on_cuda(op: Op) -> str:
    pointwise = RECORDS[RECORDS[op].inplace_of or op].pointwise
    if pointwise is None:
        return ""
    if pointwise.emit is None:
        return ("its pointwise record has no emitter (numpy only: kiln's math library lacks "
                "the function), so no generated CUDA kernel")
    return pointwise.not_on_cuda


NOT_ON_CUDA: dict = {op: _why_not_on_cuda(op) for op in RECORDS if _why_not_on_cuda(op)}
"""Ops with a CPU kernel and no CUDA kernel, with the reason, derived from the records
(nonzero's CUDA kernel finds its indices on the host, see eager/backends/cuda/indexing.py)."""

CASES = op_table.CASES + op_table_shape.CASES


def _first_sample(case, dtype=None):
    dtype = dtype or ("float32" if "float32" in case.dtypes else case.dtypes[0])
    for sample in case.samples(Maker(dtype)):
        arrays = []
        convert((sample.args, tuple(sample.kwargs.values())), lambda a: arrays.append(a) or a)
        if arrays and all(a.size for a in arrays):
            return sample
    return None


def _call(case, sample, device):
    def to(a):
        return eager.tensor(np.array(a), device=device)
    kwargs = {k: convert(v, to) for k, v in sample.kwargs.items()}
    if isinstance(kwargs.get("dtype"), str):  # samples name dtypes
        kwargs["dtype"] = getattr(eager, kwargs["dtype"])
    return case.fn(eager, *convert(sample.args, to), **kwargs)


def _ops_with_cpu_kernels() -> set:
    eager.ones(1, device="cuda")  # loads the CUDA backend, which registers its kernels
    return {op for op in Op if DispatchKey.CPU in ATEN[op].kernels}


def test_every_op_with_a_cpu_kernel_has_a_cuda_kernel_or_is_listed():
    for op in _ops_with_cpu_kernels():
        registered = DispatchKey.CUDA in ATEN[op].kernels
        assert registered != (op in NOT_ON_CUDA), \
            f"{op.name}: {'take it off NOT_ON_CUDA' if registered else 'no CUDA kernel'}"


def test_the_tables_cover_every_op_with_a_cpu_kernel():
    covered = {op for case in CASES if _first_sample(case) is not None for op in case.ops}
    assert _ops_with_cpu_kernels() - covered == set()


@pytest.mark.parametrize("case", [c for c in CASES if _first_sample(c) is not None],
                         ids=lambda c: c.name)
def test_each_case_runs_on_cuda_as_on_the_cpu(case):
    sample = _first_sample(case)
    if any(op in NOT_ON_CUDA for op in case.ops):
        with pytest.raises(NotImplementedError, match="'CUDA' backend"):
            _call(case, sample, "cuda")
        return
    expected = flat_outputs(_call(case, sample, "cpu"))
    got = flat_outputs(_call(case, sample, "cuda"))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.is_cuda and g.dtype is e.dtype and g.shape == e.shape, case.name
        np.testing.assert_allclose(g.detach().cpu().numpy(), e.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, equal_nan=True, err_msg=case.name)


ROW_SUM_IN_FLOAT32 = {"log_softmax"}
"""Cases CUDA computes as PyTorch's CUDA kernel does, keeping a row's sum and its log in
float32, where the CPU (as PyTorch's CPU kernel) rounds them to float16 over the last dim."""
ADDS_IN_FLOAT32 = {"col2im", "index_put_accumulate"}
"""Cases CUDA sums in float32 and rounds once, as PyTorch's CUDA kernels (col2im's
accumulator, index_put's sorted runs), where the CPU rounds each add to float16 as
PyTorch's CPU kernels: compared with the CPU's float32 result rounded once."""


def _widened(sample):
    """The sample with its float16 arrays as float32."""
    def wide(a):
        return a.astype(np.float32) if a.dtype == np.float16 else a
    return type(sample)(convert(sample.args, wide),
                        {k: convert(v, wide) for k, v in sample.kwargs.items()})


@pytest.mark.parametrize("case", [c for c in CASES if "float16" in c.dtypes and
                                  _first_sample(c, "float16") is not None],
                         ids=lambda c: c.name)
def test_float16_on_cuda_equals_the_cpu_or_raises_naming_it(case):
    """Never a silent computation in another dtype or on the host."""
    sample = _first_sample(case, "float16")
    expected = flat_outputs(_call(case, sample, "cpu"))
    if any(op in NOT_ON_CUDA for op in case.ops):
        with pytest.raises(NotImplementedError, match="'CUDA' backend"):
            _call(case, sample, "cuda")
        return
    try:
        got = flat_outputs(_call(case, sample, "cuda"))
    except NotImplementedError as e:
        assert "'CUDA' backend: kiln's CUDA kernels have no float16" in str(e)
        return
    if case.name in ADDS_IN_FLOAT32:
        expected = [e.to(eager.float16) for e in
                    flat_outputs(_call(case, _widened(sample), "cpu"))]
    for g, e in zip(got, expected):
        assert g.is_cuda and g.dtype is e.dtype
        g, e = g.detach().cpu().numpy(), e.detach().numpy()
        if case.name in ROW_SUM_IN_FLOAT32:  # a unit of the row's log-sum apart
            unit = float(np.abs(e.astype(np.float32)).max(initial=0)) * 2.0 ** -9
            np.testing.assert_allclose(g.astype(np.float32), e.astype(np.float32), rtol=0,
                                       atol=unit)
        else:
            np.testing.assert_array_equal(g, e)
