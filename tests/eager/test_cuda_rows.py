"""Eager's row ops on CUDA tensors (eager/backends/cuda/reductions.py): sum, mean, amax,
amin, argmax, argmin, var, softmax and log_softmax each one launch of the row kernels
(runtime/cuda/codegen/rows.py, row length, rows and strides as launch arguments), compared with
the CPU over rows shorter than a warp, between a warp and a block, longer than a block,
empty, and read through views. On a GPU where the driver finds one, else on the
emulated device; launches are counted from the profiler's events and, where emulated,
the driver's own count. Sizes stay small: the emulator runs Python per GPU thread."""
import numpy as np
import pytest

import eager
from eager.backends.cuda import elementwise, reductions
from eager.backends.cuda.elementwise import ElementwiseSpec
from eager.backends.cuda.reductions import RowSpec
from ir import dtypes
from ir.ops import Op
from runtime.cuda import nvptx
from runtime.cuda.current import unless_gpu


@pytest.fixture(autouse=True)
def gpu():
    """The real driver where a GPU is usable, else an emulated device (then yielded)."""
    with unless_gpu(memory=64 << 20) as emulated:
        yield emulated


def launched(gpu, fn, *args) -> tuple:
    """fn(*args) and the names of the kernels it launched."""
    before = gpu.launches if gpu is not None else 0
    with eager.profiler.profile() as prof:
        result = fn(*args)
    names = [e.name.removeprefix("cuda::launch ") for e in prof.events()
             if e.name.startswith("cuda::launch ")]
    if gpu is not None:
        assert gpu.launches - before == len(names)
    return result, names


def same_as_cpu(gpu, fn, x: np.ndarray, view=lambda t: t, kernels=1):
    """fn over view(x) on CUDA equals it on the CPU, in `kernels` launches (None: any
    number); their names."""
    cpu = fn(view(eager.tensor(x)))
    got, names = launched(gpu, fn, view(eager.tensor(x).cuda()))
    assert got.device == eager.device("cuda:0")
    assert (got.shape, got.dtype) == (cpu.shape, cpu.dtype)
    tolerance = 1e-5 if x.dtype == np.float32 else 1e-12 if x.dtype == np.float64 else 0
    np.testing.assert_allclose(got.cpu().numpy(), cpu.numpy(), rtol=tolerance,
                               atol=tolerance)
    assert kernels is None or len(names) == kernels, names
    return names


OPS = {
    "sum": lambda t: t.sum(-1), "mean": lambda t: t.mean(-1, keepdim=True),
    "amax": lambda t: t.amax(-1), "amin": lambda t: t.amin(-1, keepdim=True),
    "argmax": lambda t: t.argmax(-1), "argmin": lambda t: eager.argmin(t, dim=1, keepdim=True),
    "var": lambda t: t.var(-1), "var-biased": lambda t: t.var(-1, correction=0),
    "softmax": lambda t: eager.softmax(t, -1), "log_softmax": lambda t: eager.log_softmax(t, 1),
}
RNG = np.random.default_rng(7)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shape", [(3, 5), (2, 45), (2, 300)],
                         ids=["under-a-warp", "under-a-block", "over-a-block"])
def test_each_row_op_is_one_launch_of_the_row_kernel_and_equals_the_cpu(gpu, name, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    (kernel,) = same_as_cpu(gpu, OPS[name], x)
    assert kernel.startswith(f"kiln_eager_rows_{name.split('-')[0]}_float32")


@pytest.mark.parametrize("name", ["sum", "mean", "var", "softmax", "argmax"])
def test_float64_rows_and_dims_that_merge_into_one_row(gpu, name):
    x = RNG.standard_normal((3, 4, 9))
    fn = OPS[name]
    same_as_cpu(gpu, fn, x)
    if name in ("sum", "mean", "var"):  # the last two dims merge into rows of 36
        reduce = getattr(eager.Tensor, name)
        (kernel,) = same_as_cpu(gpu, lambda t: reduce(t, [1, 2]), x)
        assert kernel.startswith(f"kiln_eager_rows_{name}_float64")


@pytest.mark.parametrize("name", ["sum", "mean", "var", "softmax", "log_softmax"])
def test_empty_rows_and_no_rows(gpu, name):
    fn = OPS[name]
    same_as_cpu(gpu, fn, np.zeros((0, 5), np.float32), kernels=0)
    same_as_cpu(gpu, fn, np.zeros((3, 0), np.float32),
                kernels=0 if "softmax" in name else 1)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "var", "argmax", "sum"])
def test_rows_read_through_views(gpu, name):
    x = RNG.standard_normal((6, 9)).astype(np.float32)
    (kernel,) = same_as_cpu(gpu, OPS[name], x, lambda t: t[1:, 2:8])  # rows 9 apart
    assert kernel.startswith("kiln_eager_rows_")
    (kernel,) = same_as_cpu(gpu, OPS[name], x, lambda t: t.t())  # a strided row
    # a sum down columns reads them together, a thread per output
    assert kernel.startswith("kiln_eager_sum_" if name == "sum" else "kiln_eager_rows_")


def test_reductions_over_dims_that_do_not_merge_take_a_thread_per_output(gpu):
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    for reduce in (lambda t: t.sum([0, 2]), lambda t: t.argmax(),  # (argmax: of a view)
                   lambda t: t.var([0, 2])):
        names = same_as_cpu(gpu, reduce, x, lambda t: t.transpose(0, 2), kernels=None)
        assert not any(name.startswith("kiln_eager_rows_") for name in names)
    (kernel,) = same_as_cpu(gpu, lambda t: t.argmax(), x)  # contiguous: one row
    assert kernel.startswith("kiln_eager_rows_argmax")


def test_integers_keep_a_thread_per_output(gpu):
    x = RNG.integers(-5, 5, (3, 7))
    for reduce in (lambda t: t.sum(-1), lambda t: t.argmax(-1), lambda t: t.amin(-1)):
        (kernel,) = same_as_cpu(gpu, reduce, x)
        assert not kernel.startswith("kiln_eager_rows_")


@pytest.mark.parametrize("kernel", [
    lambda: reductions.row_kernel(RowSpec(Op.LOG_SOFTMAX, dtypes.float64, dtypes.float64,
                                          2, reductions.MAX_THREADS)),
    lambda: reductions.row_kernel(RowSpec(Op.VAR, dtypes.float32, dtypes.float32, 3, 32)),
    lambda: reductions.row_kernel(RowSpec(Op.ARGMAX, dtypes.float32, dtypes.int64, 2, 256)),
    lambda: elementwise.elementwise_kernel(ElementwiseSpec(
        Op.ADD, ((dtypes.float32, False), (dtypes.float32, True)), dtypes.float32,
        dtypes.float32, rank=3, scaled=True)),
], ids=["log_softmax-f64", "var-rank3-warp", "argmax", "add-scaled"])
def test_kernels_sized_by_launch_arguments_assemble_with_ptxas(kernel):
    k = kernel()
    try:
        report = nvptx.ptxas_report(k.ptx("sm_90"), "sm_90")[k.name]
    except nvptx.PtxasMissing as missing:
        pytest.skip(str(missing))
    assert report.registers > 0
    assert (report.spill_stores, report.spill_loads) == (0, 0), report
