"""`eager.cuda`: torch.cuda's functions over kiln's driver binding (runtime/cuda/driver.py).

is_available() and device_count() say whether CUDA *tensors* can be made: False and 0
until the CUDA backend registers its kernels (eager/backends), so PyTorch-style guards
(`"cuda" if eager.cuda.is_available() else "cpu"`) stay right. The device functions
(names, capabilities, synchronize, streams, events, memory) work wherever the driver sees
a GPU; elsewhere they raise "CUDA backend is not available: <reason>", as torch.cuda
raises without one. As in PyTorch, manual_seed/manual_seed_all only note the seed, an
Event is made on its first record, and memory_stats() is {} (memory_allocated() 0,
empty_cache() nothing) while no device memory was ever allocated.
"""
from __future__ import annotations

import threading
from typing import NamedTuple

from eager import _missing
from eager.amp import cuda_amp as amp  # noqa: F401 - torch.cuda.amp
from eager.backends import cuda_is_available
from eager.device import device as _device

_thread = threading.local()  # the current device and stream of this thread
_seed: int | None = None


def is_available() -> bool:
    return cuda_is_available()


def device_count() -> int:
    from runtime.cuda.current import device_count as count
    return count() if is_available() else 0


def _driver():
    from runtime.cuda.current import driver
    from runtime.cuda.driver import CudaUnavailable
    try:
        return driver()
    except CudaUnavailable as missing:
        raise RuntimeError(f"CUDA backend is not available: {missing}") from None


def _index(device=None) -> int:
    """A device ordinal from None (the current device), an int, 'cuda:N' or a device."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    found = _device(device)
    if found.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {found}")
    return found.index


def _active(device=None):
    """The driver with `device`'s context current on this thread."""
    drv, index = _driver(), _index(device)
    if not 0 <= index < drv.device_count():
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} (the driver sees "
                           f"{drv.device_count()} devices)")
    drv.activate(index)
    return drv


def current_device() -> int:
    _driver()
    return getattr(_thread, "device", 0)


def set_device(device) -> None:
    index = _index(device)
    _active(index)
    _thread.device = index


def get_device_name(device=None) -> str:
    return _driver().device_name(_index(device))


def get_device_capability(device=None) -> tuple[int, int]:
    return _driver().compute_capability(_index(device))


class DeviceProperties(NamedTuple):
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int


def get_device_properties(device=None) -> DeviceProperties:
    drv, index = _driver(), _index(device)
    major, minor = drv.compute_capability(index)
    return DeviceProperties(drv.device_name(index), major, minor, drv.total_memory(index),
                            drv.attribute(index, "multiprocessor_count"))


def synchronize(device=None) -> None:
    """Wait for all work queued on the device."""
    _active(device).synchronize()


def mem_get_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the device, as the driver counts them."""
    return _active(device).memory_info()


def manual_seed(seed: int) -> None:
    """Note the seed for CUDA random numbers (none are generated on the GPU yet); safe
    without a GPU, as in PyTorch."""
    global _seed
    _seed = int(seed)


manual_seed_all = manual_seed


class Stream:
    """A CUDA stream: work queued on it runs in order. `Stream()` makes a new one on the
    current device; `cuda_stream` is the driver's handle (0: the default stream)."""

    def __init__(self, device=None, priority: int = 0, *, _handle: int | None = None):
        self.device = _device("cuda", _index(device))
        self._driver = _active(self.device)
        self._owned = _handle is None
        self.cuda_stream = self._driver.stream_create() if self._owned else _handle

    def synchronize(self) -> None:
        _active(self.device).stream_synchronize(self.cuda_stream)

    def query(self) -> bool:
        """Whether all work queued so far has finished."""
        return _active(self.device).stream_done(self.cuda_stream)

    def wait_event(self, event: "Event") -> None:
        event._wait_on(self)

    def wait_stream(self, stream: "Stream") -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and (self.device, self.cuda_stream) == \
            (other.device, other.cuda_stream)

    def __hash__(self) -> int:
        return hash((self.device, self.cuda_stream))

    def __repr__(self) -> str:
        return f"<eager.cuda.Stream device={self.device} cuda_stream=0x{self.cuda_stream:x}>"

    def __del__(self):
        if getattr(self, "_owned", False):
            self._driver.activate(self.device.index)
            self._driver.stream_destroy(self.cuda_stream)


def default_stream(device=None) -> Stream:
    return Stream(device, _handle=0)


def current_stream(device=None) -> Stream:
    """The stream `with eager.cuda.stream(s):` selected on this thread, else the default."""
    index = _index(device)
    chosen = getattr(_thread, "streams", {}).get(index)
    return chosen if chosen is not None else default_stream(index)


class StreamContext:
    """`with StreamContext(s):` makes `s` the current stream of its device on this thread
    within the block (None: no change). What `stream(s)` returns."""

    def __init__(self, stream: Stream | None):
        self.stream = stream
        self._before = []

    def __enter__(self):
        if self.stream is not None:
            streams = _thread.__dict__.setdefault("streams", {})
            index = self.stream.device.index
            self._before.append((index, streams.get(index)))
            streams[index] = self.stream
        return self.stream

    def __exit__(self, *exc) -> None:
        if self.stream is not None:
            index, before = self._before.pop()
            _thread.streams[index] = before


def stream(chosen: Stream | None) -> StreamContext:
    """Make `chosen` the current stream of its device on this thread within the block."""
    return StreamContext(chosen)


class Event:
    """A CUDA event: a point in a stream's work. Made on the device at its first record;
    elapsed_time needs enable_timing=True on both events."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False):
        self.enable_timing, self.blocking = enable_timing, blocking
        self._handle: int | None = None
        self._device: int | None = None
        self._driver = None

    def record(self, stream: Stream | None = None) -> None:
        stream = current_stream() if stream is None else stream
        drv = _active(stream.device)
        if self._handle is None:
            self._handle = drv.event_create(self.enable_timing, self.blocking)
            self._device, self._driver = stream.device.index, drv
        drv.event_record(self._handle, stream.cuda_stream)

    def synchronize(self) -> None:
        """Wait until the work before the record has finished (nothing if never recorded)."""
        if self._handle is not None:
            _active(self._device).event_synchronize(self._handle)

    def query(self) -> bool:
        return self._handle is None or _active(self._device).event_done(self._handle)

    def wait(self, stream: Stream | None = None) -> None:
        self._wait_on(current_stream() if stream is None else stream)

    def _wait_on(self, stream: Stream) -> None:
        if self._handle is not None:
            _active(stream.device).stream_wait_event(stream.cuda_stream, self._handle)

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event's record to `end_event`'s (both complete)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._handle is None or end_event._handle is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return _active(self._device).event_elapsed_ms(self._handle, end_event._handle)

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self._driver.activate(self._device)
            self._driver.event_destroy(self._handle)


def _allocator(device=None):
    """The device's caching allocator if it ever allocated, else None (no GPU: None)."""
    from runtime.cuda.current import existing_allocator
    return existing_allocator(_index(device) if device is not None else
                              getattr(_thread, "device", 0))


def memory_stats(device=None) -> dict[str, int]:
    found = _allocator(device)
    return found.stats() if found is not None else {}


def memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None) -> None:
    _driver()
    found = _allocator(device)
    if found is not None:
        found.reset_peak_stats()


def empty_cache() -> None:
    """Give the cached free blocks of every device back to the driver."""
    from runtime.cuda.current import existing_allocators
    for found in existing_allocators():
        found.empty_cache()

# CUDA graphs (capture and replay): named, as annotations name them; making one is
# NotSupportedYet
CUDAGraph = _missing.lacking_class("torch.cuda", "CUDAGraph")
graph = _missing.lacking_class("torch.cuda", "graph")

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.cuda", "eager.cuda")
