"""eager.compile on CUDA tensors (compiler/backends/cuda/run.py): the graph is captured as
on the CPU, optimised with the CUDA backend's `emits`, and each fused node runs as its
CUDA kernel (loaded once, launched on the operands' device memory), the rest through
the interpreter on eager's CUDA kernels. On a GPU where the driver finds one, else on
runtime/cuda/emulated.py's emulated device, so every check runs on every machine; the
emulated device counts its launches and loaded modules, which tells kernels from the
interpreter. Results are compared with the same function on eager's CPU kernels."""
import numpy as np
import pytest

import eager
from compiler.backends.cuda.run import CudaNode
from compiler.backends.native.pointwise import PointwiseNode
from runtime.cuda.current import unless_gpu

F = eager.nn.functional


@pytest.fixture(autouse=True)
def emulated():
    """The real driver where a GPU is usable (None), else an emulated device."""
    with unless_gpu(memory=64 << 20) as device:
        yield device


def _launches(emulated) -> int | None:
    return None if emulated is None else emulated.launches


def _tensor(shape, seed=0, dtype="float32"):
    return eager.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _same(got, want, tolerance=1e-5):
    assert got.device == eager.device("cuda:0")
    assert got.dtype is want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=tolerance,
                               atol=tolerance)


def _nodes(f) -> list:
    """The CudaNodes of every region f compiled, in order."""
    return [k for run in f.region_cache.values() for k in run.kernels.values()]


def _chain(x, y):
    return ((x * y + 1.5).sigmoid() - y).abs()


def test_an_elementwise_chain_runs_as_one_cuda_kernel_and_equals_eager_cpu(emulated):
    x, y = _tensor((5, 7)), _tensor((7,), seed=1)
    f = eager.compile(_chain)
    before = _launches(emulated)
    _same(f(x.cuda(), y.cuda()), _chain(x, y))
    (node,) = _nodes(f)
    assert isinstance(node, CudaNode) and node.kind == "elementwise"
    (launch,) = node.launches.values()
    assert launch.kind == "elementwise"
    if emulated is not None:
        assert emulated.launches == before + 1


def test_a_replayed_call_launches_the_kernel_again_without_loading_it_again(emulated):
    x, y = _tensor((5, 7)), _tensor((7,), seed=1)
    f = eager.compile(_chain)
    f(x.cuda(), y.cuda())
    modules = None if emulated is None else emulated.resources()["modules"]
    z = _tensor((5, 7), seed=2)
    _same(f(z.cuda(), y.cuda()), _chain(z, y))
    (entry,) = f.entries.values()
    assert entry.mode == "replay" and entry.calls == 2
    if emulated is not None:
        assert emulated.resources()["modules"] == modules


def test_softmax_rows_run_as_one_row_kernel(emulated):
    x = _tensor((4, 40))
    f = eager.compile(lambda t: eager.softmax(t * 2, -1))
    _same(f(x.cuda()), eager.softmax(x * 2, -1))
    (node,) = _nodes(f)
    assert [launch.kind for launch in node.launches.values()] == ["reduction"]


def test_linear_and_relu_run_as_one_gemm_kernel_with_its_epilogue(emulated):
    x, w, b = _tensor((5, 8)), _tensor((6, 8), seed=1), _tensor((6,), seed=2)

    def linear_relu(x, w, b):
        return F.linear(x, w, b).relu()

    f = eager.compile(linear_relu)
    before = _launches(emulated)
    _same(f(x.cuda(), w.cuda(), b.cuda()), linear_relu(x, w, b))
    (node,) = _nodes(f)
    (launch,) = node.launches.values()
    assert launch.kind == "gemm" and launch.gemm.request.epilogue.activation == "relu"
    assert launch.gemm.request.trans_b  # w.t() read in place
    if emulated is not None:
        assert emulated.launches == before + 1


def test_float64_and_a_transposed_view_get_a_kernel_for_their_layout(emulated):
    x = _tensor((6, 5), dtype="float64")
    w, b = _tensor((6, 4), seed=1, dtype="float64"), _tensor((4,), seed=2, dtype="float64")

    def fn(x, w, b):
        return eager.tanh(x @ w + b)

    f = eager.compile(fn)
    _same(f(x.cuda().t(), w.cuda(), b.cuda()), fn(x.t(), w, b), 1e-12)
    (node,) = _nodes(f)
    (launch,) = node.launches.values()
    assert launch.gemm.request.trans_a and launch.name.startswith("kiln_gemm_float64")


def test_a_node_without_a_cuda_kernel_runs_on_eager_cuda_ops(emulated):
    x, w = _tensor((5, 4)), _tensor((4, 3), seed=1)
    f = eager.compile(lambda a, b: (a.exp() @ b).relu())  # a prologue
    _same(f(x.cuda(), w.cuda()), (x.exp() @ w).relu())
    assert _nodes(f) == []
    assert "prologue" in f.explain() and "0 as CUDA kernels" in f.explain()


def test_a_new_shape_captures_again_and_still_runs_on_the_device(emulated):
    """The second shape is a new capture, whose graph and the first's make one graph with
    a symbolic size, which CUDA kernels (like native ones) do not take: from the second
    shape on, eager's CUDA ops run the graph, one kernel per op."""
    f = eager.compile(_chain)
    launched = []
    for shape in [(5, 7), (3, 7), (2, 7)]:
        x, y = _tensor(shape), _tensor((7,), seed=1)
        before = _launches(emulated)
        _same(f(x.cuda(), y.cuda()), _chain(x, y))
        launched.append(None if emulated is None else emulated.launches - before)
    assert f.history[0].startswith("entry 2: args[0]: Tensor shape (5, 7)")
    assert "became symbolic" in f.history[1]
    assert [len(node.launches) for node in _nodes(f)] == [1]
    if emulated is not None:
        assert launched == [1, 5, 5]  # mul, add, sigmoid, sub, abs


def test_cpu_and_cuda_tensors_in_one_op_raise_naming_the_devices():
    f = eager.compile(_chain)
    with pytest.raises(RuntimeError, match="cuda:0 and cpu"):
        f(_tensor((5, 7)).cuda(), _tensor((7,), seed=1))


def test_cpu_and_cuda_inputs_of_one_graph_raise_naming_the_devices():
    f = eager.compile(lambda a, b: (a * 2, b + 1))
    with pytest.raises(RuntimeError, match=r"several devices \(cpu, cuda:0\)"):
        f(_tensor((3,)), _tensor((3,)).cuda())


def test_cpu_inputs_still_run_natively():
    x, y = _tensor((5, 7)), _tensor((7,), seed=1)
    f = eager.compile(_chain)
    got = f(x, y)
    assert got.device == eager.device("cpu")
    np.testing.assert_allclose(got.numpy(), _chain(x, y).numpy(), rtol=1e-5, atol=1e-6)
    (run,) = f.region_cache.values()
    assert [type(k) for k in run.kernels.values()] == [PointwiseNode]


def test_aligned_operands_take_the_gemms_vector_loads_on_the_device(emulated):
    x, w, b = _tensor((4, 8)), _tensor((8, 4), seed=1), _tensor((4,), seed=2)

    def fn(x, w, b):
        return F.gelu(x @ w + b)

    f = eager.compile(fn)
    _same(f(x.cuda(), w.cuda(), b.cuda()), fn(x, w, b))
    (node,) = _nodes(f)
    (launch,) = node.launches.values()
    assert launch.gemm.request.aligned and "_v_" in launch.name


_PTX_BEFORE_THE_DEVICE = """
import numpy as np, eager
from eager.backends.cuda.elementwise import ElementwiseSpec, elementwise_kernel
from ir import dtypes
from ir.ops import Op
from runtime.cuda import current
from runtime.cuda.emulated import EmulatedDriver
kernel = elementwise_kernel(ElementwiseSpec(Op.NEG, ((dtypes.float32, False),),
                                            dtypes.float32, dtypes.float32))
ptx = kernel.ptx()  # made before any emulated device: nothing was recorded then
with current.use_driver(EmulatedDriver()):
    x = eager.tensor([1.0, -2.0, 3.0], device="cuda")
    print((-x).cpu().tolist())
"""


def test_a_kernel_whose_ptx_was_made_before_the_emulated_device_still_runs_on_it():
    """CudaKernel keeps its PTX; the emulated device must still find the module behind
    it (it failed when a test had asked for the PTX before a device was made)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "KILN_CUDA"}
    done = subprocess.run([sys.executable, "-c", _PTX_BEFORE_THE_DEVICE], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[-1.0, 2.0, -3.0]"
