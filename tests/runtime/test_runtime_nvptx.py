"""runtime/cuda/nvptx.py: LLVM IR to PTX through llvmlite, and ptxas's report on it."""
import llvmlite.ir as ir
import numpy as np
import pytest

from runtime.llvm import toolkit as L
from runtime.cuda.emulator import launch as cuda_emulator
from runtime.cuda import nvptx

F32 = ir.FloatType()


def _add_kernel(max_threads=None):
    module = nvptx.new_module()
    pointer = ir.PointerType(F32, 1)
    fn, b = nvptx.kernel(module, "kiln_add", [pointer, pointer, pointer, L.I64],
                         ["out", "x", "y", "n"], max_threads=max_threads)
    out, x, y, n = fn.args
    start, step = L.Target.of(module).grid_stride(b)
    with L.for_range(b, start, n, step) as i:
        b.store(b.fadd(b.load(L.at(b, x, i)), b.load(L.at(b, y, i))), L.at(b, out, i))
    b.ret_void()
    return module


def _report(ptx):
    try:
        return nvptx.ptxas_report(ptx)
    except nvptx.PtxasMissing as missing:
        pytest.skip(str(missing))


def test_a_grid_stride_kernel_becomes_ptx_that_ptxas_assembles():
    ptx = nvptx.compile_ptx(_add_kernel(max_threads=256))
    assert ".visible .entry kiln_add(" in ptx
    assert ".target sm_90" in ptx
    assert ".maxntid 256" in ptx
    assert "add.rn.f32" in ptx or "add.f32" in ptx
    report = _report(ptx)["kiln_add"]
    assert report.registers > 0
    assert (report.spill_stores, report.spill_loads, report.shared_bytes) == (0, 0, 0)


def test_another_architecture_is_named_in_the_ptx():
    assert ".target sm_80" in nvptx.compile_ptx(_add_kernel(), arch="sm_80")


def test_an_unknown_architecture_is_refused_by_name():
    with pytest.raises(ValueError, match="sm_12"):
        nvptx.compile_ptx(_add_kernel(), arch="sm_12")


def test_malformed_ir_is_an_error_not_a_crash():
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, "broken", [L.I64])
    b.add(fn.args[0], L.i64(1))  # no terminator
    with pytest.raises(RuntimeError, match="not valid LLVM IR"):
        nvptx.compile_ptx(module)


def test_ptxas_refusal_names_its_output():
    if nvptx.ptxas_path() is None:
        pytest.skip("ptxas was not found: nothing to refuse the PTX")
    with pytest.raises(nvptx.PtxasError, match="ptxas -arch=sm_90 refused"):
        nvptx.ptxas_report(".version 8.0\n.target sm_90\n.address_size 64\nnonsense;\n")


def test_report_parser_reads_each_kernel():
    text = """ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Used 8 registers
"""
    reports = nvptx._parse_report(text)
    assert reports["a"] == nvptx.KernelReport("a", 40, 4, 12, 4096, 8)
    assert reports["b"] == nvptx.KernelReport("b", 8, 0, 0, 0, 0)


def test_lane_and_warp_size_registers_have_no_axis():
    module = nvptx.new_module()
    pointer = ir.PointerType(L.I32, 1)
    fn, b = nvptx.kernel(module, "kiln_lanes", [pointer], ["out"])
    target = L.Target.of(module)
    lane, size = target.special_register(b, "laneid"), target.special_register(b, "warpsize")
    tid = b.zext(target.special_register(b, "tid"), L.I64)
    b.store(b.add(b.mul(lane, L.i32(100)), size), L.at(b, fn.args[0], tid))
    b.ret_void()
    assert '@"llvm.nvvm.read.ptx.sreg.laneid"()' in str(module)
    ptx = nvptx.compile_ptx(module)
    assert "%laneid" in ptx
    _report(ptx)
    out = np.zeros(40, np.int32)
    cuda_emulator.launch(fn, 1, 40, [out])
    np.testing.assert_array_equal(out, np.arange(40) % 32 * 100 + 32)


def test_arch_for_a_gpu_is_the_newest_target_it_runs():
    assert nvptx.arch_for((9, 0)) == "sm_90"
    assert nvptx.arch_for((8, 6)) == "sm_86"
    assert nvptx.arch_for((8, 7)) == "sm_86"   # Orin runs sm_86 code
    assert nvptx.arch_for((10, 0)) == "sm_90"  # newer GPUs JIT sm_90 PTX
    assert nvptx.arch_for((7, 0)) == "sm_70"
    with pytest.raises(ValueError, match="compute capability 6.1"):
        nvptx.arch_for((6, 1))
