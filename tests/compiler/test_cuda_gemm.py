"""runtime/cuda/codegen/gemm.py: the tiled CUDA SGEMM/DGEMM. Every kernel generated
here assembles with ptxas -arch=sm_90 with no spills (skipped, with the reason, where
ptxas is not installed); results come from running the kernels' IR on the host
(runtime/cuda/emulator/launch.py), checked against numpy float64 within the CPU GEMM's error
bound (runtime/cpu/gemm/api.py):

    |out - exact| <= (K + 8) * eps * (1.2 * |scale| * P + |exact| + |residual|)
    P = |alpha| * |op(A)| @ |op(B)| + |beta| * |C| + |bias|

Every matrix lies in a flat buffer that ends at its last element, so any read or write
past a matrix is out of bounds for the emulator (EmulationError); out's buffer starts
full of a sentinel that must survive between its rows.
"""
import llvmlite.ir as ir
import numpy as np
import pytest

from runtime.cuda.codegen.gemm import (DEFAULT_TILES, SMALL_TILES, CudaGemmRequest,
                                       CudaGemmTiles, gemm_kernel)
from runtime.cpu.gemm.api import activation_reference
from ir.records import activations
from runtime.cpu.gemm.emit.kernel import EpilogueSpec

ACTIVATIONS = tuple(activations())
from runtime.cuda import nvptx

DTYPES = ["float32", "float64"]
TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]
EPILOGUES = [EpilogueSpec(bias="col"), EpilogueSpec(bias="row"),
             *[EpilogueSpec(activation=name) for name in ACTIVATIONS],
             EpilogueSpec(residual=True), EpilogueSpec("col", "gelu", True)]


def _report(kernel):
    try:
        return nvptx.ptxas_report(kernel.ptx())[kernel.name]
    except nvptx.PtxasMissing as missing:
        pytest.skip(str(missing))


def _shared_bytes(request):
    t = request.tiles
    itemsize = 4 if request.dtype == "float32" else 8
    return 2 * t.block_k * (t.block_m + t.block_n) * itemsize


def _assembles_without_spills(request):
    kernel = gemm_kernel(request)
    report = _report(kernel)
    assert (report.spill_stores, report.spill_loads, report.stack_bytes) == (0, 0, 0), report
    assert report.shared_bytes == _shared_bytes(request)
    budget = 65536 // (request.tiles.threads * request.tiles.min_blocks)
    assert report.registers <= min(255, budget), report
    return report


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a, trans_b", TRANSPOSES)
@pytest.mark.parametrize("aligned", [False, True])
def test_every_layout_assembles_without_spills(dtype, trans_a, trans_b, aligned):
    _assembles_without_spills(CudaGemmRequest(dtype, trans_a, trans_b, aligned=aligned))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epilogue", EPILOGUES, ids=lambda e: e.tag)
def test_every_epilogue_assembles_without_spills(dtype, epilogue):
    _assembles_without_spills(CudaGemmRequest(dtype, epilogue=epilogue, aligned=True))


def test_the_float32_default_leaves_room_for_two_blocks_of_256_threads():
    request = CudaGemmRequest("float32", aligned=True)
    assert request.tiles == DEFAULT_TILES["float32"]
    assert request.tiles.threads == 256
    assert _assembles_without_spills(request).registers <= 128


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_small_tiles_assemble_without_spills(dtype):
    _assembles_without_spills(CudaGemmRequest(dtype, True, True, tiles=SMALL_TILES,
                                              epilogue=EpilogueSpec("row", "silu", True)))


def test_the_inner_product_is_fused_multiply_adds_on_shared_vectors():
    ptx = gemm_kernel(CudaGemmRequest("float32", aligned=True)).ptx()
    t = DEFAULT_TILES["float32"]
    assert ptx.count("fma.rn.f32") >= t.block_k * t.thread_m * t.thread_n
    assert "ld.shared.v4" in ptx and "bar.sync" in ptx
    assert "ld.global.nc.v4" in ptx  # aligned: 16-byte global loads of A and B
    assert ".minnctapersm 2" in ptx and ".maxntid 256" in ptx


def test_unaligned_requests_load_element_by_element():
    ptx = gemm_kernel(CudaGemmRequest("float32")).ptx()
    assert "ld.global.nc.v4" not in ptx and "st.global.v4" not in ptx


def test_launch_arguments_are_named_in_order_with_their_types():
    request = CudaGemmRequest("float64", epilogue=EpilogueSpec("col", "relu", True))
    assert request.arguments() == (
        "m", "n", "k", "alpha", "a", "lda", "b", "ldb", "beta", "c", "ldc", "out", "ldo",
        "scale", "bias", "bias_stride", "residual", "ldr")
    function = gemm_kernel(request).function
    assert [arg.name for arg in function.args] == list(request.arguments())
    double, pointer = ir.DoubleType(), ir.PointerType(ir.DoubleType(), 1)
    types = dict(zip(request.arguments(), (arg.type for arg in function.args)))
    assert types["alpha"] == types["beta"] == types["scale"] == double
    assert types["a"] == types["out"] == types["residual"] == pointer
    assert types["m"] == types["ldr"] == ir.IntType(64)
    assert CudaGemmRequest().arguments()[-1] == "scale"


def test_the_grid_covers_the_output_with_at_least_one_block():
    t = DEFAULT_TILES["float32"]
    assert t.grid_for(4096, 4096) == (32, 32, 1)
    assert t.grid_for(129, 1) == (1, 2, 1)
    assert t.grid_for(0, 0) == (1, 1, 1)
    assert SMALL_TILES.grid_for(37, 45) == (2, 2, 1)


def test_tiles_that_cannot_be_generated_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="multiple of 4"):
        CudaGemmRequest("float32", tiles=CudaGemmTiles(32, 32, 8, 2, 4))
    with pytest.raises(ValueError, match="block_k 3"):
        CudaGemmRequest("float64", tiles=CudaGemmTiles(32, 32, 3, 4, 4))
    with pytest.raises(ValueError, match="float32 or float64"):
        CudaGemmRequest("int32")


# results, on the emulator -------------------------------------------------------------
SENTINEL = 1234.5


def _matrix(rng, rows, cols, ld, dtype, fill=None):
    """(buffer, view): a rows x cols matrix with leading dimension ld in a flat buffer
    that ends at its last element."""
    size = (rows - 1) * ld + cols if rows and cols else 0
    buffer = rng.standard_normal(size).astype(dtype) if fill is None else \
        np.full(size, fill, dtype)
    view = np.lib.stride_tricks.as_strided(buffer, (rows, cols),
                                           (ld * buffer.itemsize, buffer.itemsize))
    return buffer, view


def _leading(cols, pad, lanes):
    """A leading dimension of at least cols + pad (and 1), a multiple of `lanes`."""
    return -(-max(cols + pad, 1) // lanes) * lanes


def _reference(a, b, *, alpha, beta, c, bias, bias_axis, activation, scale, residual, eps):
    """The exact (float64) result and the error allowed for each element."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    x, size = alpha * (a @ b), abs(alpha) * (np.abs(a) @ np.abs(b))
    if beta != 0:
        x, size = x + beta * c, size + abs(beta) * np.abs(c)
    if bias is not None:
        bias = bias[None, :] if bias_axis == "col" else bias[:, None]
        x, size = x + bias, size + np.abs(bias)
    if activation is not None:
        x = activation_reference(activation)(x)
    x = scale * x
    if residual is not None:
        x = x + residual
    bound = (a.shape[1] + 8) * eps * (1.2 * abs(scale) * size + np.abs(x)
                                      + (0 if residual is None else np.abs(residual)))
    return x, bound


def run(request, m, n, k, *, alpha=1.0, beta=0.0, scale=1.0, pad=3, c_is_out=False,
        c_fill=None):
    """Launch `request`'s kernel on the emulator over random operands of these sizes
    (leading dimensions `pad` past the widths) and check it against numpy."""
    dtype = np.dtype(request.dtype)
    lanes = 16 // dtype.itemsize if request.aligned else 1
    rng = np.random.default_rng(1000003 * m + 1009 * n + k)
    shapes = {"a": (k, m) if request.trans_a else (m, k),
              "b": (n, k) if request.trans_b else (k, n)}
    args, views = {"m": m, "n": n, "k": k, "alpha": alpha, "beta": beta, "scale": scale}, {}
    for name in ("a", "b", "c", "residual"):
        rows, cols = shapes.get(name, (m, n))
        ld = _leading(cols, pad, lanes)
        fill = c_fill if name == "c" else None
        args[name], views[name] = _matrix(rng, rows, cols, ld, dtype, fill)
        args["ldr" if name == "residual" else "ld" + name] = ld
    ldo = _leading(n, pad, lanes)
    out_buffer, out = _matrix(rng, m, n, ldo, dtype, SENTINEL)
    args["out"], args["ldo"] = out_buffer, ldo
    if c_is_out:
        out[...] = views["c"]
        args["c"], args["ldc"], views["c"] = out_buffer, ldo, out.copy()
    spec = request.epilogue
    bias = None
    if spec.bias:
        args["bias"], bias = _matrix(rng, n if spec.bias == "col" else m, 1, 2, dtype)
        args["bias_stride"], bias = 2, bias[:, 0]
    expected, bound = _reference(
        *(views[x] if not t else views[x].T for x, t in (("a", request.trans_a),
                                                         ("b", request.trans_b))),
        alpha=alpha, beta=beta, c=views["c"].astype(np.float64), bias=bias,
        bias_axis=spec.bias, activation=spec.activation, scale=scale,
        residual=views["residual"].astype(np.float64) if spec.residual else None,
        eps=np.finfo(dtype).eps)
    untouched = out_buffer.copy()
    kernel = gemm_kernel(request)
    kernel.emulate(request.tiles.grid_for(m, n), [args[x] for x in request.arguments()])
    error = np.abs(out - expected)
    assert np.all(error <= bound + np.finfo(dtype).tiny), (
        f"max error {error.max()} at {np.unravel_index(error.argmax(), error.shape)}")
    written = np.zeros(out_buffer.shape, bool)
    for i in range(m):
        written[i * ldo:i * ldo + n] = True
    assert np.array_equal(out_buffer[~written], untouched[~written]), \
        "the kernel wrote between out's rows"
    return out


def small(dtype="float32", trans_a=False, trans_b=False, epilogue=EpilogueSpec(),
          aligned=False):
    return CudaGemmRequest(dtype, trans_a, trans_b, epilogue, aligned, SMALL_TILES)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a, trans_b", TRANSPOSES)
def test_odd_sizes_with_strided_operands_match_numpy(dtype, trans_a, trans_b):
    run(small(dtype, trans_a, trans_b), 37, 45, 19)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans_a, trans_b", TRANSPOSES)
def test_aligned_vector_loads_match_numpy_inside_and_at_the_edges(dtype, trans_a, trans_b):
    run(small(dtype, trans_a, trans_b, aligned=True), 37, 44, 19)


SIZES = [(1, 1, 1), (1, 33, 9), (33, 1, 17), (32, 32, 8), (33, 31, 16), (2, 3, 40)]


@pytest.mark.parametrize("m, n, k", SIZES)
@pytest.mark.parametrize("aligned", [False, True])
def test_edge_sizes_match_numpy(m, n, k, aligned):
    run(small("float32", aligned=aligned), m, n, k, pad=0)


@pytest.mark.parametrize("m, n, k", [(0, 5, 3), (4, 0, 3), (0, 0, 0)])
def test_an_empty_output_is_left_alone(m, n, k):
    run(small("float32", True, False), m, n, k, beta=1.0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_k_zero_gives_the_epilogue_of_beta_c(dtype):
    out = run(small(dtype, epilogue=EpilogueSpec("col", "relu", True)), 5, 6, 0,
              alpha=2.0, beta=0.5, scale=3.0)
    assert np.any(out != 0)


@pytest.mark.parametrize("epilogue", EPILOGUES, ids=lambda e: e.tag)
def test_every_epilogue_matches_numpy(epilogue):
    run(small("float32", False, True, epilogue=epilogue, aligned=True), 37, 45, 19,
        alpha=0.75, beta=-1.5, scale=1.25)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_float64_activations_match_numpy(activation):
    run(small("float64", True, False, EpilogueSpec("row", activation, True)), 19, 13, 11,
        alpha=-0.5, beta=2.0, scale=0.5)


def test_c_may_be_out_itself():
    run(small("float32", aligned=True), 37, 45, 19, beta=0.5, c_is_out=True)


def test_c_is_not_read_when_beta_is_zero():
    out = run(small("float64"), 9, 10, 5, beta=0.0, c_fill=np.nan)
    assert not np.isnan(out).any()


@pytest.mark.slow
@pytest.mark.parametrize("aligned", [False, True])
def test_the_float32_default_tiles_match_numpy_on_two_blocks(aligned):
    run(CudaGemmRequest("float32", False, True, EpilogueSpec("col", "gelu", True), aligned),
        131, 97, 19, alpha=0.5, beta=1.0)


def test_the_float64_default_tiles_match_numpy_on_two_blocks():
    run(CudaGemmRequest("float64", True, False, EpilogueSpec("row", "silu", False), True),
        70, 61, 11, beta=-1.0)
