"""Fused gemm nodes on the CUDA backend (compiler/backends/cuda/gemm_node.py): the body
read by the native backend's plan, served by runtime/cuda/codegen/gemm.py's kernel with the
store's bias, activation, scale and residual fused. Each kernel made here assembles with
ptxas -arch=sm_90 (skipped, with the reason, where ptxas is missing) and runs on the
host emulator (runtime/cuda/emulator/launch.py) against the function in float64 on eager's CPU
kernels; what the CUDA GEMM cannot serve is refused with the reason."""
import numpy as np
import pytest

import compiler
import eager
from compiler.backends import cuda as cuda_backend
from compiler.backends import native
from ir.ops import Op
from runtime.cuda import nvptx

F = eager.nn.functional


def _tensor(shape, dtype="float32", seed=0):
    return eager.tensor(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _by_columns(shape):
    """A float32 tensor of `shape` whose memory runs down its columns."""
    return eager.tensor(np.ascontiguousarray(_tensor(shape).numpy().T)).t()


def _flat(a: np.ndarray) -> np.ndarray:
    """The memory a kernel pointer at `a`'s first element walks, as a 1-D array."""
    if a.size == 0:
        return np.empty(0, a.dtype)
    extent = 1 + sum((n - 1) * s // a.itemsize for n, s in zip(a.shape, a.strides))
    return np.lib.stride_tricks.as_strided(a, (extent,), (a.itemsize,))


def _gemm_node(fn, *tensors):
    (graph,) = compiler.lower(fn, *tensors, target="cuda").optimized
    (node,) = [n for n in graph.nodes if n.op is Op.FUSED]
    assert node.attr["kind"] == "gemm", graph
    return graph, node


def _emulate(fn, *tensors):
    """fn's one gemm node as a CUDA kernel for these tensors' layouts, assembled by
    ptxas and run on the emulator: (its output, the launch). Each tensor has a shape of
    its own, which finds it among the graph's inputs (ordered by first use)."""
    graph, node = _gemm_node(fn, *tensors)
    by_shape = {tuple(t.shape): t for t in tensors}
    assert len(by_shape) == len(tensors)
    arrays = [by_shape[tuple(v.type.shape)]._np() for v in node.inputs[0]]
    launch = cuda_backend.kernel_for(node, arrays)
    try:
        report = launch.report()
        assert (report.spill_stores, report.spill_loads) == (0, 0), report
    except nvptx.PtxasMissing:
        pass  # the results below still count; the ptxas tests skip with the reason
    (value,) = node.outputs
    out = np.full(value.type.shape, 7, value.type.dtype.np)
    args = launch.gemm.arguments([_flat(a) for a in arrays], _flat(out))
    launch.kernel.emulate(launch.grid, args)
    return out, launch


def _float64(fn, *tensors):
    """fn on eager's CPU kernels in float64: the reference."""
    return fn(*[eager.tensor(t.numpy().astype(np.float64)) for t in tensors]).numpy()


def _close(got, want, dtype):
    tolerance = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def _relu_linear(x, w, b):
    return eager.relu(x @ w + b)


CASES = {  # name: (function, its tensors' shapes, the kernel's name must hold)
    "bare product": (lambda x, w: x @ w, [(37, 19), (19, 45)], "n_n_b0_id_nor"),
    "relu(x @ w + b)": (_relu_linear, [(37, 19), (19, 45), (45,)], "n_n_bcol_relu_nor"),
    "linear, w read through its transpose": (
        lambda x, w, b: F.gelu(F.linear(x, w, b)), [(37, 19), (45, 19), (45,)],
        "n_t_bcol_gelu_nor"),
    "residual": (lambda x, w, r: (x @ w).tanh() + r, [(37, 19), (19, 45), (37, 45)],
                 "n_n_b0_tanh_r"),
    "one row": (lambda x, w, b: F.silu(x @ w + b), [(1, 7), (7, 5), (5,)], "bcol_silu"),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(CASES))
def test_gemm_nodes_emulated_match_float64(name, dtype):
    fn, shapes, kernel_name = CASES[name]
    tensors = [_tensor(shape, dtype, seed) for seed, shape in enumerate(shapes)]
    got, launch = _emulate(fn, *tensors)
    assert launch.kind == "gemm" and kernel_name in launch.name
    assert launch.name.startswith(f"kiln_gemm_{dtype}")
    _close(got, _float64(fn, *tensors), dtype)


def test_a_transposed_view_is_read_in_place_with_the_flag_flipped():
    x = _by_columns((37, 19))
    w, b = _tensor((19, 45), seed=1), _tensor((45,), seed=2)
    got, launch = _emulate(_relu_linear, x, w, b)
    assert "_t_n_" in launch.name and launch.gemm.a[1] == 37
    _close(got, _float64(_relu_linear, x, w, b), "float32")


def test_an_offset_view_with_padded_rows_loads_element_by_element():
    x = _tensor((37, 20))[:, 1:]  # rows of 20 floats from the second: not 16-byte aligned
    w, b = _tensor((19, 45), seed=1), _tensor((45,), seed=2)
    got, launch = _emulate(_relu_linear, x, w, b)
    assert launch.gemm.a[1] == 20 and not launch.gemm.request.aligned
    _close(got, _float64(_relu_linear, x, w, b), "float32")


def test_aligned_operands_take_16_byte_vector_loads():
    x, w, b = _tensor((36, 20)), _tensor((20, 44), seed=1), _tensor((44,), seed=2)
    got, launch = _emulate(_relu_linear, x, w, b)
    assert launch.gemm.request.aligned and "_v_" in launch.name
    _close(got, _float64(_relu_linear, x, w, b), "float32")


def test_large_outputs_take_the_default_tiles_and_small_ones_the_small_tiles():
    small = cuda_backend.kernel_for(_gemm_node(_relu_linear, _tensor((128, 8)),
                                               _tensor((8, 128)), _tensor((128,)))[1])
    large = cuda_backend.kernel_for(_gemm_node(_relu_linear, _tensor((129, 8)),
                                               _tensor((8, 128)), _tensor((128,)))[1])
    assert small.block == (64, 1, 1) and small.grid == (4, 4, 1)
    assert large.block == (256, 1, 1) and large.grid == (1, 2, 1)


def test_lower_for_cuda_shows_the_gemm_kernel_with_its_fused_epilogue():
    x, w, b = _tensor((64, 32)), _tensor((32, 48)), _tensor((48,))
    lowered = compiler.lower(_relu_linear, x, w, b, target="cuda")
    assert lowered.not_cuda == {}
    (launch,) = lowered.cuda_kernels
    assert launch.kind == "gemm" and launch.gemm.request.epilogue.activation == "relu"
    assert [a.name for a in launch.kernel.function.args] == \
        list(launch.gemm.request.arguments())
    assert "fma.rn.f32" in lowered.ptx[launch.name]
    if lowered.ptxas_missing:
        pytest.skip(lowered.ptxas_missing)
    report = lowered.ptxas[launch.name]
    assert (report.spill_stores, report.spill_loads) == (0, 0)
    assert report.shared_bytes == 2 * 8 * (32 + 32) * 4  # two slices of A and B
    assert f"CUDA kernel {launch.name}" in str(lowered)


REFUSED = {  # name: (function, its tensors, words of the reason)
    "a prologue": (lambda x, w: (x * 2) @ w, lambda: [_tensor((5, 4)), _tensor((4, 3))],
                   "prologue before the product (mul, scalar)"),
    "an epilogue past the store": (
        lambda x, w: (x @ w).exp() * 3, lambda: [_tensor((5, 4)), _tensor((4, 3))],
        "past what the GEMM's store fuses (exp, mul, scalar)"),
    "a residual by columns": (
        lambda x, w, r: x @ w + r, lambda: [_tensor((5, 4)), _tensor((4, 3)),
                                            _by_columns((5, 3))],
        "residual laid out by columns"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_cuda_gemm_cannot_serve_is_refused_with_the_reason(name):
    fn, tensors, reason = REFUSED[name]
    tensors = tensors()
    lowered = compiler.lower(fn, *tensors, target="cuda")
    assert [launch.kind for launch in lowered.cuda_kernels] == []
    (why,) = lowered.not_cuda.values()
    assert reason in why


def test_an_operand_with_neither_rows_nor_columns_contiguous_is_refused():
    x = _tensor((5, 8))[:, ::2]
    graph, node = _gemm_node(lambda a, w: a @ w, x, _tensor((4, 3)))
    with pytest.raises(cuda_backend.CannotLower, match="neither rows nor columns"):
        cuda_backend.kernel_for(node, [x._np(), _tensor((4, 3))._np()])


def test_batched_products_stay_out_of_cuda_kernels_and_their_epilogue_still_fuses():
    a, b = _tensor((2, 3, 4)), _tensor((2, 4, 5), seed=1)
    lowered = compiler.lower(lambda x, y: (x @ y).relu(), a, b, target="cuda")
    (graph,) = lowered.optimized
    assert [n.op for n in graph.nodes] == [Op.BMM, Op.FUSED]
    assert [launch.kind for launch in lowered.cuda_kernels] == ["elementwise"]
    assert native.emits(graph.nodes[0]) and not cuda_backend.emits(graph.nodes[0])
