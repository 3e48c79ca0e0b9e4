"""runtime/cuda/emulator/launch.py: CUDA kernels' IR run on the host, compared with numpy; each
kernel here also assembles with ptxas (skipped, with the reason, where it is missing)."""
import functools

import llvmlite.ir as ir
import numpy as np
import pytest

from runtime.cuda.emulator import launch as cuda_emulator
from runtime.cuda import nvptx
from runtime.llvm import toolkit as L

F32 = ir.FloatType()
EmulationError = cuda_emulator.EmulationError
FULL = L.i32(-1)  # every lane of the warp


def _assembles(module, name):
    """The kernel's PTX assembles with ptxas -arch=sm_90."""
    try:
        report = nvptx.ptxas_report(nvptx.compile_ptx(module))
    except nvptx.PtxasMissing as missing:
        print(f"ptxas check skipped: {missing}")
        return
    assert name in report


def _sreg(b, name, axis="x"):
    return L.Target.of(b.module).special_register(b, name, axis)


def _lane(b):
    return b.zext(L.intrinsic(b, "nvvm.read.ptx.sreg.laneid", [], L.I32), L.I64)


def _barrier(b):
    L.intrinsic(b, "nvvm.barrier.cta.sync.aligned.all", [L.i32(0)])


def _shared(module, count, name="partial"):
    ty = ir.ArrayType(F32, count)
    variable = ir.GlobalVariable(module, ty, name, addrspace=3)
    variable.linkage = "internal"
    variable.initializer = ir.Constant(ty, ir.Undefined)
    return variable


def _global_pointer(ty=F32):
    return ir.PointerType(ty, 1)


# elementwise ----------------------------------------------------------------------------
@functools.cache
def _add_kernel():
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_add", [p, p, p, L.I64], ["out", "x", "y", "n"])
    out, x, y, n = fn.args
    start, step = L.Target.of(module).grid_stride(b)
    with L.for_range(b, start, n, step) as i:
        b.store(b.fadd(b.load(L.at(b, x, i)), b.load(L.at(b, y, i))), L.at(b, out, i))
    b.ret_void()
    _assembles(module, "emu_add")
    return fn


@pytest.mark.parametrize("n, grid, block", [(1001, 3, 128), (0, 1, 32), (5, 2, 64),
                                            (4097, 4, 256)])
def test_a_grid_stride_kernel_adds_every_element_once(n, grid, block):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n + 3, 7.0, np.float32)  # the kernel must not touch the tail
    cuda_emulator.launch(_add_kernel(), grid, block, [out, x, y, n])
    np.testing.assert_array_equal(out[:n], x + y)
    np.testing.assert_array_equal(out[n:], 7.0)


def test_a_pointer_may_be_given_at_an_element_offset():
    x, y = np.arange(10, dtype=np.float32), np.ones(4, np.float32)
    out = np.zeros(10, np.float32)
    cuda_emulator.launch(_add_kernel(), 1, 32, [(out, 6), (x, 2), y, 4])
    np.testing.assert_array_equal(out, [0, 0, 0, 0, 0, 0, 3, 4, 5, 6])


# reductions -----------------------------------------------------------------------------
@functools.cache
def _block_sum_kernel(threads=256):
    """Each block sums its `threads` elements: a tree in shared memory, a barrier after
    each level (a barrier inside a loop)."""
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_block_sum", [p, p, L.I64], ["out", "x", "n"])
    out, x, n = fn.args
    partial = _shared(module, threads)
    tid, block = b.zext(_sreg(b, "tid"), L.I64), b.zext(_sreg(b, "ctaid"), L.I64)
    index = b.add(b.mul(block, L.i64(threads)), tid)
    value = L.choose(b, b.icmp_signed("<", index, n), lambda: [b.load(L.at(b, x, index))],
                     lambda: [ir.Constant(F32, 0.0)])[0]
    b.store(value, b.gep(partial, [L.i64(0), tid]))
    _barrier(b)
    with L.for_range(b, 0, threads.bit_length() - 1) as level:
        half = b.lshr(L.i64(threads // 2), level)
        with b.if_then(b.icmp_unsigned("<", tid, half)):
            mine = b.gep(partial, [L.i64(0), tid])
            other = b.load(b.gep(partial, [L.i64(0), b.add(tid, half)]))
            b.store(b.fadd(b.load(mine), other), mine)
        _barrier(b)
    with b.if_then(b.icmp_unsigned("==", tid, L.i64(0))):
        b.store(b.load(b.gep(partial, [L.i64(0), L.i64(0)])), L.at(b, out, block))
    b.ret_void()
    _assembles(module, "emu_block_sum")
    return fn


def test_a_block_tree_reduction_in_shared_memory_sums_each_block():
    n = 700
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    out = np.zeros(3, np.float32)
    cuda_emulator.launch(_block_sum_kernel(), 3, 256, [out, x, n])
    expected = [x[i * 256:(i + 1) * 256].astype(np.float64).sum() for i in range(3)]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _shuffle(b, mode, value, offset):
    return L.intrinsic(b, f"nvvm.shfl.sync.{mode}.f32", [FULL, value, L.i32(offset),
                                                         L.i32(31 if mode != "up" else 0)], F32)


@functools.cache
def _warp_sum_kernel(mode):
    """Each warp sums its 32 elements with shuffles; lane 0 (down) or every lane (bfly)
    writes the warp's sum."""
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, f"emu_warp_sum_{mode}", [p, p], ["out", "x"])
    out, x = fn.args
    start, _ = L.Target.of(module).grid_stride(b)
    value = b.load(L.at(b, x, start))
    for offset in (16, 8, 4, 2, 1):
        value = b.fadd(value, _shuffle(b, mode, value, offset))
    lane = _lane(b) if mode == "bfly" else L.i64(0)
    warp = b.lshr(start, L.i64(5))
    destination = L.at(b, out, b.add(b.mul(warp, L.i64(32)), lane))
    if mode == "bfly":
        b.store(value, destination)
    else:
        with b.if_then(b.icmp_unsigned("==", b.and_(start, L.i64(31)), L.i64(0))):
            b.store(value, destination)
    b.ret_void()
    _assembles(module, f"emu_warp_sum_{mode}")
    return fn


@pytest.mark.parametrize("mode", ["down", "bfly"])
def test_a_warp_shuffle_reduction_sums_each_warp(mode):
    x = np.random.default_rng(2).standard_normal(128).astype(np.float32)
    out = np.zeros(128, np.float32)
    cuda_emulator.launch(_warp_sum_kernel(mode), 2, 64, [out, x])
    sums = x.astype(np.float64).reshape(4, 32).sum(axis=1)
    written = out.reshape(4, 32)
    if mode == "bfly":  # every lane holds the sum
        np.testing.assert_allclose(written, np.repeat(sums[:, None], 32, 1), rtol=1e-5,
                                   atol=1e-5)
    else:
        np.testing.assert_allclose(written[:, 0], sums, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(written[:, 1:], 0)


def test_shuffle_up_and_idx_follow_the_ptx_rules():
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_shuffles", [p, p], ["out", "x"])
    out, x = fn.args
    lane = _lane(b)
    value = b.load(L.at(b, x, lane))
    up = _shuffle(b, "up", value, 3)  # lanes 0-2 keep their own value
    broadcast = L.intrinsic(b, "nvvm.shfl.sync.idx.f32",
                            [FULL, value, L.i32(5), L.i32(31)], F32)
    b.store(up, L.at(b, out, lane))
    b.store(broadcast, L.at(b, out, b.add(lane, L.i64(32))))
    b.ret_void()
    _assembles(module, "emu_shuffles")
    x, out = np.arange(32, dtype=np.float32) * 10, np.zeros(64, np.float32)
    cuda_emulator.launch(fn, 1, 32, [out, x])
    np.testing.assert_array_equal(out[:32], np.concatenate([x[:3], x[:29]]))
    np.testing.assert_array_equal(out[32:], 50.0)


# indexing, rounding, wrap-around --------------------------------------------------------
def test_a_two_dimensional_kernel_reads_block_and_thread_y():
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_rows", [p, p, L.I64, L.I64],
                         ["out", "x", "rows", "cols"])
    out, x, rows, cols = fn.args

    def index(axis):
        block, threads, thread = (b.zext(_sreg(b, name, axis), L.I64)
                                  for name in ("ctaid", "ntid", "tid"))
        return b.add(b.mul(block, threads), thread)
    row, col = index("y"), index("x")
    inside = b.and_(b.icmp_signed("<", row, rows), b.icmp_signed("<", col, cols))
    with b.if_then(inside):
        at = b.add(b.mul(row, cols), col)
        value = b.fadd(b.fmul(b.load(L.at(b, x, at)), ir.Constant(F32, 2.0)),
                       b.sitofp(row, F32))
        b.store(value, L.at(b, out, at))
    b.ret_void()
    _assembles(module, "emu_rows")
    x = np.random.default_rng(3).standard_normal((13, 21)).astype(np.float32)
    out = np.zeros_like(x)
    cuda_emulator.launch(fn, (3, 4), (8, 4), [out, x, 13, 21])
    np.testing.assert_allclose(out, x * 2 + np.arange(13)[:, None], rtol=1e-6)


def test_float32_arithmetic_rounds_every_operation():
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_serial_sum", [p, p, L.I64], ["out", "x", "n"])
    out, x, n = fn.args
    total = L.fold_range(b, 0, n, 1, [ir.Constant(F32, 0.0)],
                         lambda i, acc: [b.fadd(acc[0], b.load(L.at(b, x, i)))])[0]
    b.store(total, L.at(b, out, 0))
    b.ret_void()
    _assembles(module, "emu_serial_sum")
    x = np.array([1.0] + [1e-8] * 1000, np.float32)
    out = np.zeros(1, np.float32)
    cuda_emulator.launch(fn, 1, 1, [out, x, x.size])
    float32_sum = functools.reduce(lambda acc, v: np.float32(acc + v), x, np.float32(0))
    assert out[0] == float32_sum == 1.0
    assert x.astype(np.float64).sum() != 1.0


def test_fma_rounds_once():
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_fma", [p, p], ["out", "x"])
    out, x = fn.args
    a, c, d = (b.load(L.at(b, x, k)) for k in range(3))
    b.store(L.intrinsic(b, "fma", [a, c, d], F32, [F32]), L.at(b, out, 0))
    b.ret_void()
    _assembles(module, "emu_fma")
    # a*b + c lies just below the midpoint 2**30 + 192 of two float32s, which float64
    # cannot tell apart from it: rounding twice would give 2**30 + 256
    x = np.array([8 + 2.0**-20, 8 - 2.0**-20, 2.0**30 + 128], np.float32)
    out = np.zeros(1, np.float32)
    cuda_emulator.launch(fn, 1, 1, [out, x])
    assert out[0] == 2.0**30 + 128


def test_integers_wrap_at_their_width():
    module = nvptx.new_module()
    p = _global_pointer(L.I32)
    fn, b = nvptx.kernel(module, "emu_hash", [p, p, p], ["hashed", "shifted", "x"])
    hashed, shifted, x = fn.args
    i = b.zext(_sreg(b, "tid"), L.I64)
    value = b.load(L.at(b, x, i))
    b.store(b.add(b.mul(value, L.i32(1664525)), L.i32(1013904223)), L.at(b, hashed, i))
    b.store(b.ashr(value, L.i32(3)), L.at(b, shifted, i))
    b.ret_void()
    _assembles(module, "emu_hash")
    x = np.array([0, 1, -1, 2**31 - 1, -2**31, 123456789, -77, 5], np.int32)
    hashed, shifted = np.zeros_like(x), np.zeros_like(x)
    cuda_emulator.launch(fn, 1, 8, [hashed, shifted, x])
    expected = (x.astype(np.uint32) * np.uint32(1664525) + np.uint32(1013904223))
    np.testing.assert_array_equal(hashed, expected.astype(np.int32))
    np.testing.assert_array_equal(shifted, x >> 3)


# errors ---------------------------------------------------------------------------------
def test_an_out_of_bounds_read_names_the_parameter_and_offset():
    x, y, out = np.zeros(100, np.float32), np.zeros(120, np.float32), np.zeros(120, np.float32)
    with pytest.raises(EmulationError, match=r"emu_add.*load.*reads 4 bytes at byte "
                       r"offset 400 \(element 100\) of parameter 'x' \(an array of 100 "
                       r"float32, 400 bytes\)"):
        cuda_emulator.launch(_add_kernel(), 1, 128, [out, x, y, 120])


def test_an_out_of_bounds_write_names_the_parameter_and_offset():
    x, out = np.zeros(40, np.float32), np.zeros(33, np.float32)
    with pytest.raises(EmulationError, match=r"thread \(33, 0, 0\).*store.*writes 4 bytes at "
                       r"byte offset 132 \(element 33\) of parameter 'out'"):
        cuda_emulator.launch(_add_kernel(), 1, 64, [out, x, x, 40])


def test_a_read_before_the_array_is_caught():
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_previous", [p, p], ["out", "x"])
    out, x = fn.args
    i = b.zext(_sreg(b, "tid"), L.I64)
    b.store(b.load(L.at(b, x, b.sub(i, L.i64(1)))), L.at(b, out, i))
    b.ret_void()
    _assembles(module, "emu_previous")
    with pytest.raises(EmulationError, match=r"byte offset -4 \(element -1\) of parameter 'x'"):
        cuda_emulator.launch(fn, 1, 4, [np.zeros(4, np.float32), np.zeros(4, np.float32)])


def _divergent_kernel(two_barriers):
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, f"emu_divergent_{int(two_barriers)}", [L.I64], ["n"])
    tid = b.zext(_sreg(b, "tid"), L.I64)
    with b.if_else(b.icmp_unsigned("<", tid, L.i64(16))) as (then, otherwise):
        with then:
            _barrier(b)
        with otherwise:
            if two_barriers:
                _barrier(b)
    b.ret_void()
    _assembles(module, fn.name)
    return fn


def test_a_barrier_that_only_some_threads_reach_is_an_error_not_a_hang():
    with pytest.raises(EmulationError, match=r"barrier divergence: threads 0-15 wait at "
                       r"`call void @\"llvm.nvvm.barrier.cta.sync.aligned.all\"\(i32 0\)` in block "
                       r"entry.if; "
                       r"threads 16-31 have finished"):
        cuda_emulator.launch(_divergent_kernel(False), 1, 32, [0])


def test_threads_waiting_at_two_different_barriers_are_divergence():
    with pytest.raises(EmulationError, match="barrier divergence: threads 0-15 wait at .* "
                       "in block entry.if; threads 16-47 wait at .* in block entry.else"):
        cuda_emulator.launch(_divergent_kernel(True), 1, 48, [0])


def test_an_unknown_intrinsic_is_named():
    module = nvptx.new_module()
    p = _global_pointer(L.I32)
    fn, b = nvptx.kernel(module, "emu_reverse", [p], ["x"])
    x, = fn.args
    b.store(L.intrinsic(b, "bitreverse.i32", [b.load(x)], L.I32), x)
    b.ret_void()
    _assembles(module, "emu_reverse")
    with pytest.raises(EmulationError, match=r"emu_reverse.*unknown intrinsic "
                       r"llvm.bitreverse.i32"):
        cuda_emulator.launch(fn, 1, 1, [np.zeros(1, np.int32)])


def test_bad_arguments_are_refused_by_name():
    kernel, x = _add_kernel(), np.zeros(4, np.float32)
    with pytest.raises(EmulationError, match="takes 4 arguments"):
        cuda_emulator.launch(kernel, 1, 1, [x, x, x])
    with pytest.raises(EmulationError, match="parameter 'y' points to float but the "
                       "array holds float64"):
        cuda_emulator.launch(kernel, 1, 1, [x, x, np.zeros(4), 4])
    with pytest.raises(EmulationError, match="parameter 'n' is an i64 and needs an int"):
        cuda_emulator.launch(kernel, 1, 1, [x, x, x, 4.0])
    with pytest.raises(EmulationError, match="block must be a positive int"):
        cuda_emulator.launch(kernel, 1, (0, 2), [x, x, x, 4])


# memory: atomics, vectors, shared and constant globals --------------------------------
def test_atomics_from_every_thread_all_land():
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, "emu_atomics", [_global_pointer(L.I32), _global_pointer()],
                         ["counts", "total"])
    counts, total = fn.args
    old = b.atomic_rmw("add", counts, L.i32(1), "monotonic")
    b.atomic_rmw("max", L.at(b, counts, 1), old, "monotonic")
    b.atomic_rmw("fadd", total, ir.Constant(F32, 0.5), "monotonic")
    swapped = b.cmpxchg(L.at(b, counts, 2), L.i32(0), b.add(old, L.i32(100)),
                        "monotonic", "monotonic")
    with b.if_then(b.extract_value(swapped, 1)):
        b.atomic_rmw("add", L.at(b, counts, 3), L.i32(1), "monotonic")
    b.ret_void()
    _assembles(module, "emu_atomics")
    counts, total = np.zeros(4, np.int32), np.zeros(1, np.float32)
    cuda_emulator.launch(fn, 3, 40, [counts, total])
    # 120 increments; the largest old value 119; one thread wins the exchange
    assert counts.tolist() == [120, 119, 100, 1]
    assert total[0] == 60.0


def test_vector_loads_read_four_lanes_and_must_be_aligned():
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_vectors", [p, p, L.I64], ["out", "x", "first"])
    out, x, first = fn.args
    i = b.add(b.mul(b.zext(_sreg(b, "tid"), L.I64), L.i64(4)), first)
    lanes = L.load_vector(b, L.at(b, x, i), 4, 16)
    doubled = b.fadd(lanes, lanes)
    reversed_ = b.shuffle_vector(doubled, ir.Constant(doubled.type, ir.Undefined),
                                 ir.Constant(ir.VectorType(L.I32, 4), [3, 2, 1, 0]))
    L.store_vector(b, b.insert_element(reversed_, ir.Constant(F32, -1.0), L.i32(0)),
                   L.at(b, out, i), 16)
    b.ret_void()
    _assembles(module, "emu_vectors")
    x, out = np.arange(16, dtype=np.float32), np.zeros(16, np.float32)
    cuda_emulator.launch(fn, 1, 4, [out, x, 0])
    expected = (2 * x).reshape(4, 4)[:, ::-1].copy()
    expected[:, 0] = -1
    np.testing.assert_array_equal(out, expected.reshape(-1))
    with pytest.raises(EmulationError, match=r"reads 16 bytes at byte offset 4 \(element 1\) "
                       r"of parameter 'x'.*misaligned"):
        cuda_emulator.launch(fn, 1, 1, [out, x, 1])


def test_each_block_has_its_own_shared_memory_undefined_until_written():
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, "emu_shared", [_global_pointer()], ["out"])
    out, = fn.args
    scratch = _shared(module, 2, "scratch")
    block = b.zext(_sreg(b, "ctaid"), L.I64)
    first = b.gep(scratch, [L.i64(0), L.i64(0)])
    b.store(b.load(first), L.at(b, out, b.mul(block, L.i64(2))))  # before any write
    b.store(b.uitofp(block, F32), first)
    b.store(b.load(first), L.at(b, out, b.add(b.mul(block, L.i64(2)), L.i64(1))))
    b.ret_void()
    _assembles(module, "emu_shared")
    out = np.zeros(6, np.float32)
    cuda_emulator.launch(fn, 3, 1, [out])
    assert np.isnan(out[::2]).all()
    np.testing.assert_array_equal(out[1::2], [0, 1, 2])


def test_dynamic_shared_memory_is_sized_by_the_launch():
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, "emu_dynamic", [_global_pointer()], ["out"])
    out, = fn.args
    dynamic = ir.GlobalVariable(module, ir.ArrayType(F32, 0), "dynamic", addrspace=3)
    dynamic.linkage = "external"
    tid = b.zext(_sreg(b, "tid"), L.I64)
    b.store(b.uitofp(tid, F32), b.gep(dynamic, [L.i64(0), tid]))
    _barrier(b)
    last = b.sub(b.zext(_sreg(b, "ntid"), L.I64), L.i64(1))
    b.store(b.load(b.gep(dynamic, [L.i64(0), b.sub(last, tid)])), L.at(b, out, tid))
    b.ret_void()
    _assembles(module, "emu_dynamic")
    out = np.zeros(8, np.float32)
    cuda_emulator.launch(fn, 1, 8, [out], dynamic_shared_bytes=32)
    np.testing.assert_array_equal(out, np.arange(8)[::-1])
    with pytest.raises(EmulationError, match=r"writes 4 bytes at byte offset 28 of dynamic "
                       r"shared memory \(28 bytes\)"):
        cuda_emulator.launch(fn, 1, 8, [out], dynamic_shared_bytes=28)


def test_constant_globals_hold_their_initialiser_and_are_read_only():
    module = nvptx.new_module()
    ty = ir.ArrayType(F32, 3)
    table = ir.GlobalVariable(module, ty, "table", addrspace=4)
    table.global_constant, table.linkage = True, "internal"
    table.initializer = ir.Constant(ty, [0.5, 1.5, 2.5])
    fn, b = nvptx.kernel(module, "emu_table", [_global_pointer()], ["out"])
    out, = fn.args
    tid = b.zext(_sreg(b, "tid"), L.I64)
    b.store(b.load(b.gep(table, [L.i64(0), tid])), L.at(b, out, tid))
    b.ret_void()
    _assembles(module, "emu_table")
    out = np.zeros(3, np.float32)
    cuda_emulator.launch(fn, 1, 3, [out])
    np.testing.assert_array_equal(out, [0.5, 1.5, 2.5])


# values: compares with NaN, conversions ------------------------------------------------
def test_ordered_and_unordered_compares_treat_nan_as_llvm_does():
    predicates = {"oeq": "==", "one": "!=", "olt": "<", "ord": "ord",
                  "ueq": "==", "une": "!=", "ult": "<", "uno": "uno"}
    module = nvptx.new_module()
    p = _global_pointer()
    fn, b = nvptx.kernel(module, "emu_compares", [_global_pointer(L.I8), p, p],
                         ["out", "x", "y"])
    out, x, y = fn.args
    i = b.zext(_sreg(b, "tid"), L.I64)
    a, c = b.load(L.at(b, x, i)), b.load(L.at(b, y, i))
    for k, (predicate, symbol) in enumerate(predicates.items()):
        compare = b.fcmp_unordered if predicate[0] == "u" else b.fcmp_ordered
        flag = compare(symbol, a, c)
        assert flag.op == predicate
        b.store(b.zext(flag, L.I8), L.at(b, out, b.add(b.mul(i, L.i64(len(predicates))),
                                                      L.i64(k))))
    b.ret_void()
    _assembles(module, "emu_compares")
    x = np.array([1, 1, 2, np.nan, np.nan], np.float32)
    y = np.array([1, 2, 1, 1, np.nan], np.float32)
    out = np.zeros(5 * len(predicates), np.int8)
    cuda_emulator.launch(fn, 1, 5, [out, x, y])
    with np.errstate(invalid="ignore"):
        nan = np.isnan(x) | np.isnan(y)
        expected = {"oeq": x == y, "one": (x != y) & ~nan, "olt": x < y, "ord": ~nan,
                    "ueq": (x == y) | nan, "une": x != y, "ult": (x < y) | nan, "uno": nan}
    np.testing.assert_array_equal(out.reshape(5, -1),
                                  np.stack([expected[p] for p in predicates], 1))


def test_conversions_truncate_saturate_nothing_and_bitcast_exactly():
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, "emu_casts", [_global_pointer(L.I32), _global_pointer()],
                         ["ints", "floats"])
    ints, floats = fn.args
    i = b.zext(_sreg(b, "tid"), L.I64)
    value = b.load(L.at(b, floats, i))
    b.store(b.fptosi(value, L.I32), L.at(b, ints, i))
    b.store(b.bitcast(value, L.I32), L.at(b, ints, b.add(i, L.i64(4))))
    b.store(b.sitofp(b.sext(b.trunc(b.fptosi(value, L.I32), L.I8), L.I32), F32),
            L.at(b, floats, i))
    b.ret_void()
    _assembles(module, "emu_casts")
    floats = np.array([2.7, -2.7, 300.5, -1e9], np.float32)
    ints = np.zeros(8, np.int32)
    source = floats.copy()
    cuda_emulator.launch(fn, 1, 4, [ints, floats])
    np.testing.assert_array_equal(ints[:4], source.astype(np.int32))
    np.testing.assert_array_equal(ints[4:], source.view(np.int32))
    np.testing.assert_array_equal(floats, source.astype(np.int32).astype(np.int8))
    with pytest.raises(EmulationError, match=r"fptosi.*the float inf does not fit in i32"):
        cuda_emulator.launch(fn, 1, 1, [ints, np.array([np.inf], np.float32)])


# warp votes and math intrinsics -------------------------------------------------------
def _vote_kernel(guarded):
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, f"emu_ballot_{int(guarded)}", [_global_pointer(L.I32)],
                         ["out"])
    out, = fn.args
    lane = _lane(b)
    odd = b.trunc(lane, L.I1)

    def ballot():
        votes = L.intrinsic(b, "nvvm.vote.ballot.sync", [FULL, odd], L.I32)
        b.store(votes, L.at(b, out, lane))
    if guarded:  # lanes 16-31 never vote: a GPU would hang or give garbage
        with b.if_then(b.icmp_unsigned("<", lane, L.i64(16))):
            ballot()
    else:
        ballot()
    b.ret_void()
    _assembles(module, fn.name)
    return fn


def test_a_ballot_gathers_every_lanes_vote():
    out = np.zeros(32, np.uint32)
    cuda_emulator.launch(_vote_kernel(False), 1, 32, [out.view(np.int32)])
    assert (out == 0xAAAAAAAA).all()


def test_a_warp_collective_that_lanes_skip_is_an_error_not_a_hang():
    with pytest.raises(EmulationError, match=r"warp collective whose lanes never all arrive: "
                       r"threads 0-15 wait at .*vote.ballot.sync.*threads 16-31 have finished"):
        cuda_emulator.launch(_vote_kernel(True), 1, 32, [np.zeros(32, np.int32)])


MATH = [("exp2", np.exp2, [-3.5, 0.0, 10.25, 200.0]),
        ("sqrt", np.sqrt, [2.0, 0.0, 1e-3, -1.0]),
        ("floor", np.floor, [-0.5, 2.5, -7.0, 3.99]),
        ("fabs", np.abs, [-0.5, 2.5, -0.0, np.inf])]


@pytest.mark.parametrize("name, reference, values", MATH, ids=[m[0] for m in MATH])
def test_math_intrinsics_match_numpy_in_float32(name, reference, values):
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, f"emu_{name}", [_global_pointer()], ["x"])
    x, = fn.args
    at = L.at(b, x, b.zext(_sreg(b, "tid"), L.I64))
    b.store(L.intrinsic(b, name, [b.load(at)], F32, [F32]), at)
    b.ret_void()
    _assembles(module, fn.name)
    x = np.array(values, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        expected = reference(x.astype(np.float64)).astype(np.float32)
    cuda_emulator.launch(fn, 1, 4, [x])
    np.testing.assert_array_equal(x, expected)


def test_maxnum_ignores_nan_where_maximum_propagates_it():
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, "emu_maxima", [_global_pointer()], ["x"])
    x, = fn.args
    a, c = b.load(L.at(b, x, 0)), b.load(L.at(b, x, 1))
    b.store(L.intrinsic(b, "maxnum", [a, c], F32, [F32]), L.at(b, x, 2))
    b.store(L.intrinsic(b, "maximum", [a, c], F32, [F32]), L.at(b, x, 3))
    b.ret_void()
    _assembles(module, "emu_maxima")
    x = np.array([np.nan, 1.0, 0, 0], np.float32)
    cuda_emulator.launch(fn, 1, 1, [x])
    assert x[2] == 1.0 and np.isnan(x[3])


def test_float64_fma_beyond_double_range_is_infinite():
    """IEEE fma rounds an exact result beyond double's range to +-inf (it raised)."""
    from runtime.cuda.emulator.operations import _fma_f64
    assert _fma_f64(1e300, 1e300, 1.0) == float("inf")
    assert _fma_f64(-1e300, 1e300, 1.0) == float("-inf")
    assert _fma_f64(1e300, 1e10, -1e308) == float("inf")
    from fractions import Fraction
    exact = Fraction(0.1) * Fraction(0.1) - Fraction(0.01)
    assert _fma_f64(0.1, 0.1, -0.01) == float(exact)  # one rounding, not two
    assert _fma_f64(0.1, 0.1, -0.01) != 0.1 * 0.1 - 0.01



def test_half_words_convert_as_ptx_cvt_and_narrow_words_load_as_vectors():
    """The 16-bit float kernels' instructions: float32 rounded to half to nearest even
    (cvt.rn.f16.f32: ties to even, past 65504 to inf, into subnormals) and stored as an
    i16 word; i16 words loaded four to a vector (ld.v4.b16), bitcast to half and widened
    (cvt.f32.f16)."""
    module = nvptx.new_module()
    I16, HALF = ir.IntType(16), ir.HalfType()
    fn, b = nvptx.kernel(module, "emu_half", [_global_pointer(I16), _global_pointer(F32),
                                              _global_pointer(F32), _global_pointer(I16)],
                         ["halved", "widened", "x", "words"])
    halved, widened, x, words = fn.args
    i = b.zext(_sreg(b, "tid"), L.I64)
    b.store(b.bitcast(b.fptrunc(b.load(L.at(b, x, i)), HALF), I16), L.at(b, halved, i))
    four = L.load_vector(b, L.at(b, words, b.mul(b.udiv(i, L.i64(4)), L.i64(4))), 4, 8)
    word = b.extract_element(four, b.trunc(b.urem(i, L.i64(4)), L.I32))
    b.store(b.fpext(b.bitcast(word, HALF), F32), L.at(b, widened, i))
    b.ret_void()
    _assembles(module, "emu_half")
    x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 65519.0, 65520.0, -2.0 ** -25,
                  2.0 ** -24 * 1.5, np.nan, -0.0], np.float32)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)
    halved, widened = np.zeros(8, np.int16), np.zeros(8, np.float32)
    cuda_emulator.launch(fn, 1, 8, [halved, widened, x, expected.view(np.int16)])
    np.testing.assert_array_equal(halved.view(np.float16)[:6], expected[:6])
    assert np.isnan(halved.view(np.float16)[6]) and halved[7] == np.int16(-0x8000)
    np.testing.assert_array_equal(widened, expected.astype(np.float32))
