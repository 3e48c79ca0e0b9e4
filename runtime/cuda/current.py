"""This process's CUDA device: its driver (libcuda, kiln's emulated device where
KILN_CUDA=emulate, or a test's), its caching allocators and the architecture its PTX is
made for.

    driver()        the process's Driver, or CudaUnavailable saying why there is none
    use_driver(d)   a context manager: driver() returns `d` inside it (tests)
    unless_gpu()    the real driver where a GPU is usable, else an emulated one (tests)
    device_count()  GPUs the driver sees (0 where there is no driver or GPU)
    allocator(i)    device i's caching allocator (runtime/cuda/allocator.py)
    device_arch()   the architecture to generate PTX for
"""
from __future__ import annotations

import contextlib
import os
import threading

from runtime.cuda.allocator import CachingAllocator
from runtime.cuda.driver import CudaUnavailable, Driver, load_library

_lock = threading.Lock()
_allocators: dict[int, CachingAllocator] = {}
_registry_lock = threading.Lock()
_driver: Driver | None = None
_failure: str | None = None
_chosen: list = []  # use_driver's, innermost last
KILN_CUDA = {"": "the CUDA driver (libcuda), as when KILN_CUDA is unset",
             "emulate": "kiln's emulated CUDA device (runtime/cuda/emulated.py), no GPU"}


def driver() -> Driver:
    """The process's Driver (libcuda initialised, one GPU or more), or CudaUnavailable
    saying why there is none; the emulated device's driver where KILN_CUDA=emulate.
    Looked for once. Inside use_driver(d), `d`."""
    global _driver, _failure
    with _lock:
        if _chosen:
            return _chosen[-1]
        if _driver is None and _failure is None:
            try:
                _driver = _open(os.environ.get("KILN_CUDA", ""))
            except CudaUnavailable as missing:
                _failure = str(missing)
    if _driver is None:
        raise CudaUnavailable(_failure)
    return _driver


def _open(choice: str):
    if choice not in KILN_CUDA:
        allowed = "; ".join(f"{value!r}: {what}" for value, what in KILN_CUDA.items())
        raise ValueError(f"KILN_CUDA={choice!r} is not understood; it may be {allowed}")
    if choice == "emulate":
        from runtime.cuda.emulated import EmulatedDriver
        return EmulatedDriver()
    return Driver.open(load_library())


@contextlib.contextmanager
def use_driver(chosen):
    """driver() returns `chosen` (an EmulatedDriver, a Driver over a test's fake) inside
    the block, and what it returned before after it. The device allocators made inside
    hold `chosen`'s memory, so they are the block's own."""
    global _allocators
    with _lock:
        _chosen.append(chosen)
        saved, _allocators = _allocators, {}
    try:
        yield chosen
    finally:
        with _lock:
            del _chosen[len(_chosen) - 1 - _chosen[::-1].index(chosen)]
            _allocators = saved


def device_count() -> int:
    try:
        return driver().device_count()
    except CudaUnavailable:
        return 0




def allocator(ordinal: int = 0) -> CachingAllocator:
    """The process's allocator for device `ordinal` (CudaUnavailable without a GPU,
    ValueError for a device that does not exist)."""
    with _registry_lock:
        if ordinal not in _allocators:
            found = driver()
            if not 0 <= ordinal < found.device_count():
                raise ValueError(f"there is no CUDA device {ordinal}: the driver sees "
                                 f"{found.device_count()}")
            _allocators[ordinal] = CachingAllocator(found, ordinal)
        return _allocators[ordinal]


def existing_allocator(ordinal: int = 0) -> CachingAllocator | None:
    """The allocator of device `ordinal` if one was made (memory stats read this: before
    any allocation, as PyTorch before CUDA is initialised, there are none)."""
    return _allocators.get(ordinal)


def existing_allocators() -> list[CachingAllocator]:
    """The allocators made so far, one per device that allocated."""
    return list(_allocators.values())


@contextlib.contextmanager
def unless_gpu(memory: int = 64 << 20):
    """Inside the block, the real driver where a GPU is usable (yields None), else an
    EmulatedDriver of `memory` bytes (yielded): how the CUDA tests run on every machine."""
    from runtime.cuda.emulated import EmulatedDriver
    try:
        driver()
    except CudaUnavailable:
        with use_driver(EmulatedDriver(memory=memory)) as emulated:
            yield emulated
        return
    yield None


def device_arch() -> str:
    """The architecture to generate for: the GPU's (nvptx.arch_for), sm_90 where the
    driver finds none."""
    from runtime.cuda import nvptx  # (llvmlite: loaded only to make PTX)
    try:
        capability = driver().compute_capability(0)
    except CudaUnavailable:
        return nvptx.DEFAULT_ARCH
    return nvptx.arch_for(capability)
