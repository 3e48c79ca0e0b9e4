"""eager.cuda, torch.cuda's shape: without a GPU (clear errors, PyTorch's no-op-safe
calls), over the fake driver of tests/runtime/fake_cuda.py, and on a GPU where the driver
finds one (allocate, copy, load a PTX kernel made by runtime/cuda/nvptx.py, launch)."""
import ctypes

import numpy as np
import pytest

import eager
from runtime.cuda import current
from runtime.cuda import driver as runtime_cuda
from tests.runtime.fake_cuda import FakeCuda


def _no_gpu_reason():
    """Why the driver is unusable here, or None where it is usable."""
    try:
        current.driver()
    except runtime_cuda.CudaUnavailable as missing:
        return str(missing)
    return None


@pytest.fixture
def no_gpu():
    reason = _no_gpu_reason()
    if reason is None:
        pytest.skip("a GPU is usable here: the no-GPU errors cannot be reached")
    return reason


@pytest.fixture
def fake(monkeypatch):
    """eager.cuda over a fake driver with two devices."""
    lib = FakeCuda(devices=2, memory=64 << 20)
    drv = runtime_cuda.Driver.open(lib)
    monkeypatch.setattr(current, "driver", lambda: drv)
    monkeypatch.setattr(current, "_allocators", {})
    monkeypatch.setattr(eager.cuda, "_thread", type(eager.cuda._thread)())
    return lib


def test_without_a_gpu_cuda_is_not_available(no_gpu):
    assert eager.cuda.is_available() is False
    assert eager.cuda.device_count() == 0


@pytest.mark.parametrize("call", [
    eager.cuda.synchronize, eager.cuda.get_device_name, eager.cuda.get_device_capability,
    eager.cuda.get_device_properties, eager.cuda.current_device, eager.cuda.current_stream,
    eager.cuda.Stream, eager.cuda.mem_get_info, eager.cuda.reset_peak_memory_stats,
    lambda: eager.cuda.set_device(0), lambda: eager.cuda.Event(enable_timing=True).record(),
], ids=["synchronize", "get_device_name", "get_device_capability", "get_device_properties",
        "current_device", "current_stream", "Stream", "mem_get_info", "reset_peak_memory_stats",
        "set_device", "Event.record"])
def test_without_a_gpu_device_calls_raise_naming_the_reason(no_gpu, call):
    with pytest.raises(RuntimeError) as caught:
        call()
    assert str(caught.value) == f"CUDA backend is not available: {no_gpu}"


def test_without_a_gpu_seeds_memory_and_unrecorded_events_are_safe(no_gpu):
    eager.cuda.manual_seed(1)
    eager.cuda.manual_seed_all(2)
    assert eager.cuda.memory_stats() == {}
    assert eager.cuda.memory_allocated() == eager.cuda.memory_reserved() == 0
    assert eager.cuda.max_memory_allocated() == eager.cuda.max_memory_reserved() == 0
    eager.cuda.empty_cache()
    start, end = eager.cuda.Event(enable_timing=True), eager.cuda.Event(enable_timing=True)
    assert start.query() is True
    start.synchronize()
    with pytest.raises(RuntimeError, match="Both events must be recorded"):
        start.elapsed_time(end)


def test_devices_are_named_and_described(fake):
    assert eager.cuda.get_device_name() == "Fake GPU 0"
    assert eager.cuda.get_device_name("cuda:1") == "Fake GPU 1"
    assert eager.cuda.get_device_capability(eager.device("cuda", 1)) == (9, 0)
    properties = eager.cuda.get_device_properties(0)
    assert (properties.name, properties.major, properties.total_memory,
            properties.multi_processor_count) == ("Fake GPU 0", 9, 64 << 20, 132)
    with pytest.raises(ValueError, match="Expected a cuda device, but got: cpu"):
        eager.cuda.get_device_name("cpu")


def test_set_device_makes_its_context_current_and_refuses_a_missing_device(fake):
    assert eager.cuda.current_device() == 0
    eager.cuda.set_device(1)
    assert eager.cuda.current_device() == 1 and fake.current_context == 0xC1
    eager.cuda.synchronize()
    with pytest.raises(RuntimeError, match="invalid device ordinal 2 .the driver sees 2"):
        eager.cuda.set_device(2)
    assert eager.cuda.current_device() == 1


def test_event_timing_reads_the_records(fake):
    start, end = eager.cuda.Event(enable_timing=True), eager.cuda.Event(enable_timing=True)
    fake.clock_ms = 3.0
    start.record()
    fake.clock_ms = 7.25
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) == 4.25
    assert end.query()
    untimed = eager.cuda.Event()
    untimed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        start.elapsed_time(untimed)
    handles = [start._handle, end._handle, untimed._handle]
    del start, end, untimed
    assert not set(handles) & set(fake.events)


def test_streams_order_work_and_the_stream_context_selects_one(fake):
    assert eager.cuda.current_stream().cuda_stream == 0
    side = eager.cuda.Stream()
    assert side.cuda_stream in fake.streams
    with eager.cuda.stream(side) as entered:
        assert eager.cuda.current_stream() == side == entered
        event = eager.cuda.Event()
        event.record()
    assert eager.cuda.current_stream() == eager.cuda.default_stream()
    assert isinstance(eager.cuda.stream(side), eager.cuda.StreamContext)
    with eager.cuda.StreamContext(None):  # no stream: no change
        assert eager.cuda.current_stream() == eager.cuda.default_stream()
    del entered
    eager.cuda.current_stream().wait_stream(side)
    events = [call for call in fake.calls if call.startswith(("cuEvent", "cuStreamWait"))]
    assert events[-4:] == ["cuEventCreate", "cuEventRecord", "cuStreamWaitEvent",
                           "cuEventDestroy_v2"]  # a temporary event, made, waited on, freed
    side.synchronize()
    assert side.query()
    handle = side.cuda_stream
    del side
    assert handle not in fake.streams


def test_memory_stats_read_the_devices_allocator(fake):
    assert eager.cuda.memory_stats() == {}
    memory = current.allocator(0).malloc(3000)
    assert eager.cuda.memory_allocated() == 3072
    assert eager.cuda.memory_stats(0)["allocation.all.current"] == 1
    memory.free()
    assert eager.cuda.memory_allocated() == 0 and eager.cuda.max_memory_allocated() == 3072
    eager.cuda.reset_peak_memory_stats()
    assert eager.cuda.max_memory_allocated() == 0
    assert eager.cuda.memory_reserved() == 3072
    eager.cuda.empty_cache()
    assert eager.cuda.memory_reserved() == 0 and fake.buffers == {}
    assert eager.cuda.max_memory_reserved() == 3072
    assert eager.cuda.mem_get_info() == (64 << 20, 64 << 20)


@pytest.fixture
def gpu():
    reason = _no_gpu_reason()
    if reason is not None:
        pytest.skip(f"no usable GPU: {reason}")
    return current.driver()


def _add_kernel_ptx():
    import llvmlite.ir as ir
    from runtime.llvm import toolkit as L
    from runtime.cuda import nvptx
    module = nvptx.new_module()
    pointer = ir.PointerType(ir.FloatType(), 1)
    fn, b = nvptx.kernel(module, "kiln_add", [pointer, pointer, pointer, L.I64],
                         ["out", "x", "y", "n"], max_threads=256)
    out, x, y, n = fn.args
    start, step = L.Target.of(module).grid_stride(b)
    with L.for_range(b, start, n, step) as i:
        b.store(b.fadd(b.load(L.at(b, x, i)), b.load(L.at(b, y, i))), L.at(b, out, i))
    b.ret_void()
    return nvptx.compile_ptx(module)


@pytest.mark.gpu
def test_on_a_gpu_memory_round_trips_through_the_allocator(gpu):
    host = np.arange(1000, dtype=np.float32)
    memory = current.allocator(0).malloc(host.nbytes)
    gpu.activate(0)
    gpu.copy_to_device(memory.pointer, host.ctypes.data, host.nbytes)
    back = np.zeros_like(host)
    gpu.copy_to_host(back.ctypes.data, memory.pointer, host.nbytes)
    np.testing.assert_array_equal(back, host)
    assert eager.cuda.memory_allocated() >= host.nbytes
    memory.free()


@pytest.mark.gpu
def test_on_a_gpu_a_ptx_kernel_from_nvptx_loads_and_adds(gpu):
    gpu.activate(0)
    n = 100_003
    x, y = np.random.rand(n).astype(np.float32), np.random.rand(n).astype(np.float32)
    buffers = [current.allocator(0).malloc(x.nbytes) for _ in range(3)]
    gpu.copy_to_device(buffers[1].pointer, x.ctypes.data, x.nbytes)
    gpu.copy_to_device(buffers[2].pointer, y.ctypes.data, y.nbytes)
    module = gpu.load_module(_add_kernel_ptx())
    kernel = gpu.function(module, "kiln_add")
    start, end = eager.cuda.Event(enable_timing=True), eager.cuda.Event(enable_timing=True)
    start.record()
    gpu.launch(kernel, 120, 256, [ctypes.c_uint64(b.pointer) for b in buffers] +
               [ctypes.c_int64(n)])
    end.record()
    eager.cuda.synchronize()
    out = np.zeros_like(x)
    gpu.copy_to_host(out.ctypes.data, buffers[0].pointer, out.nbytes)
    np.testing.assert_array_equal(out, x + y)
    assert start.elapsed_time(end) > 0
    gpu.unload_module(module)


@pytest.mark.gpu
def test_on_a_gpu_bad_ptx_fails_with_the_jit_log(gpu):
    gpu.activate(0)
    with pytest.raises(runtime_cuda.CudaError, match="cuModuleLoadDataEx failed with") as caught:
        gpu.load_module(".version 8.0\n.target sm_90\n.address_size 64\nnonsense;\n")
    assert caught.value.log


@pytest.mark.parametrize("name", ["CUDAGraph", "graph"])
def test_cuda_graphs_are_named_for_annotations_and_making_one_is_not_supported_yet(name):
    from eager._missing import NotSupportedYet
    cls = getattr(eager.cuda, name)
    assert isinstance(cls, type) and not isinstance(object(), cls)
    with pytest.raises(NotSupportedYet, match=rf"torch\.cuda\.{name} is not supported by kiln"):
        cls()
