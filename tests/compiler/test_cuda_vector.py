"""The vector elementwise kernels (runtime/cuda/codegen/kernel_ir.py's CudaSpec.vector): 16-byte
ld.global.v4 / v2 loads and stores where every operand walks the elements contiguously
(or is one element read by all) and every address is 16-byte aligned, chosen per call by
compiled graphs (backends/cuda/run.py) and eager (eager/backends/cuda/pointwise.py); everything
else takes the strided scalar kernel. Results on a GPU where the driver finds one, else
on the emulated device (which faults on a misaligned vector access), equal the CPU's;
which kernel ran is read from its name (the profiler's launch events, the compiled
node's launches) and the emulated driver's launch count."""
import re

import numpy as np
import pytest

import compiler
import eager
from runtime.cpu import kernel_ir as K
from runtime.cuda.codegen.kernel_ir import CudaSpec
from eager.backends.cuda.elementwise import ElementwiseSpec, elementwise_kernel, operand
from ir import dtypes
from ir.ops import Op
from runtime.cuda import driver as runtime_cuda
from runtime.cuda import nvptx
from runtime.cuda.current import unless_gpu

SIZES = (0, 1, 3, 5, 4099)
DTYPES = ("float32", "float64", "int32", "bool")
# LLVM 22 names the loads' type by width (b32/b64); older releases wrote f32/f64/s32
VECTOR_LOAD = {"float32": r"ld\.global(\.nc)?\.v4\.(f32|b32)",
               "float64": r"ld\.global(\.nc)?\.v2\.(f64|b64)",
               "int32": r"ld\.global(\.nc)?\.v4\.(s32|u32|b32)"}
VECTOR_STORE = {"float32": r"st\.global\.v4\.(f32|b32)",
                "float64": r"st\.global\.v2\.(f64|b64)",
                "int32": r"st\.global\.v4\.(s32|u32|b32)"}


@pytest.fixture(autouse=True)
def emulated():
    """The real driver where a GPU is usable (None), else an emulated device."""
    with unless_gpu(memory=64 << 20) as device:
        yield device


def _array(n: int, dtype: str, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).integers(-9, 9, n)
    return (values > 0) if dtype == "bool" else values.astype(dtype)


def _op(x, y):
    """One elementwise op that every dtype here has."""
    return eager.logical_and(x, y) if x.dtype is dtypes.bool_ else x * y + x


def _launched(emulated, fn, *args) -> tuple:
    """fn(*args) and the names of the kernels it launched (profiler events, checked
    against the emulated driver's count)."""
    before = emulated.launches if emulated is not None else 0
    with eager.profiler.profile() as prof:
        result = fn(*args)
    names = [e.name.removeprefix("cuda::launch ") for e in prof.events()
             if e.name.startswith("cuda::launch ")]
    if emulated is not None:
        assert emulated.launches - before == len(names)
    return result, names


def _report(kernel, name):
    try:
        report = nvptx.ptxas_report(kernel.ptx(), "sm_90")[name]
    except nvptx.PtxasMissing as missing:
        pytest.skip(str(missing))
    assert (report.spill_stores, report.spill_loads) == (0, 0), report
    return report


# the PTX ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_a_compiled_graphs_contiguous_kernel_loads_and_stores_16_byte_vectors(dtype):
    x = eager.tensor(_array(4099, dtype))
    (launch,) = compiler.lower(lambda t: t * t + t, x, target="cuda").cuda_kernels
    assert "_vector_" in launch.name
    assert launch.grid == (-(-4099 // (16 // x.dtype.itemsize) // 256), 1, 1)
    ptx = launch.ptx()
    assert re.search(VECTOR_LOAD[dtype], ptx) and re.search(VECTOR_STORE[dtype], ptx)
    _report(launch.kernel, launch.name)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_eagers_vector_variant_loads_and_stores_16_byte_vectors(dtype):
    dt = dtypes.from_numpy(np.dtype(dtype))
    spec = ElementwiseSpec(Op.ADD, ((dt, False), (dt, False)), dt, dt, rank=1,
                           vector=(1, 1, 1))
    kernel = elementwise_kernel(spec)
    assert [a.name for a in kernel.function.args] == ["in0", "in1", "out0", "size0"]
    assert re.search(VECTOR_LOAD[dtype], kernel.ptx())
    assert re.search(VECTOR_STORE[dtype], kernel.ptx())
    _report(kernel, kernel.name)


def test_a_strided_layout_keeps_the_scalar_kernel():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    transposed = eager.tensor(np.ascontiguousarray(a.T)).t()
    (launch,) = compiler.lower(lambda t: t * 2, transposed, target="cuda").cuda_kernels
    assert "_vector_" not in launch.name and "<4 x" not in launch.llvm_ir
    assert not re.search(r"\.v[24]\.", launch.ptx())


def test_a_vector_spec_refuses_dims_that_are_not_one_contiguous_walk():
    kernel = K.KernelSpec("k", "elementwise", (operand("in0", dtypes.float32),), (),
                          (operand("out", dtypes.float32),), (), frozenset(), ())
    CudaSpec(kernel, (), (8, (1, 1)), vector=(1, 1))
    CudaSpec(kernel, rank=1, vector=(0, 1))
    for bad in (dict(outer=((2, (8, 8)),), inner=(8, (1, 1)), vector=(1, 1)),
                dict(inner=(8, (2, 1)), vector=(2, 1)),
                dict(rank=1, vector=(1, 0)),
                dict(rank=2, vector=(1, 1))):
        with pytest.raises(ValueError, match="vector kernel"):
            CudaSpec(kernel, **bad)


# compiled graphs ----------------------------------------------------------------------
def _compiled_kernels(f) -> list:
    return [launch.name for run in f.region_cache.values() for node in run.kernels.values()
            for launch in node.launches.values()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_a_compiled_graph_over_aligned_contiguous_tensors_runs_the_vector_kernel(
        emulated, dtype, n):
    a, b = _array(n, dtype), _array(n, dtype, seed=1)
    f = eager.compile(_op)
    got, names = _launched(emulated, f, eager.tensor(a).cuda(), eager.tensor(b).cuda())
    np.testing.assert_array_equal(got.cpu().numpy(), _op(eager.tensor(a),
                                                         eager.tensor(b)).numpy())
    (kernel,) = _compiled_kernels(f)
    assert "_vector_" in kernel
    assert names == ([] if n == 0 else [kernel])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_compiled_graph_over_a_slice_from_element_1_runs_the_scalar_kernel(
        emulated, dtype):
    a, b = _array(4100, dtype), _array(4099, dtype, seed=1)
    f = eager.compile(_op)
    x, y = eager.tensor(a).cuda()[1:], eager.tensor(b).cuda()
    got, names = _launched(emulated, f, x, y)
    np.testing.assert_array_equal(got.cpu().numpy(),
                                  _op(eager.tensor(a)[1:], eager.tensor(b)).numpy())
    assert len(names) == 1 and "_vector_" not in names[0]
    _, again = _launched(emulated, f, eager.tensor(a).cuda()[:4099], y)  # aligned again
    assert len(again) == 1 and "_vector_" in again[0]


def test_a_compiled_graph_reads_a_one_element_tensor_in_every_lane(emulated):
    a, b = _array(4099, "float32"), _array(1, "float32", seed=1)
    f = eager.compile(_op)
    got, names = _launched(emulated, f, eager.tensor(a).cuda(), eager.tensor(b).cuda())
    np.testing.assert_array_equal(got.cpu().numpy(),
                                  _op(eager.tensor(a), eager.tensor(b)).numpy())
    assert len(names) == 1 and "_vector_" in names[0]


def test_a_compiled_graph_broadcasting_a_row_runs_the_scalar_kernel(emulated):
    a, b = _array(5 * 7, "float32").reshape(5, 7), _array(7, "float32", seed=1)
    f = eager.compile(_op)
    got, names = _launched(emulated, f, eager.tensor(a).cuda(), eager.tensor(b).cuda())
    np.testing.assert_array_equal(got.cpu().numpy(),
                                  _op(eager.tensor(a), eager.tensor(b)).numpy())
    assert len(names) == 1 and "_vector_" not in names[0]


# eager --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
def test_eager_over_aligned_contiguous_tensors_runs_the_vector_kernel(emulated, dtype, n):
    a, b = _array(n, dtype), _array(n, dtype, seed=1)
    got, names = _launched(emulated, lambda x, y: eager.logical_and(x, y)
                           if dtype == "bool" else x + y,
                           eager.tensor(a).cuda(), eager.tensor(b).cuda())
    want = (a & b) if dtype == "bool" else a + b
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    if n == 0:
        assert names == []
    elif n == 1:  # no dims left to walk: the strided kernel of rank 0
        assert len(names) == 1 and "_vector_" not in names[0]
    else:
        assert len(names) == 1 and "_vector_" in names[0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_eager_over_a_slice_from_element_1_runs_the_scalar_kernel(emulated, dtype):
    a = _array(4100, dtype)
    x = eager.tensor(a).cuda()
    got, names = _launched(emulated, lambda t: t[1:] * 3, x)
    np.testing.assert_array_equal(got.cpu().numpy(), a[1:] * 3)
    assert len(names) == 1 and "_vector_" not in names[0]
    got, names = _launched(emulated, lambda t: t[4:] * 3, x)  # 16 bytes in: aligned
    np.testing.assert_array_equal(got.cpu().numpy(), a[4:] * 3)
    assert len(names) == 1 and "_vector_" in names[0]


def test_eager_reads_numbers_and_one_element_tensors_in_every_lane(emulated):
    a = _array(4099, "float32")
    x, one = eager.tensor(a).cuda(), eager.tensor(np.float32([2.5])).cuda()
    got, names = _launched(emulated, lambda t, s: (t + 1.5) * s, x, one)
    np.testing.assert_array_equal(got.cpu().numpy(), (a + np.float32(1.5)) * np.float32(2.5))
    assert len(names) == 2 and all("_vector_" in name for name in names)


def test_eager_writes_a_strided_output_with_the_scalar_kernel(emulated):
    a = _array(64, "float32").reshape(8, 8)
    out = eager.tensor(np.zeros((8, 8), np.float32)).cuda()
    _, names = _launched(emulated, lambda o, t: o.t().copy_(t), out, eager.tensor(a).cuda())
    np.testing.assert_array_equal(out.cpu().numpy(), a.T)
    assert len(names) == 1 and "_vector_" not in names[0]


def test_the_vector_kernel_on_a_misaligned_pointer_faults_on_the_emulated_device(emulated):
    """Why the launchers check: the emulated device checks every vector access's
    alignment, so these tests would catch a vector kernel taken for a misaligned view."""
    if emulated is None:
        pytest.skip("a misaligned launch on a real GPU would spoil its context")
    from eager.backends.cuda import device
    f32 = dtypes.float32
    kernel = elementwise_kernel(ElementwiseSpec(Op.ADD, ((f32, False), (f32, False)), f32,
                                                f32, rank=1, vector=(1, 1, 1)))
    x = eager.tensor(_array(9, "float32")).cuda()
    out = eager.tensor(np.zeros(8, np.float32)).cuda()
    with pytest.raises(runtime_cuda.CudaError, match="misaligned"):
        device.launch(kernel, (1, 1, 1), [x[1:], x[1:], out, 8], out.device)
