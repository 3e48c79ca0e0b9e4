"""Device memory kept for reuse, in the manner of PyTorch's CUDA caching allocator.

    CachingAllocator(driver, ordinal)  malloc(nbytes, stream) -> DeviceMemory; memory
                    freed (or collected) goes back to a free list of its size class and
                    stream; stats() in PyTorch's names; empty_cache() gives the cached
                    blocks back to the driver
    allocator(ordinal)           the process's allocator for a device (made on first use)
    existing_allocator(ordinal)  the same, or None if nothing was allocated there yet
    existing_allocators()        those made so far
    PinnedMemory(driver, nbytes) page-locked host memory for fast and async transfers
    CudaOutOfMemory              an allocation failed even after the cache was emptied

Sizes round up to a size class: to 512 bytes below 1 MiB, to 2 MiB from there (PyTorch's
kMinBlockSize and kRoundLarge). A block is reused only for the same class on the same
stream: work queued on that stream runs in order, so the block's last user has finished
before its next one starts; another stream would need an event (not done: blocks are not
shared across streams). Blocks are not split or merged. When the driver is out of
memory, the cache is emptied and the allocation tried once more (num_alloc_retries).
"""
from __future__ import annotations

import ctypes
import threading
from collections import defaultdict

from runtime.cuda.driver import CUDA_ERROR_OUT_OF_MEMORY, CudaError, Driver

_SMALL_LIMIT = 1 << 20
_SMALL_ROUND = 512
_LARGE_ROUND = 2 << 20


class CudaOutOfMemory(RuntimeError):
    """The device has no room for `requested` bytes, even with the cache emptied."""

    def __init__(self, message: str, requested: int):
        super().__init__(message)
        self.requested = requested


def size_class(nbytes: int) -> int:
    """The bytes a block of `nbytes` takes: rounded up to 512 below 1 MiB, to 2 MiB above."""
    step = _SMALL_ROUND if nbytes < _SMALL_LIMIT else _LARGE_ROUND
    return -(-nbytes // step) * step


class _Stat:
    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self):
        self.current = self.peak = self.allocated = self.freed = 0

    def add(self, amount: int) -> None:
        self.current += amount
        self.allocated += amount
        self.peak = max(self.peak, self.current)

    def sub(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount


class DeviceMemory:
    """`nbytes` at device address `pointer` (a block of `size` bytes) for work on
    `stream`; free() or garbage collection returns the block to its allocator's cache."""
    __slots__ = ("pointer", "nbytes", "size", "stream", "_allocator")

    def __init__(self, pointer: int, nbytes: int, size: int, stream: int, allocator):
        self.pointer, self.nbytes, self.size, self.stream = pointer, nbytes, size, stream
        self._allocator = allocator

    def free(self) -> None:
        allocator, self._allocator = self._allocator, None
        if allocator is not None:
            allocator._release(self)

    def __del__(self):
        self.free()

    def __repr__(self) -> str:
        return f"DeviceMemory(pointer=0x{self.pointer:x}, nbytes={self.nbytes})"


class CachingAllocator:
    """Device memory of one GPU, cached by size class and stream."""

    def __init__(self, driver: Driver, ordinal: int = 0):
        self._driver, self.ordinal = driver, ordinal
        self._free: dict[tuple[int, int], list[int]] = defaultdict(list)
        self._lock = threading.RLock()  # RLock: a collected block may return mid-malloc
        self._stats = {name: _Stat() for name in (
            "allocated_bytes", "reserved_bytes", "requested_bytes", "allocation", "segment")}
        self._counts = {"num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 0,
                        "num_device_free": 0}

    def malloc(self, nbytes: int, stream: int = 0) -> DeviceMemory:
        """`nbytes` of device memory for work on `stream`: a cached block of its size
        class when one is free, else a new one from the driver."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        if nbytes == 0:  # as PyTorch: no block, address 0
            return DeviceMemory(0, 0, 0, stream, None)
        size = size_class(nbytes)
        with self._lock:
            cached = self._free.get((stream, size))
            pointer = cached.pop() if cached else self._device_alloc(nbytes, size)
            self._stats["allocated_bytes"].add(size)
            self._stats["requested_bytes"].add(nbytes)
            self._stats["allocation"].add(1)
        return DeviceMemory(pointer, nbytes, size, stream, self)

    def _release(self, memory: DeviceMemory) -> None:
        with self._lock:
            self._free[(memory.stream, memory.size)].append(memory.pointer)
            self._stats["allocated_bytes"].sub(memory.size)
            self._stats["requested_bytes"].sub(memory.nbytes)
            self._stats["allocation"].sub(1)

    def _device_alloc(self, nbytes: int, size: int) -> int:
        self._driver.activate(self.ordinal)
        try:
            pointer = self._driver.alloc(size)
        except CudaError as error:
            if error.status != CUDA_ERROR_OUT_OF_MEMORY:
                raise
            self._counts["num_alloc_retries"] += 1
            self.empty_cache()
            try:
                pointer = self._driver.alloc(size)
            except CudaError as again:
                if again.status != CUDA_ERROR_OUT_OF_MEMORY:
                    raise
                self._counts["num_ooms"] += 1
                raise CudaOutOfMemory(self._out_of_memory(nbytes, again), nbytes) from again
        self._counts["num_device_alloc"] += 1
        self._stats["reserved_bytes"].add(size)
        self._stats["segment"].add(1)
        return pointer

    def _out_of_memory(self, nbytes: int, error: CudaError) -> str:
        return (f"CUDA out of memory. Tried to allocate {_mib(nbytes)} ({nbytes} bytes) on "
                f"device {self.ordinal}: {_mib(self._stats['allocated_bytes'].current)} is "
                f"allocated by kiln, {_mib(self._stats['reserved_bytes'].current)} reserved "
                f"by its cache, which was emptied and the allocation tried again ({error})")

    def empty_cache(self) -> None:
        """Give every cached (free) block back to the driver, after the device's queued
        work has finished (a block freed on a stream may still be read there)."""
        with self._lock:
            blocks = [(size, pointer) for (_, size), pointers in self._free.items()
                      for pointer in pointers]
            self._free.clear()
            if not blocks:
                return
            self._driver.activate(self.ordinal)
            self._driver.synchronize()
            for size, pointer in blocks:
                self._driver.free(pointer)
                self._counts["num_device_free"] += 1
                self._stats["reserved_bytes"].sub(size)
                self._stats["segment"].sub(1)

    def stats(self) -> dict[str, int]:
        """PyTorch's memory_stats keys: allocated_bytes.all.current/peak/allocated/freed
        (blocks in use, by their size class), reserved_bytes.all.* (held from the driver,
        in use or cached), requested_bytes.all.* (what callers asked for), allocation.all.*
        and segment.all.* (counts), num_alloc_retries, num_ooms, num_device_alloc/free."""
        with self._lock:
            flat = {f"{name}.all.{field}": getattr(stat, field)
                    for name, stat in self._stats.items() for field in _Stat.__slots__}
            flat.update(self._counts)
        return dict(sorted(flat.items()))

    def reset_peak_stats(self) -> None:
        with self._lock:
            for stat in self._stats.values():
                stat.peak = stat.current

    def allocated_bytes(self) -> int:
        return self._stats["allocated_bytes"].current

    def reserved_bytes(self) -> int:
        return self._stats["reserved_bytes"].current


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.2f} GiB" if nbytes >= 1 << 30 else f"{nbytes / (1 << 20):.2f} MiB"


class PinnedMemory:
    """`nbytes` of page-locked host memory at `pointer`, freed by free() or collection.
    A copy from it runs at full bus speed and may be asynchronous on a stream."""

    def __init__(self, driver: Driver, nbytes: int):
        self._driver, self.nbytes = driver, nbytes
        self.pointer = driver.host_alloc(nbytes)

    def buffer(self) -> memoryview:
        """The memory as a writable buffer (numpy.frombuffer reads it without a copy)."""
        return memoryview((ctypes.c_char * self.nbytes).from_address(self.pointer)).cast("B")

    def free(self) -> None:
        pointer, self.pointer = self.pointer, 0
        if pointer:
            self._driver.host_free(pointer)

    def __del__(self):
        self.free()
