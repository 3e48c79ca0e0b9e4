"""runtime/llvm/toolkit.py, the IR toolkit: loops, lanes and reductions run on this CPU through
the host JIT; intrinsic names and NVPTX's thread indices read from the IR text (no GPU)."""
import ctypes
import uuid

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from runtime.llvm import toolkit as llvm_ir
from runtime.llvm.jit import host_jit, vector_width

F32 = ir.FloatType()
W = vector_width()  # float32 lanes of this target's vectors
FLOATS = ctypes.POINTER(ctypes.c_float)
NVPTX = "nvptx64-nvidia-cuda"


def _kernel(arg_types: list, build) -> tuple:
    """A function `void name(args...)` whose body build(b, *args) emits, compiled by the
    host JIT; (its address, the module)."""
    name = f"llvm_ir_test_{uuid.uuid4().hex[:12]}"
    module = host_jit().new_module(name)
    fn, b = llvm_ir.define(module, name, ir.FunctionType(llvm_ir.VOID, arg_types))
    build(b, *fn.args)
    b.ret_void()
    return host_jit().load(module)[name], module


def _fill(unroll: int):
    """fill(x, n): 1.0 into x[0..n) through vector_loop, the tail by one masked store."""
    def build(b, x, n):
        def body(i, count):
            ones = llvm_ir.constant(ir.VectorType(F32, W), 1.0)
            target = llvm_ir.at(b, x, i)
            if count is None:
                llvm_ir.store_vector(b, ones, target, align=4)
            else:
                llvm_ir.masked_store(b, ones, target, llvm_ir.lane_mask(b, count, W), 4)
        llvm_ir.vector_loop(b, llvm_ir.i64(0), n, W, body, unroll=unroll)

    address, _ = _kernel([F32.as_pointer(), llvm_ir.I64], build)
    return ctypes.CFUNCTYPE(None, FLOATS, ctypes.c_int64)(address)


@pytest.mark.parametrize("unroll", [1, 2])
def test_a_vector_loop_with_a_masked_tail_writes_exactly_n_elements(unroll):
    fill = _fill(unroll)
    for n in range(3 * W + 2):
        x = np.full(4 * W + 1, -1.0, np.float32)
        fill(x.ctypes.data_as(FLOATS), n)
        assert (x[:n] == 1.0).all() and (x[n:] == -1.0).all(), n


def test_splat_puts_a_scalar_in_every_lane_with_one_shuffle():
    def build(b, out, value):
        llvm_ir.store_vector(b, llvm_ir.splat(b, value, W), out, align=4)

    address, module = _kernel([F32.as_pointer(), F32], build)
    out = np.zeros(W, np.float32)
    ctypes.CFUNCTYPE(None, FLOATS, ctypes.c_float)(address)(out.ctypes.data_as(FLOATS), 2.5)
    assert (out == 2.5).all()
    assert str(module).count("shufflevector") == 1
    assert llvm_ir.splat(None, out, None) is out  # width None: scalar code, the value


def test_a_sum_carried_through_phis_and_folded_pairwise():
    """fold_range keeps W partial sums in a vector phi; pairwise folds its lanes."""
    def build(b, x, n, out):
        def add(i, sums):
            return [b.fadd(sums[0], llvm_ir.load_vector(b, llvm_ir.at(b, x, i), W, 4))]
        zero = llvm_ir.constant(ir.VectorType(F32, W), 0.0)
        sums = llvm_ir.fold_range(b, 0, n, W, [zero], add, "sum")
        b.store(llvm_ir.pairwise(llvm_ir.lanes_of(b, sums[0]), b.fadd), out)

    address, _ = _kernel([F32.as_pointer(), llvm_ir.I64, F32.as_pointer()], build)
    x = np.arange(3 * W, dtype=np.float32)
    out = np.zeros(1, np.float32)
    ctypes.CFUNCTYPE(None, FLOATS, ctypes.c_int64, FLOATS)(address)(
        x.ctypes.data_as(FLOATS), 3 * W, out.ctypes.data_as(FLOATS))
    assert out[0] == x.sum()


def test_lanes_folded_as_vectors_give_the_scalar_tree_s_bits():
    """pairwise_lanes pairs the same neighbours as pairwise over lanes_of: a float32 sum
    whose rounding depends on the order comes out bit for bit the same."""
    def folded(vectorised: bool):
        def build(b, x, out):
            v = llvm_ir.load_vector(b, x, W, 4)
            b.store(llvm_ir.pairwise_lanes(b, v, b.fadd) if vectorised else
                    llvm_ir.pairwise(llvm_ir.lanes_of(b, v), b.fadd), out)
        address, module = _kernel([F32.as_pointer(), F32.as_pointer()], build)
        return ctypes.CFUNCTYPE(None, FLOATS, FLOATS)(address), str(module)
    (vector_sum, text), (scalar_sum, _) = folded(True), folded(False)
    assert "extractelement" in text and text.count("extractelement") == 1
    rng = np.random.default_rng(0)
    for scale in (1.0, 1e8):
        for _ in range(50):
            x = (rng.standard_normal(W) * rng.choice([1.0, scale], W)).astype(np.float32)
            got, want = np.zeros(1, np.float32), np.zeros(1, np.float32)
            vector_sum(x.ctypes.data_as(FLOATS), got.ctypes.data_as(FLOATS))
            scalar_sum(x.ctypes.data_as(FLOATS), want.ctypes.data_as(FLOATS))
            pairs = x.astype(np.float32)
            while len(pairs) > 1:
                pairs = pairs[0::2] + pairs[1::2]
            assert got[0].tobytes() == want[0].tobytes() == pairs[0].tobytes()


def test_claimed_indices_and_trips_known_when_building_each_run_once():
    """claim_loop hands out 0..count-1 from a counter; for_trips runs 0, 1 or 3 trips."""
    i64p = llvm_ir.I64.as_pointer()

    def build(b, counter, seen):
        with llvm_ir.claim_loop(b, counter, 5) as index:
            slot = llvm_ir.at(b, seen, index)
            b.store(b.add(b.load(slot), llvm_ir.i64(1)), slot)
        for first, trips in ((5, 0), (6, 1), (7, 3)):
            llvm_ir.for_trips(b, first, trips, 2, lambda i: b.store(i, llvm_ir.at(b, seen, i)))

    address, _ = _kernel([i64p, i64p], build)
    counter, seen = np.zeros(1, np.int64), np.zeros(16, np.int64)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(address)(
        counter.ctypes.data, seen.ctypes.data)
    assert seen.tolist() == [1] * 5 + [0, 6, 7, 0, 9, 0, 11, 0, 0, 0, 0]


def test_intrinsic_names_are_mangled_from_their_types():
    assert [llvm_ir.mangle(t) for t in (F32, ir.DoubleType(), ir.HalfType(), llvm_ir.I64,
                                        ir.VectorType(F32, 16), F32.as_pointer(),
                                        ir.PointerType(F32, 3))] == \
        ["f32", "f64", "f16", "i64", "v16f32", "p0", "p3"]


def test_host_intrinsics_and_target():
    module = host_jit().new_module("llvm_ir_test_host_names")
    fn, b = llvm_ir.define(module, "f", ir.FunctionType(llvm_ir.VOID, [F32.as_pointer()]))
    target = llvm_ir.Target.of(module)
    assert not target.is_nvptx and target.global_space == target.shared_space == 0
    value = llvm_ir.masked_load(b, fn.args[0], llvm_ir.lane_mask(b, llvm_ir.i64(3), 8), 4)
    llvm_ir.intrinsic(b, "fma", [value] * 3, value.type, (value.type,))
    target.pause(b)
    with pytest.raises(ValueError, match="no thread or block indices"):
        target.grid_stride(b)
    b.ret_void()
    declared = {f.name for f in module.functions if f.is_declaration}
    pause = {"llvm.x86.sse2.pause"} if module.triple.startswith("x86_64") else set()
    assert declared == {"llvm.masked.load.v8f32.p0", "llvm.fma.v8f32"} | pause
    assert llvm_ir.Target.of(ir.Module()).triple == llvm.get_process_triple()


def _grid_stride_copy(module: ir.Module) -> str:
    """copy(x, y, n): y[i] = x[i] for i in range(n), a grid-stride loop over global memory,
    four lanes at a time with a masked tail; its IR text."""
    target = llvm_ir.Target.of(module)
    pointer = ir.PointerType(F32, target.global_space)
    fn, b = llvm_ir.define(module, "copy", ir.FunctionType(
        llvm_ir.VOID, [pointer, pointer, llvm_ir.I64]), ("x", "y", "n"))
    x, y, n = fn.args
    start, step = target.grid_stride(b)
    with llvm_ir.for_range(b, b.mul(start, llvm_ir.i64(4)), n, b.mul(step, llvm_ir.i64(4)),
                           "i") as i:
        mask = llvm_ir.lane_mask(b, b.sub(n, i), 4)
        value = llvm_ir.masked_load(b, llvm_ir.at(b, x, i), mask, 4)
        llvm_ir.masked_store(b, value, llvm_ir.at(b, y, i), mask, 4)
    target.pause(b)  # nothing on NVPTX
    b.ret_void()
    return str(module)


def test_nvptx_ir_reads_thread_indices_and_names_global_memory():
    module = ir.Module("llvm_ir_test_nvptx")
    module.triple = NVPTX
    text = _grid_stride_copy(module)
    for register in ("tid", "ntid", "ctaid", "nctaid"):
        assert f'declare i32 @"llvm.nvvm.read.ptx.sreg.{register}.x"()' in text
    assert '@"llvm.masked.load.v4f32.p1"(<4 x float> addrspace(1)*' in text
    assert '@"llvm.masked.store.v4f32.p1"(<4 x float>' in text
    assert "pause" not in text
    llvm.parse_assembly(text).verify()


def test_nvptx_ir_compiles_to_ptx_where_llvm_has_the_target():
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    try:
        machine = llvm.Target.from_triple(NVPTX).create_target_machine(cpu="sm_90")
    except RuntimeError as error:
        pytest.skip(f"this LLVM has no NVPTX target: {error}")
    module = ir.Module("llvm_ir_test_ptx")
    module.triple = NVPTX
    ptx = machine.emit_assembly(llvm.parse_assembly(_grid_stride_copy(module)))
    assert "%tid.x" in ptx and "%ctaid.x" in ptx and "ld.global" in ptx


def test_offsets_at_a_linear_index_from_sizes_and_strides_constant_or_arguments():
    """Operand 0 over dims (3, n) with strides (s, 1), s and n arguments; operand 1 with
    constant strides (0, 5): a broadcast dim adds nothing to its offset."""
    def build(b, out, index, n, s):
        offsets = llvm_ir.offsets(b, index, [3, n], [[s, 1], [0, 5]])
        for j, offset in enumerate(offsets):
            b.store(offset, llvm_ir.at(b, out, j))

    address, module = _kernel([llvm_ir.I64.as_pointer()] + [llvm_ir.I64] * 3, build)
    offsets = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64,
                               ctypes.c_int64, ctypes.c_int64)(address)
    out = np.zeros(2, np.int64)
    for index in range(3 * 4):
        offsets(out.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), index, 4, 10)
        row, column = divmod(index, 4)
        assert out.tolist() == [row * 10 + column, column * 5]
    assert str(module).count(" mul ") == 3  # row x s, column x 1, column x 5


@pytest.mark.parametrize("known", [True, False])
def test_when_and_choose_on_a_constant_condition_build_only_the_arm_taken(known):
    """A condition known when building (equal on two constants) gives no branch: the
    arm not taken is never built; on a runtime value both are, joined by phis."""
    def build(b, x, n):
        i = llvm_ir.i64(3) if known else n
        condition = llvm_ir.equal(b, i, llvm_ir.i64(3))
        built = []
        one, five = llvm_ir.constant(F32, 1.0), llvm_ir.constant(F32, 5.0)
        (value,) = llvm_ir.choose(b, condition, lambda: built.append("yes") or [one],
                                  lambda: built.append("no") or [five])
        (value,) = llvm_ir.when(b, condition, [value],
                                lambda xs: built.append("then") or [b.fadd(xs[0], one)])
        b.store(value, x)
        assert built == (["yes", "then"] if known else ["yes", "no", "then"])

    address, module = _kernel([ir.PointerType(F32), llvm_ir.I64], build)
    assert ("br i1" in str(module)) is not known
    out = np.zeros(1, np.float32)
    for n, expected in ((3, 2.0), (4, 2.0 if known else 5.0)):
        ctypes.CFUNCTYPE(None, FLOATS, ctypes.c_int64)(address)(
            out.ctypes.data_as(FLOATS), n)
        assert out[0] == expected


def test_equal_compares_runtime_values_and_folds_constants():
    assert llvm_ir.equal(None, llvm_ir.i64(2), llvm_ir.i64(2)).constant == 1
    assert llvm_ir.equal(None, llvm_ir.constant(F32, 0.0),
                         llvm_ir.constant(F32, 1.0)).constant == 0
