"""compiler/codegen/cuda/gemm.py: the tiled CUDA SGEMM/DGEMM. Every kernel generated
here assembles with ptxas -arch=sm_90 with no spills (skipped, with the reason, where
ptxas is not installed)."""
import llvmlite.ir as ir
import pytest

from compiler.codegen.cuda.gemm import (DEFAULT_TILES, SMALL_TILES, CudaGemmRequest,
                                        CudaGemmTiles, gemm_kernel)
from compiler.gemm.ir.kernel import ACTIVATIONS, EpilogueSpec
from runtime import nvptx

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
