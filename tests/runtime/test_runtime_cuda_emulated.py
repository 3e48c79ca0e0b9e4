"""runtime/cuda/emulated.py, the emulated CUDA device: runtime.cuda.driver.Driver's methods over
host memory, kernels from runtime/cuda/nvptx.py loaded by their PTX and run on the emulator,
every misuse a CudaError as the driver gives. The tests that hold on any device run on the
real driver too where a GPU is usable (marked gpu); the rest check what only the emulator
can show (fresh memory's bytes, its limits, bad accesses)."""
import ctypes
import inspect
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import llvmlite.ir as ir
import numpy as np
import pytest

import eager
from runtime.cuda import allocator as cuda_allocator, current, nvptx
from runtime.llvm import toolkit as L
from runtime.llvm.cache import KernelCache
from runtime.llvm.cache_trust import ptx_problem
from runtime.cuda.driver import CudaError, CudaUnavailable, Driver
from runtime.cuda.allocator import CachingAllocator, CudaOutOfMemory
from runtime.cuda.emulated import EmulatedDriver

MiB = 1 << 20
ROOT = Path(__file__).parents[2]
F32 = ir.FloatType()


@pytest.fixture
def emulated():
    found = EmulatedDriver(memory=64 * MiB)
    found.activate(0)
    return found


@pytest.fixture(params=["emulated", pytest.param("gpu", marks=pytest.mark.gpu)])
def device(request):
    """The emulated driver, and the process's driver where it finds a GPU."""
    if request.param == "emulated":
        found = EmulatedDriver(memory=64 * MiB)
    else:
        try:
            found = current.driver()
        except CudaUnavailable as missing:
            pytest.skip(f"no usable GPU: {missing}")
    found.activate(0)
    return found


def _status(caught) -> tuple:
    return caught.value.call, caught.value.name


def _add_module(name="kiln_add"):
    """out[i] = x[i] + y[i] for i < n, grid-stride, at most 256 threads a block."""
    module = nvptx.new_module()
    pointer = ir.PointerType(F32, 1)
    fn, b = nvptx.kernel(module, name, [pointer, pointer, pointer, L.I64],
                         ["out", "x", "y", "n"], max_threads=256)
    out, x, y, n = fn.args
    start, step = L.Target.of(module).grid_stride(b)
    with L.for_range(b, start, n, step) as i:
        b.store(b.fadd(b.load(L.at(b, x, i)), b.load(L.at(b, y, i))), L.at(b, out, i))
    b.ret_void()
    return module


def _to_device(drv, array: np.ndarray, extra: int = 0) -> int:
    pointer = drv.alloc(array.nbytes + extra)
    drv.copy_to_device(pointer, array.ctypes.data, array.nbytes)
    return pointer


def _to_host(drv, pointer: int, like: np.ndarray) -> np.ndarray:
    out = np.empty_like(like)
    drv.copy_to_host(out.ctypes.data, pointer, out.nbytes)
    return out


def _pointers(*addresses):
    return [ctypes.c_uint64(a) for a in addresses]


# the Driver's shape ---------------------------------------------------------------------
def test_the_emulated_driver_has_every_public_method_of_the_driver_with_its_signature():
    def public(cls):
        return {name: inspect.signature(member) for name, member in vars(cls).items()
                if inspect.isfunction(member) and not name.startswith("_")}

    driver_methods = public(Driver)  # not the classmethod Driver.open(lib): no library here
    emulated_methods = public(EmulatedDriver)
    assert len(driver_methods) > 30
    assert {name: emulated_methods.get(name) for name in driver_methods} == driver_methods


def test_the_device_is_named_and_described(emulated):
    assert emulated.device_count() == 1 and current.KILN_CUDA["emulate"]
    assert emulated.device_name(0) == "kiln CUDA emulator"
    assert emulated.compute_capability(0) == (9, 0)
    assert emulated.total_memory(0) == 64 * MiB == emulated.memory_info()[1]
    assert emulated.attribute(0, "multiprocessor_count") > 0
    assert emulated.version() >= 12000
    with pytest.raises(CudaError) as caught:
        emulated.device_name(1)
    assert _status(caught) == ("cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE")
    with pytest.raises(KeyError):
        emulated.attribute(0, "warp_size")


def test_memory_calls_need_a_device_activated_on_the_calling_thread():
    fresh = EmulatedDriver()
    with pytest.raises(CudaError) as caught:
        fresh.alloc(16)
    assert _status(caught) == ("cuMemAlloc_v2", "CUDA_ERROR_INVALID_CONTEXT")
    fresh.activate(0)
    assert fresh.alloc(16) and fresh.current_device() == 0
    elsewhere = []
    thread = threading.Thread(target=lambda: elsewhere.append(fresh.current_device()))
    thread.start()
    thread.join()
    assert elsewhere == [None]


# memory ---------------------------------------------------------------------------------
def test_addresses_are_aligned_distinct_and_never_zero(emulated):
    sizes = [1, 255, 256, 257, 4096, 3]
    pointers = [emulated.alloc(n) for n in sizes]
    assert all(p and p % 256 == 0 for p in pointers)
    spans = sorted(zip(pointers, sizes))
    assert all(start + n <= following for (start, n), (following, _) in zip(spans, spans[1:]))
    emulated.free(pointers[0])
    assert emulated.alloc(1) not in pointers  # an address is never given twice


def test_memory_round_trips_at_offsets_and_fresh_memory_reads_as_0xff(device):
    host = np.arange(100, dtype=np.float32)
    free = device.memory_info()[0]
    pointer = device.alloc(1000)
    device.copy_to_device(pointer + 40, host.ctypes.data, 200)
    back = np.zeros(60, np.float32)
    device.copy_to_host(back.ctypes.data, pointer + 40, 240)
    np.testing.assert_array_equal(back[:50], host[:50])
    if isinstance(device, EmulatedDriver):
        assert (back[50:].view(np.uint32) == 0xFFFFFFFF).all()
        assert device.memory_info() == (free - 1000, device.total_memory(0))
    device.free(pointer)


def test_memsets_fill_bytes_and_words_on_the_default_stream_and_others(device):
    pointer, stream = device.alloc(64), device.stream_create()
    device.memset8(pointer, 0, 64)
    device.memset8(pointer + 3, 0x1AB, 5)  # the byte's low 8 bits, as cuMemsetD8 takes it
    device.memset32(pointer + 16, int(np.float32(1.5).view(np.uint32)), 4, stream)
    device.stream_synchronize(stream)
    got = np.zeros(64, np.uint8)
    device.copy_to_host(got.ctypes.data, pointer, 64)
    assert list(got[:9]) == [0, 0, 0] + [0xAB] * 5 + [0]
    np.testing.assert_array_equal(got[16:32].view(np.float32), [1.5] * 4)
    assert not got[32:].any()
    device.stream_destroy(stream)
    device.free(pointer)


def test_a_word_memset_at_an_unaligned_address_is_refused(emulated):
    pointer = emulated.alloc(64)
    with pytest.raises(CudaError) as caught:
        emulated.memset32(pointer + 2, 7, 4)
    assert _status(caught) == ("cuMemsetD32_v2", "CUDA_ERROR_INVALID_VALUE")
    assert "not 4-byte aligned" in str(caught.value)


def test_device_to_device_copies_within_and_between_blocks(device):
    host = np.arange(64, dtype=np.uint8)
    first, second = _to_device(device, host), device.alloc(64)
    stream = device.stream_create()
    device.copy_device(second, first + 8, 32, stream)
    device.stream_synchronize(stream)
    device.copy_device(first + 4, first, 16)  # overlapping, forward
    np.testing.assert_array_equal(_to_host(device, second, host[:32]), host[8:40])
    expected = host.copy()
    expected[4:20] = host[0:16]
    np.testing.assert_array_equal(_to_host(device, first, host), expected)
    device.stream_destroy(stream)
    device.free(first)
    device.free(second)


def test_a_copy_beyond_its_block_names_the_pointer_and_the_block(emulated):
    pointer = emulated.alloc(100)
    host = np.zeros(64, np.uint8)
    with pytest.raises(CudaError) as caught:
        emulated.copy_to_device(pointer + 50, host.ctypes.data, 64)
    assert _status(caught) == ("cuMemcpyHtoD_v2", "CUDA_ERROR_INVALID_VALUE")
    assert f"runs past the end of the block of 100 bytes at {pointer:#x}" in str(caught.value)


def test_freed_memory_is_gone(emulated):
    pointer = emulated.alloc(256)
    emulated.free(pointer)
    host = np.zeros(4, np.uint8)
    for use in (lambda: emulated.copy_to_host(host.ctypes.data, pointer, 4),
                lambda: emulated.memset8(pointer, 0, 4), lambda: emulated.free(pointer)):
        with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE") as caught:
            use()
        assert f"the block of 256 bytes at {pointer:#x}, freed" in str(caught.value)
    assert emulated.resources()["allocations"] == 0


def test_free_takes_only_what_alloc_returned(emulated):
    pointer = emulated.alloc(256)
    with pytest.raises(CudaError) as caught:
        emulated.free(pointer + 16)
    assert _status(caught) == ("cuMemFree_v2", "CUDA_ERROR_INVALID_VALUE")
    emulated.free(pointer)


def test_out_of_memory_is_the_drivers_error_and_the_allocators_retry_then_failure():
    small = EmulatedDriver(memory=8 * MiB)
    small.activate(0)
    with pytest.raises(CudaError) as caught:
        small.alloc(8 * MiB + 1)
    assert (caught.value.status, caught.value.name) == (2, "CUDA_ERROR_OUT_OF_MEMORY")
    allocator = CachingAllocator(small)
    allocator.malloc(3 * MiB).free()              # a 4 MiB block, cached
    kept = allocator.malloc(5 * MiB)              # 6 MiB fits once the cache is emptied
    assert allocator.stats()["num_alloc_retries"] == 1
    assert small.memory_info()[0] == 2 * MiB
    with pytest.raises(CudaOutOfMemory) as failed:
        allocator.malloc(3 * MiB)
    assert failed.value.requested == 3 * MiB
    assert allocator.stats()["num_ooms"] == 1
    kept.free()
    allocator.empty_cache()
    assert small.resources()["bytes"] == 0


def test_pinned_host_memory_is_real_memory_the_copies_read(device):
    pinned = cuda_allocator.PinnedMemory(device, 16)
    host = np.frombuffer(pinned.buffer(), np.uint8)
    host[:] = np.arange(16)
    pointer = device.alloc(16)
    device.copy_to_device(pointer, pinned.pointer, 16)
    np.testing.assert_array_equal(_to_host(device, pointer, host), np.arange(16))
    pinned.free()
    device.free(pointer)
    with pytest.raises(CudaError, match="cuMemFreeHost failed with CUDA_ERROR_INVALID_VALUE"):
        EmulatedDriver().host_free(host.ctypes.data)


# kernels --------------------------------------------------------------------------------
def test_a_kernel_from_nvptx_loads_from_its_ptx_and_adds_on_the_device(device):
    n = 1000
    x, y = (np.random.default_rng(i).random(n, np.float32) for i in range(2))
    module = device.load_module(nvptx.compile_ptx(_add_module()))
    kernel = device.function(module, "kiln_add")
    assert device.function_attribute(kernel, "max_threads_per_block") <= 256
    buffers = [device.alloc(x.nbytes), _to_device(device, x), _to_device(device, y)]
    device.launch(kernel, 3, 256, _pointers(*buffers) + [ctypes.c_int64(n)])
    device.synchronize()
    np.testing.assert_array_equal(_to_host(device, buffers[0], x), x + y)
    for pointer in buffers:
        device.free(pointer)
    device.unload_module(module)


def test_pointer_arguments_at_an_offset_into_a_block_read_and_write_there(device):
    whole = np.arange(64, dtype=np.float32)
    block = _to_device(device, whole)
    module = device.load_module(nvptx.compile_ptx(_add_module()))
    kernel = device.function(module, "kiln_add")
    # out = elements 40.., x = elements 4.., y = elements 8..: 10 of each
    device.launch(kernel, 1, 32, _pointers(block + 160, block + 16, block + 32) +
                  [ctypes.c_int64(10)])
    expected = whole.copy()
    expected[40:50] = whole[4:14] + whole[8:18]
    np.testing.assert_array_equal(_to_host(device, block, whole), expected)
    device.free(block)
    device.unload_module(module)


@pytest.fixture
def add_kernel(emulated):
    kernel = emulated.function(emulated.load_module(nvptx.compile_ptx(_add_module())),
                               "kiln_add")
    return emulated, kernel


def test_a_kernel_reading_past_its_buffers_is_an_illegal_address(add_kernel):
    emulated, kernel = add_kernel
    buffers = [emulated.alloc(40) for _ in range(3)]
    with pytest.raises(CudaError) as caught:
        emulated.launch(kernel, 1, 32, _pointers(*buffers) + [ctypes.c_int64(11)])
    assert _status(caught) == ("cuLaunchKernel", "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert "reads 4 bytes at byte offset 40 (element 10) of parameter 'x'" in \
        str(caught.value)


def test_a_freed_or_unknown_pointer_argument_is_an_illegal_address_naming_it(add_kernel):
    emulated, kernel = add_kernel
    buffers = [emulated.alloc(40) for _ in range(3)]
    emulated.free(buffers[2])
    with pytest.raises(CudaError) as caught:
        emulated.launch(kernel, 1, 32, _pointers(*buffers) + [ctypes.c_int64(1)])
    assert _status(caught) == ("cuLaunchKernel", "CUDA_ERROR_ILLEGAL_ADDRESS")
    assert f"kernel argument 2 ('y', float addrspace(1)*) is {buffers[2]:#x}, which points " \
        "into the block of 40 bytes" in str(caught.value)
    with pytest.raises(CudaError, match="argument 1 .'x'.* 0x10, which points into no "
                                        "allocation"):
        emulated.launch(kernel, 1, 32, _pointers(buffers[0], 16, buffers[1]) +
                        [ctypes.c_int64(1)])


def test_a_misaligned_pointer_argument_is_refused_naming_it(add_kernel):
    emulated, kernel = add_kernel
    buffers = [emulated.alloc(40) for _ in range(3)]
    with pytest.raises(CudaError) as caught:
        emulated.launch(kernel, 1, 32, _pointers(buffers[0] + 2, *buffers[1:]) +
                        [ctypes.c_int64(1)])
    assert _status(caught) == ("cuLaunchKernel", "CUDA_ERROR_MISALIGNED_ADDRESS")
    assert "kernel argument 0 ('out'" in str(caught.value)


def test_a_null_pointer_argument_is_passed_and_faults_only_when_read(add_kernel):
    emulated, kernel = add_kernel
    buffers = [emulated.alloc(40) for _ in range(3)]
    emulated.launch(kernel, 1, 32, _pointers(buffers[0], 0, buffers[2]) + [ctypes.c_int64(0)])
    with pytest.raises(CudaError, match="ILLEGAL_ADDRESS.*parameter 'x'"):
        emulated.launch(kernel, 1, 32, _pointers(buffers[0], 0, buffers[2]) +
                        [ctypes.c_int64(1)])


def test_arguments_are_checked_as_the_driver_reads_them(add_kernel):
    emulated, kernel = add_kernel
    buffers = _pointers(*(emulated.alloc(40) for _ in range(3)))
    with pytest.raises(CudaError, match=r"INVALID_VALUE.*argument 3 \('n', i64\) takes 8 "
                                        r"bytes, given a c_int of 4"):
        emulated.launch(kernel, 1, 32, buffers + [ctypes.c_int32(1)])
    with pytest.raises(CudaError, match="INVALID_VALUE.*takes 4 arguments, given 3"):
        emulated.launch(kernel, 1, 32, buffers)
    with pytest.raises(TypeError, match="kernel argument 3 is a int"):
        emulated.launch(kernel, 1, 32, buffers + [1])
    with pytest.raises(CudaError, match=r"INVALID_VALUE.*at most 256 threads for 'kiln_add'"):
        emulated.launch(kernel, 1, 512, buffers + [ctypes.c_int64(1)])


def test_dynamic_shared_memory_beyond_48_kib_needs_the_attribute(add_kernel):
    emulated, kernel = add_kernel
    args = _pointers(*(emulated.alloc(4) for _ in range(3))) + [ctypes.c_int64(1)]
    with pytest.raises(CudaError, match="INVALID_VALUE.*49153 bytes of dynamic shared"):
        emulated.launch(kernel, 1, 32, args, shared_bytes=49153)
    emulated.set_function_attribute(kernel, "max_dynamic_shared_bytes", 64 << 10)
    emulated.launch(kernel, 1, 32, args, shared_bytes=49153)
    assert emulated.function_attribute(kernel, "max_dynamic_shared_bytes") == 64 << 10


def test_barrier_divergence_is_a_launch_failure_with_the_emulators_words(emulated):
    module = nvptx.new_module()
    fn, b = nvptx.kernel(module, "diverges", [])
    tid = L.Target.of(module).special_register(b, "tid")
    with b.if_then(b.icmp_unsigned("<", tid, ir.Constant(tid.type, 16))):
        L.intrinsic(b, "nvvm.barrier.cta.sync.aligned.all", [L.i32(0)])
    b.ret_void()
    kernel = emulated.function(emulated.load_module(nvptx.compile_ptx(module)), "diverges")
    with pytest.raises(CudaError) as caught:
        emulated.launch(kernel, 1, 32, [])
    assert _status(caught) == ("cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED")
    assert "barrier divergence" in str(caught.value)


def test_ptx_kiln_did_not_make_here_is_invalid_ptx_with_a_log_saying_why(emulated):
    hand_written = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n"
    from_text = nvptx.compile_ptx(str(_add_module("from_text")))
    for ptx in (hand_written, from_text):
        with pytest.raises(CudaError) as caught:
            emulated.load_module(ptx)
        assert _status(caught) == ("cuModuleLoadDataEx", "CUDA_ERROR_INVALID_PTX")
        assert caught.value.log.startswith("the CUDA emulator runs only kernels kiln generated")


def _needs_ptxas():
    if nvptx.ptxas_path() is None:
        pytest.skip("ptxas is not installed: the emulated driver cannot assemble PTX here")


def test_every_module_the_emulated_device_loads_is_assembled_by_ptxas(emulated):
    _needs_ptxas()
    emulated.load_module(nvptx.compile_ptx(_add_module()))
    emulated.load_module(nvptx.compile_ptx(_add_module("kiln_add_again")).encode())
    assert emulated.assembled == 2


def test_ptx_that_ptxas_refuses_is_invalid_ptx_with_ptxas_output_as_the_log(emulated):
    _needs_ptxas()
    broken = nvptx.compile_ptx(_add_module("kiln_broken")).replace("ret;", "ret.banana;")
    nvptx.remember_source(broken, _add_module("kiln_broken"))  # the emulator could run it
    with pytest.raises(CudaError) as caught:
        emulated.load_module(broken)
    assert _status(caught) == ("cuModuleLoadDataEx", "CUDA_ERROR_INVALID_PTX")
    assert "ptxas -arch=sm_90 refused the PTX" in caught.value.log
    assert "banana" in caught.value.log
    assert emulated.assembled == 0 and emulated.resources()["modules"] == 0


def test_kernels_are_found_by_name_and_gone_with_their_module(emulated):
    module = emulated.load_module(nvptx.compile_ptx(_add_module()).encode())
    with pytest.raises(CudaError) as caught:
        emulated.function(module, "kiln_sub")
    assert _status(caught) == ("cuModuleGetFunction('kiln_sub')", "CUDA_ERROR_NOT_FOUND")
    kernel = emulated.function(module, "kiln_add")
    emulated.unload_module(module)
    with pytest.raises(CudaError, match="cuLaunchKernel failed with CUDA_ERROR_INVALID_HANDLE"):
        emulated.launch(kernel, 1, 1, [])
    assert emulated.resources()["modules"] == 0


def test_a_module_whose_ptx_the_kernel_cache_gives_loads_and_runs(emulated, tmp_path):
    nvptx.cached_ptx(_add_module("cached_add"), cache=KernelCache(tmp_path, ptx_problem))
    again, fresh = _add_module("cached_add"), KernelCache(tmp_path, ptx_problem)
    ptx = nvptx.cached_ptx(again, cache=fresh)
    assert fresh.stats.disk_hits == 1 and fresh.stats.misses == 0  # not compiled here
    assert nvptx.source_of(ptx) is again
    emulated.function(emulated.load_module(ptx), "cached_add")


def test_nvptx_remembers_modules_only_when_asked_and_only_the_newest(monkeypatch):
    monkeypatch.delenv("KILN_CUDA", raising=False)
    monkeypatch.setattr(nvptx, "_recording", False)
    monkeypatch.setattr(nvptx, "_sources", type(nvptx._sources)())
    assert nvptx.source_of(nvptx.compile_ptx(_add_module("unrecorded"))) is None
    nvptx.record_sources()
    monkeypatch.setattr(nvptx, "_SOURCES_KEPT", 2)
    modules = [_add_module(f"kernel_{i}") for i in range(3)]
    ptx = [nvptx.compile_ptx(m) for m in modules]
    assert [nvptx.source_of(text) for text in ptx] == [None, modules[1], modules[2]]


# streams and events ---------------------------------------------------------------------
def test_events_time_the_host_clock_between_their_records(emulated):
    stream = emulated.stream_create()
    start, end, untimed = emulated.event_create(), emulated.event_create(), \
        emulated.event_create(timing=False)
    with pytest.raises(CudaError, match="cuEventElapsedTime failed with "
                                        "CUDA_ERROR_INVALID_HANDLE"):
        emulated.event_elapsed_ms(start, end)
    emulated.event_record(start, stream)
    time.sleep(0.02)
    emulated.event_record(end)
    emulated.event_record(untimed)
    emulated.stream_wait_event(stream, end)
    assert emulated.event_done(end) and emulated.stream_done(stream)
    emulated.event_synchronize(end)
    assert 19.99 <= emulated.event_elapsed_ms(start, end) < 10_000
    with pytest.raises(CudaError, match="INVALID_HANDLE"):
        emulated.event_elapsed_ms(start, untimed)
    for event in (start, end, untimed):
        emulated.event_destroy(event)
    emulated.stream_destroy(stream)
    assert emulated.resources() == dict.fromkeys(emulated.resources(), 0)
    for use in (lambda: emulated.event_record(start), lambda: emulated.stream_done(stream),
                lambda: emulated.copy_device(0, 0, 0, stream)):
        with pytest.raises(CudaError, match="INVALID_HANDLE"):
            use()


# choosing the driver --------------------------------------------------------------------
def _process_driver():
    try:
        return current.driver()
    except CudaUnavailable as missing:
        return str(missing)


def test_use_driver_switches_the_process_driver_and_its_allocators_then_restores(emulated):
    before, outside = current._allocators, _process_driver()
    with current.use_driver(emulated):
        assert current.driver() is emulated and current.device_count() == 1
        inner = EmulatedDriver()
        with current.use_driver(inner):
            assert current.driver() is inner
        memory = current.allocator(0).malloc(1000)
        assert emulated.resources()["allocations"] == 1
        assert eager.cuda.get_device_name() == "kiln CUDA emulator"
        memory.free()
    assert current._allocators is before and _process_driver() is outside


def test_kiln_cuda_must_name_a_known_choice(monkeypatch):
    monkeypatch.setattr(current, "_driver", None)
    monkeypatch.setattr(current, "_failure", None)
    monkeypatch.setattr(current, "_chosen", [])
    monkeypatch.setenv("KILN_CUDA", "emulated")
    with pytest.raises(ValueError, match="KILN_CUDA='emulated' is not understood; it may be "
                                         "'': the CUDA driver .*; 'emulate': kiln's emulated"):
        current.driver()


def test_kiln_cuda_emulate_makes_the_emulated_driver_the_processs():
    script = ("import eager; from runtime.cuda import current; d = current.driver(); "
              "print(type(d).__name__, d is current.driver(), current.device_count(), "
              "eager.cuda.get_device_name(), sep=',')")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, KILN_CUDA="emulate"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "EmulatedDriver,True,1,kiln CUDA emulator"
