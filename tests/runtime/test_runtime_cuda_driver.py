"""runtime/cuda/driver.py and runtime/cuda/allocator.py over a fake libcuda (tests/runtime/
fake_cuda.py): every call checked, every error naming its call and the driver's words,
the caching allocator's reuse, statistics and out-of-memory retry. No GPU needed."""
import ctypes
import inspect
import threading

import numpy as np
import pytest

from runtime.cuda import current
from runtime.cuda import driver as cuda
from runtime.cuda.driver import CudaError, CudaUnavailable, Driver
from runtime.cuda.allocator import (CachingAllocator, CudaOutOfMemory, PinnedMemory,
                                    size_class)
from tests.runtime import fake_cuda
from tests.runtime.fake_cuda import FakeCuda


def test_the_fake_takes_every_bound_function_with_its_declared_arguments():
    """So a Driver call that passes the fake passes the same arguments to libcuda."""
    arity = {name: len(inspect.signature(getattr(FakeCuda, name)).parameters) - 1
             for name in cuda._SIGNATURES}
    assert arity == {name: len(argtypes) for name, argtypes in cuda._SIGNATURES.items()}


def test_load_library_declares_the_signatures_or_says_the_library_is_missing():
    try:
        lib = cuda.load_library()
    except CudaUnavailable as missing:
        assert str(missing).startswith("the CUDA driver library (libcuda.so) was not found")
    else:
        assert tuple(lib.cuMemAlloc_v2.argtypes) == cuda._SIGNATURES["cuMemAlloc_v2"]
        assert lib.cuEventElapsedTime_v2.restype is ctypes.c_int


@pytest.fixture
def fake():
    return FakeCuda()


@pytest.fixture
def drv(fake):
    found = Driver.open(fake)
    found.activate(0)
    return found


def test_open_initialises_the_driver_and_reads_the_device(fake):
    drv = Driver.open(fake)
    assert fake.calls[:2] == ["cuInit", "cuDeviceGetCount"]
    assert drv.device_count() == 1
    assert drv.device_name(0) == "Fake GPU 0"
    assert drv.compute_capability(0) == (9, 0)
    assert drv.total_memory(0) == 1 << 30
    assert drv.attribute(0, "multiprocessor_count") == 132
    assert drv.version() == 12040


def test_cuinit_failing_makes_the_driver_unavailable_with_the_drivers_words(fake):
    fake.fail("cuInit", fake_cuda.NO_DEVICE)
    with pytest.raises(CudaUnavailable, match=r"^cuInit failed with CUDA_ERROR_NO_DEVICE "
                                              r"\(100\): no CUDA-capable device is detected$"):
        Driver.open(fake)


def test_no_device_makes_the_driver_unavailable():
    with pytest.raises(CudaUnavailable, match="^no CUDA device was found$"):
        Driver.open(FakeCuda(devices=0))


def test_an_error_names_the_call_the_error_name_and_its_text(drv, fake):
    fake.fail("cuCtxSynchronize", fake_cuda.LAUNCH_FAILED)
    with pytest.raises(CudaError) as caught:
        drv.synchronize()
    assert str(caught.value) == ("cuCtxSynchronize failed with CUDA_ERROR_LAUNCH_FAILED (719): "
                                 "unspecified launch failure")
    assert (caught.value.call, caught.value.status) == ("cuCtxSynchronize", 719)
    assert isinstance(caught.value, RuntimeError)


def test_an_error_code_the_driver_cannot_name_is_still_reported(drv, fake):
    fake.fail("cuCtxSynchronize", 12345)
    with pytest.raises(CudaError, match=r"cuCtxSynchronize failed with CUDA error 12345 "
                                        r"\(12345\): unknown to this driver"):
        drv.synchronize()


def test_a_call_before_cuinit_is_refused_by_the_driver(fake):
    with pytest.raises(CudaError, match="cuDeviceGetCount failed with CUDA_ERROR_NOT_INITIALIZED"):
        Driver(fake).device_count()


def test_a_device_that_does_not_exist_is_an_error(drv):
    with pytest.raises(CudaError, match="cuDeviceGet failed with CUDA_ERROR_INVALID_DEVICE"):
        drv.device_name(3)


def test_activate_retains_the_primary_context_once_and_sets_it_current(fake):
    drv = Driver.open(fake)
    drv.activate(0)
    drv.activate(0)
    assert fake.calls.count("cuDevicePrimaryCtxRetain") == 1
    assert fake.calls.count("cuCtxSetCurrent") == 1
    assert fake.current_context == 0xC0 and drv.current_device() == 0


def test_a_context_is_current_per_thread(fake):
    drv = Driver.open(fake)
    drv.activate(0)
    seen = []
    worker = threading.Thread(target=lambda: seen.append(drv.current_device()))
    worker.start()
    worker.join()
    assert seen == [None]


def test_a_module_loads_from_ptx_and_gives_its_kernels(drv, fake):
    fake.define_kernel("kiln_add", [])
    module = drv.load_module(".version 8.0\n.target sm_90\n")
    assert fake.last_ptx == b".version 8.0\n.target sm_90\n"
    assert drv.function(module, "kiln_add") != 0
    assert drv.function_attribute(drv.function(module, "kiln_add"), "registers") == 32
    drv.unload_module(module)


def test_a_failing_module_load_raises_with_the_jit_log(drv, fake):
    fake.jit_error_log = "ptxas application ptx input, line 3; error   : Unknown symbol 'nonsense'"
    with pytest.raises(CudaError) as caught:
        drv.load_module("nonsense;")
    error = caught.value
    assert error.call == "cuModuleLoadDataEx" and error.name == "CUDA_ERROR_INVALID_PTX"
    assert error.log == fake.jit_error_log
    assert str(error).startswith("cuModuleLoadDataEx failed with CUDA_ERROR_INVALID_PTX (218): "
                                 "a PTX JIT compilation failed\nJIT error log:\nptxas application")


def test_a_missing_kernel_is_named(drv, fake):
    module = drv.load_module("ptx")
    with pytest.raises(CudaError, match=r"cuModuleGetFunction\('nope'\) failed with "
                                        r"CUDA_ERROR_NOT_FOUND \(500\): named symbol not found"):
        drv.function(module, "nope")


def test_a_launch_passes_each_argument_through_a_pointer_to_it(drv, fake):
    fake.define_kernel("k", [ctypes.c_uint64, ctypes.c_int32, ctypes.c_float])
    function = drv.function(drv.load_module("ptx"), "k")
    stream = drv.stream_create()
    drv.launch(function, 40, (256, 2), [ctypes.c_uint64(0x7F0000001000), ctypes.c_int32(-7),
                                        ctypes.c_float(1.5)], shared_bytes=1024, stream=stream)
    assert fake.launches == [("k", (40, 1, 1), (256, 2, 1), 1024, stream,
                              [0x7F0000001000, -7, 1.5])]


def test_a_launch_refuses_what_is_not_a_ctypes_value_and_bad_dimensions(drv, fake):
    fake.define_kernel("k", [ctypes.c_uint64])
    function = drv.function(drv.load_module("ptx"), "k")
    with pytest.raises(TypeError, match="kernel argument 0 is a int: pass a ctypes value"):
        drv.launch(function, 1, 1, [5])
    with pytest.raises(ValueError, match=r"grid is 1 to 3 positive ints, got \(0,\)"):
        drv.launch(function, 0, 1, [ctypes.c_uint64(0)])
    assert fake.launches == []


def test_a_failing_launch_is_an_error_naming_culaunchkernel(drv, fake):
    fake.define_kernel("k", [])
    function = drv.function(drv.load_module("ptx"), "k")
    fake.fail("cuLaunchKernel", fake_cuda.LAUNCH_FAILED)
    with pytest.raises(CudaError, match=r"^cuLaunchKernel failed with CUDA_ERROR_LAUNCH_FAILED"):
        drv.launch(function, 1, 32, [])


@pytest.mark.parametrize("stream", [None, "created"])
def test_copies_round_trip_host_device_device_host(drv, stream):
    stream = drv.stream_create() if stream else None
    source = np.arange(64, dtype=np.float32)
    back = np.zeros_like(source)
    first, second = drv.alloc(source.nbytes), drv.alloc(source.nbytes)
    drv.copy_to_device(first, source.ctypes.data, source.nbytes, stream)
    drv.copy_device(second, first, source.nbytes, stream)
    drv.copy_to_host(back.ctypes.data, second, source.nbytes, stream)
    np.testing.assert_array_equal(back, source)
    drv.free(first)
    drv.free(second)


def test_memset_fills_bytes_and_words(drv):
    pointer = drv.alloc(16)
    drv.memset8(pointer, 0xAB, 8)
    drv.memset32(pointer + 8, np.float32(2.5).view(np.uint32).item(), 2)
    back = np.zeros(16, dtype=np.uint8)
    drv.copy_to_host(back.ctypes.data, pointer, 16)
    assert list(back[:8]) == [0xAB] * 8
    np.testing.assert_array_equal(back[8:].view(np.float32), [2.5, 2.5])


def test_copy_and_free_errors_name_their_calls(drv):
    with pytest.raises(CudaError, match="cuMemcpyHtoD_v2 failed with CUDA_ERROR_INVALID_VALUE"):
        drv.copy_to_device(0xDEAD, np.zeros(1).ctypes.data, 8)
    with pytest.raises(CudaError, match="cuMemFree_v2 failed with CUDA_ERROR_INVALID_VALUE"):
        drv.free(0xDEAD)
    with pytest.raises(CudaError, match="cuMemsetD8Async failed with CUDA_ERROR_INVALID_HANDLE"):
        drv.memset8(drv.alloc(8), 0, 8, stream=0xBAD)


def test_pinned_memory_is_a_host_buffer_freed_once(drv, fake):
    pinned = PinnedMemory(drv, 32)
    view = np.frombuffer(pinned.buffer(), dtype=np.float32)
    view[:] = np.arange(8)
    device = drv.alloc(32)
    drv.copy_to_device(device, pinned.pointer, 32, stream=0)
    back = np.zeros(8, dtype=np.float32)
    drv.copy_to_host(back.ctypes.data, device, 32)
    np.testing.assert_array_equal(back, np.arange(8))
    del view
    pinned.free()
    pinned.free()
    assert fake.calls.count("cuMemFreeHost") == 1 and fake.host == {}


def test_streams_and_events_report_and_check(drv, fake):
    stream = drv.stream_create()
    event = drv.event_create()
    drv.event_record(event, stream)
    drv.stream_wait_event(0, event)
    assert drv.stream_done(stream) and drv.event_done(event)
    fake.fail("cuEventQuery", fake_cuda.NOT_READY)
    assert drv.event_done(event) is False
    drv.stream_synchronize(stream)
    drv.stream_destroy(stream)
    with pytest.raises(CudaError,
                       match="cuStreamSynchronize failed with CUDA_ERROR_INVALID_HANDLE"):
        drv.stream_synchronize(stream)


def test_event_timing_is_the_time_between_the_records(drv, fake):
    start, end = drv.event_create(), drv.event_create()
    fake.clock_ms = 10.0
    drv.event_record(start)
    fake.clock_ms = 12.5
    drv.event_record(end)
    drv.event_synchronize(end)
    assert drv.event_elapsed_ms(start, end) == 2.5
    untimed = drv.event_create(timing=False)
    drv.event_record(untimed)
    with pytest.raises(CudaError, match="cuEventElapsedTime failed with CUDA_ERROR_INVALID_HANDLE"):
        drv.event_elapsed_ms(start, untimed)
    drv.event_destroy(untimed)


def test_sizes_round_to_their_class():
    assert [size_class(n) for n in (1, 512, 513, (1 << 20) - 1, 1 << 20, (2 << 20) + 1)] == \
        [512, 512, 1024, 1 << 20, 2 << 20, 4 << 20]


def test_the_allocator_reuses_a_freed_block_of_the_same_class_and_stream(drv, fake):
    allocator = CachingAllocator(drv)
    first = allocator.malloc(1000)
    pointer = first.pointer
    first.free()
    again = allocator.malloc(900)  # the same 1024-byte class
    assert again.pointer == pointer and fake.calls.count("cuMemAlloc_v2") == 1
    other_stream = allocator.malloc(900, stream=drv.stream_create())
    assert other_stream.pointer != pointer and fake.calls.count("cuMemAlloc_v2") == 2


def test_a_collected_block_returns_to_the_cache(drv, fake):
    allocator = CachingAllocator(drv)
    memory = allocator.malloc(4096)
    pointer = memory.pointer
    del memory
    assert allocator.malloc(4096).pointer == pointer
    assert allocator.stats()["num_device_alloc"] == 1


def test_the_allocators_stats_track_current_and_peak(drv):
    allocator = CachingAllocator(drv)
    a, b = allocator.malloc(1000), allocator.malloc(3 << 20)
    a.free()
    stats = allocator.stats()
    assert stats["allocated_bytes.all.current"] == 4 << 20
    assert stats["allocated_bytes.all.peak"] == (4 << 20) + 1024
    assert stats["reserved_bytes.all.current"] == (4 << 20) + 1024
    assert stats["requested_bytes.all.current"] == 3 << 20
    assert (stats["allocation.all.current"], stats["segment.all.current"]) == (1, 2)
    b.free()
    allocator.reset_peak_stats()
    assert allocator.stats()["allocated_bytes.all.peak"] == 0
    assert allocator.allocated_bytes() == 0 and allocator.reserved_bytes() == (4 << 20) + 1024


def test_empty_cache_gives_free_blocks_back_and_keeps_those_in_use(drv, fake):
    allocator = CachingAllocator(drv)
    kept, cached = allocator.malloc(512), allocator.malloc(2048)
    cached.free()
    allocator.empty_cache()
    assert list(fake.buffers) == [kept.pointer]
    assert allocator.reserved_bytes() == 512
    assert allocator.stats()["num_device_free"] == 1
    assert fake.calls[-2:] == ["cuCtxSynchronize", "cuMemFree_v2"]


def test_out_of_memory_empties_the_cache_and_retries_once(drv, fake):
    fake.memory = 8 << 20
    allocator = CachingAllocator(drv)
    allocator.malloc(6 << 20).free()  # cached: 6 MiB held, none in use
    fresh = allocator.malloc(4 << 20)
    assert fake.calls[-4:] == ["cuMemAlloc_v2", "cuCtxSynchronize", "cuMemFree_v2",
                               "cuMemAlloc_v2"]
    assert allocator.stats()["num_alloc_retries"] == 1
    assert allocator.reserved_bytes() == 4 << 20 and fresh.size == 4 << 20


def test_out_of_memory_after_the_retry_names_the_requested_bytes(drv, fake):
    fake.memory = 8 << 20
    allocator = CachingAllocator(drv)
    held = allocator.malloc(6 << 20)
    with pytest.raises(CudaOutOfMemory) as caught:
        allocator.malloc(3_000_000)
    assert str(caught.value).startswith(
        "CUDA out of memory. Tried to allocate 2.86 MiB (3000000 bytes) on device 0: "
        "6.00 MiB is allocated by kiln, 6.00 MiB reserved by its cache")
    assert "cuMemAlloc_v2 failed with CUDA_ERROR_OUT_OF_MEMORY (2): out of memory" in \
        str(caught.value)
    assert caught.value.requested == 3_000_000
    assert allocator.stats()["num_ooms"] == 1 and allocator.stats()["num_alloc_retries"] == 1
    assert held.pointer in fake.buffers


def test_an_allocation_error_other_than_out_of_memory_is_not_retried(drv, fake):
    allocator = CachingAllocator(drv)
    fake.fail("cuMemAlloc_v2", fake_cuda.INVALID_CONTEXT)
    with pytest.raises(CudaError, match="cuMemAlloc_v2 failed with CUDA_ERROR_INVALID_CONTEXT"):
        allocator.malloc(100)
    assert allocator.stats()["num_alloc_retries"] == 0


def test_zero_bytes_take_no_block(drv, fake):
    allocator = CachingAllocator(drv)
    memory = allocator.malloc(0)
    assert memory.pointer == 0 and "cuMemAlloc_v2" not in fake.calls
    memory.free()
    assert allocator.stats()["allocation.all.current"] == 0


def test_the_process_allocator_is_made_once_per_existing_device(drv, monkeypatch):
    monkeypatch.setattr(current, "driver", lambda: drv)
    monkeypatch.setattr(current, "_allocators", {})
    assert current.existing_allocator(0) is None
    assert current.allocator(0) is current.allocator(0)
    assert current.existing_allocator(0) is current.allocator(0)
    with pytest.raises(ValueError, match="there is no CUDA device 1: the driver sees 1"):
        current.allocator(1)


def test_without_a_driver_there_are_no_devices_and_a_reason():
    try:
        current.driver()
    except CudaUnavailable as missing:
        assert str(missing)
        assert current.device_count() == 0
    else:
        assert current.device_count() >= 1
