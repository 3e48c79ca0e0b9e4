"""An emulated CUDA device: EmulatedDriver has runtime.cuda.driver.Driver's methods (same
names, arguments, results and CudaErrors), so kiln's whole CUDA stack runs without a GPU.
`KILN_CUDA=emulate` makes runtime.cuda.current.driver() return one;
runtime.cuda.current.use_driver(d) switches to one inside a block.

    EmulatedDriver(memory=4 GiB, devices=1)
        devices named "kiln CUDA emulator", compute capability (9, 0), `memory` bytes
        each (allocations beyond it fail with CUDA_ERROR_OUT_OF_MEMORY)
    assembled    how many modules load_module had ptxas assemble (below)
    resources()  what is live now (allocations, bytes, modules, streams, events, host
                 memory): a leak check for tests; `launches` counts kernels run

Device memory is runtime/cuda/emulator/device_memory.py's table: numpy blocks at made-up
addresses, never reused, new memory 0xFF bytes, so reads before writes, stray and freed
pointers show. Host memory (host_alloc) is real host memory, pinned in name only.

Modules: PTX cannot run on the host, so load_module finds the ir.Module the PTX was compiled
from (runtime/cuda/nvptx.py's source_of; it remembers them from the first EmulatedDriver on)
and a launch runs the kernel's IR on runtime/cuda/emulator/launch.py, each pointer argument
as (its block viewed as the parameter's element type, element offset). PTX kiln did not make
here is CUDA_ERROR_INVALID_PTX. As a GPU's driver JIT-assembles each module it loads,
load_module has `ptxas -arch=sm_90` assemble it where ptxas is installed
(runtime/cuda/nvptx.py's ptxas_report, remembered per text), and PTX that ptxas refuses is
CUDA_ERROR_INVALID_PTX with ptxas's output as the JIT log: so every kernel that runs on the
emulated device is also one a GPU would take. Each argument is read as a GPU reads it: the
parameter's bytes from the ctypes value, whose size must match.

Everything runs at once on the calling thread, in call order: streams and events exist
and are checked, but no work waits (queries say done); an event records the host's clock,
so elapsed times are host wall time. Unlike a GPU: a kernel's bad access is reported by
the launch itself (cuLaunchKernel), not by a later synchronising call, and no error is
sticky (the device works on afterwards); a pointer argument must lie in a live
allocation (or be null) even if the kernel never reads it; the registers attribute is
0 (ptxas_report has the real figure); pointers stored in device memory cannot be followed.
"""
from __future__ import annotations

import ctypes
import re
import threading
import time

import llvmlite.ir as ir
import numpy as np

from runtime.cuda.emulator import launch as cuda_emulator
from runtime.cuda import nvptx
from runtime.cuda.driver import _ATTRIBUTE, _FUNCTION_ATTRIBUTE, CudaError, _address, _dims
from runtime.cuda.emulator.device_memory import DeviceMemory, Fault
from runtime.cuda.emulator.values import size_of

NAME = "kiln CUDA emulator"
CAPABILITY = (9, 0)
_VERSION = 12040
_ERRORS = {
    1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    101: ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
    201: ("CUDA_ERROR_INVALID_CONTEXT", "invalid device context"),
    218: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
    400: ("CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"),
    500: ("CUDA_ERROR_NOT_FOUND", "named symbol not found"),
    700: ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"),
    716: ("CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"),
    719: ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"),
}
INVALID_VALUE, OUT_OF_MEMORY, INVALID_DEVICE, INVALID_CONTEXT, INVALID_PTX = 1, 2, 101, 201, 218
INVALID_HANDLE, NOT_FOUND, ILLEGAL_ADDRESS, MISALIGNED, LAUNCH_FAILED = 400, 500, 700, 716, 719
_DEVICE_ATTRIBUTES = {"multiprocessor_count": 132, "compute_capability_major": CAPABILITY[0],
                      "compute_capability_minor": CAPABILITY[1],
                      "max_shared_memory_per_block_optin": 227 << 10}
_SHARED_DEFAULT = 48 << 10  # a launch's shared memory without the opt-in attribute
_GRID_LIMITS, _BLOCK_LIMITS = ((1 << 31) - 1, 65535, 65535), (1024, 1024, 64)
_MEMORY_FAULT = re.compile(r"\b(reads|writes) \d+ bytes (at|through)\b")


class EmulatedDriver:
    """runtime.cuda.driver.Driver's calls on an emulated device (see the module's docstring)."""

    def __init__(self, memory: int = 4 << 30, devices: int = 1):
        nvptx.record_sources()
        self._memory, self._devices = memory, devices
        self._lock = threading.RLock()
        self._thread = threading.local()
        self._device_memory = DeviceMemory(devices)
        self._host: dict[int, np.ndarray] = {}
        self._modules: dict[int, ir.Module] = {}
        self._functions: dict[int, tuple] = {}  # handle -> (module handle, ir.Function)
        self._dynamic_shared: dict[int, int] = {}
        self._streams: set[int] = set()
        self._events: dict[int, list] = {}  # handle -> [timing, recorded time or None]
        self._next_handle = 0x1000
        self._assemble = nvptx.ptxas_path() is not None
        self.launches = 0
        self.assembled = 0

    def check(self, call: str, status: int, log: str = "") -> None:
        """CudaError naming `call` and the error's name and text unless `status` is 0."""
        if status:
            raise self._error(call, status, log=log)

    def _error(self, call: str, status: int, detail: str = "", log: str = "") -> CudaError:
        name, text = _ERRORS.get(status, (f"CUDA error {status}", "unknown to this driver"))
        return CudaError(call, status, name, f"{text}: {detail}" if detail else text, log)

    def resources(self) -> dict[str, int]:
        """What is live now: a test's leak check."""
        with self._lock:
            return {"allocations": len(self._device_memory),
                    "bytes": sum(self._device_memory.used),
                    "host_allocations": len(self._host), "modules": len(self._modules),
                    "streams": len(self._streams), "events": len(self._events)}

    # devices and contexts

    def version(self) -> int:
        return _VERSION

    def device_count(self) -> int:
        return self._devices

    def device(self, ordinal: int) -> int:
        if not 0 <= ordinal < self._devices:
            raise self._error("cuDeviceGet", INVALID_DEVICE,
                              f"device {ordinal} of {self._devices}")
        return ordinal

    def device_name(self, ordinal: int) -> str:
        self.device(ordinal)
        return NAME

    def attribute(self, ordinal: int, name: str) -> int:
        _ATTRIBUTE[name]  # a KeyError for an unknown name, as Driver gives
        self.device(ordinal)
        return _DEVICE_ATTRIBUTES[name]

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        return (self.attribute(ordinal, "compute_capability_major"),
                self.attribute(ordinal, "compute_capability_minor"))

    def total_memory(self, ordinal: int) -> int:
        self.device(ordinal)
        return self._memory

    def activate(self, ordinal: int = 0) -> None:
        self._thread.ordinal = self.device(ordinal)

    def current_device(self) -> int | None:
        return getattr(self._thread, "ordinal", None)

    def _current(self, call: str) -> int:
        """The device activated on this thread; CUDA_ERROR_INVALID_CONTEXT before any."""
        ordinal = self.current_device()
        if ordinal is None:
            raise self._error(call, INVALID_CONTEXT, "no device was activated on this thread")
        return ordinal

    def synchronize(self) -> None:
        self._current("cuCtxSynchronize")

    def memory_info(self) -> tuple[int, int]:
        ordinal = self._current("cuMemGetInfo_v2")
        return self._memory - self._device_memory.used[ordinal], self._memory

    # modules and launches

    def load_module(self, ptx: str | bytes) -> int:
        self._current("cuModuleLoadDataEx")
        module = nvptx.source_of(ptx)
        if module is None:
            raise self._error("cuModuleLoadDataEx", INVALID_PTX, log=(
                "the CUDA emulator runs only kernels kiln generated in this process: it "
                "runs the LLVM IR a PTX text came from, which runtime/cuda/nvptx.py's "
                "compile_ptx remembers (an ir.Module, among the newest it compiled); this "
                "PTX was not made there (hand-written, read from a file, or made from IR "
                "text)"))
        if self._assemble:
            text = ptx.decode(errors="replace") if isinstance(ptx, (bytes, bytearray)) else ptx
            try:
                nvptx.ptxas_report(text.rstrip("\0"), f"sm_{CAPABILITY[0]}{CAPABILITY[1]}")
            except nvptx.PtxasError as refused:
                raise self._error("cuModuleLoadDataEx", INVALID_PTX, log=str(refused))
            self.assembled += 1
        return self._new_handle(self._modules, module)

    def unload_module(self, module: int) -> None:
        with self._lock:
            if self._modules.pop(module, None) is None:
                raise self._error("cuModuleUnload", INVALID_HANDLE, f"no module {module:#x}")
            for handle in [h for h, (owner, _) in self._functions.items() if owner == module]:
                del self._functions[handle]

    def function(self, module: int, name: str) -> int:
        call = f"cuModuleGetFunction({name!r})"
        source = self._modules.get(module)
        if source is None:
            raise self._error(call, INVALID_HANDLE, f"no module {module:#x}")
        found = source.globals.get(name)
        if not (isinstance(found, ir.Function) and found.blocks
                and found.calling_convention == "ptx_kernel"):
            raise self._error(call, NOT_FOUND, f"the module has no kernel {name!r}")
        return self._new_handle(self._functions, (module, found))

    def function_attribute(self, function: int, name: str) -> int:
        index = _FUNCTION_ATTRIBUTE[name]
        module, fn = self._kernel("cuFuncGetAttribute", function)
        static = _static_shared(fn)
        values = {0: _max_threads(fn), 1: static, 3: 0, 4: 0,
                  8: self._dynamic_shared.get(function, _SHARED_DEFAULT - static)}
        return values[index]

    def set_function_attribute(self, function: int, name: str, value: int) -> None:
        _, fn = self._kernel("cuFuncSetAttribute", function)
        limit = _DEVICE_ATTRIBUTES["max_shared_memory_per_block_optin"] - _static_shared(fn)
        if _FUNCTION_ATTRIBUTE[name] != 8 or not 0 <= value <= limit:
            raise self._error("cuFuncSetAttribute", INVALID_VALUE,
                              f"{name}={value} (only max_dynamic_shared_bytes, at most "
                              f"{limit}, can be set)")
        self._dynamic_shared[function] = value

    def launch(self, function: int, grid, block, args, shared_bytes: int = 0,
               stream: int = 0) -> None:
        for i, arg in enumerate(args):
            _address(i, arg)  # TypeError unless a ctypes value, as Driver
        grid, block = _dims("grid", grid), _dims("block", block)
        call = "cuLaunchKernel"
        with self._lock:
            self._current(call)
            _, fn = self._kernel(call, function)
            self._stream(call, stream)
            self._check_shape(call, fn, grid, block)
            limit = self.function_attribute(function, "max_dynamic_shared_bytes")
            if shared_bytes > limit:
                raise self._error(call, INVALID_VALUE, f"{shared_bytes} bytes of dynamic "
                                  f"shared memory asked, {limit} allowed (raise "
                                  "max_dynamic_shared_bytes with set_function_attribute)")
            if len(args) != len(fn.args):
                raise self._error(call, INVALID_VALUE, f"kernel {fn.name!r} takes "
                                  f"{len(fn.args)} arguments, given {len(args)}")
            values = [self._argument(call, i, param, arg)
                      for i, (param, arg) in enumerate(zip(fn.args, args))]
            try:
                cuda_emulator.launch(fn, grid, block, values, dynamic_shared_bytes=shared_bytes)
            except cuda_emulator.EmulationError as failed:
                message = str(failed)
                status = MISALIGNED if "misaligned" in message else \
                    ILLEGAL_ADDRESS if _MEMORY_FAULT.search(message) else LAUNCH_FAILED
                raise self._error(call, status, message) from None
            self.launches += 1

    def _kernel(self, call: str, function: int) -> tuple:
        found = self._functions.get(function)
        if found is None:
            raise self._error(call, INVALID_HANDLE, f"no kernel {function:#x} (never "
                              "made, or its module was unloaded)")
        return found

    def _check_shape(self, call: str, fn: ir.Function, grid: tuple, block: tuple) -> None:
        threads = block[0] * block[1] * block[2]
        if threads > _max_threads(fn) or any(map(int.__gt__, block, _BLOCK_LIMITS)) or \
                any(map(int.__gt__, grid, _GRID_LIMITS)):
            raise self._error(call, INVALID_VALUE, f"grid {grid} of blocks {block}: a block "
                              f"has at most {_max_threads(fn)} threads for {fn.name!r} and "
                              f"{_BLOCK_LIMITS} along x, y, z; a grid {_GRID_LIMITS}")

    def _argument(self, call: str, index: int, param: ir.Argument, arg):
        """The emulator's value of kernel argument `index`: the parameter's bytes read
        from the ctypes value, as the driver reads them."""
        name = f"kernel argument {index} ({param.name!r}, {param.type})"
        size = size_of(param.type)
        if ctypes.sizeof(arg) != size:
            raise self._error(call, INVALID_VALUE, f"{name} takes {size} bytes, given a "
                              f"{type(arg).__name__} of {ctypes.sizeof(arg)}")
        try:
            return self._device_memory.kernel_value(
                param.type, ctypes.string_at(ctypes.addressof(arg), size))
        except Fault as fault:
            raise self._error(call, MISALIGNED if fault.misaligned else ILLEGAL_ADDRESS,
                              f"{name} is {fault}") from None
        except TypeError as why:
            raise self._error(call, INVALID_VALUE, f"{name}: {why}") from None

    # memory

    def alloc(self, nbytes: int) -> int:
        call = "cuMemAlloc_v2"
        with self._lock:
            ordinal = self._current(call)
            if nbytes <= 0:
                raise self._error(call, INVALID_VALUE, f"{nbytes} bytes")
            free = self._memory - self._device_memory.used[ordinal]
            if nbytes > free:
                raise self._error(call, OUT_OF_MEMORY, f"{nbytes} bytes asked, {free} of "
                                  f"{self._memory} free")
            return self._device_memory.allocate(ordinal, nbytes)

    def free(self, pointer: int) -> None:
        with self._lock:
            if not self._device_memory.release(pointer):
                raise self._error("cuMemFree_v2", INVALID_VALUE, f"{pointer:#x} "
                                  f"{self._device_memory.whereabouts(pointer, 0)}; free "
                                  "takes a pointer alloc returned")

    def host_alloc(self, nbytes: int, flags: int = 0) -> int:
        self._current("cuMemHostAlloc")
        if nbytes <= 0:
            raise self._error("cuMemHostAlloc", INVALID_VALUE, f"{nbytes} bytes")
        memory = np.zeros(nbytes, np.uint8)
        with self._lock:
            self._host[memory.ctypes.data] = memory
        return memory.ctypes.data

    def host_free(self, pointer: int) -> None:
        with self._lock:
            if self._host.pop(pointer, None) is None:
                raise self._error("cuMemFreeHost", INVALID_VALUE,
                                  f"{pointer:#x} is not host memory from host_alloc")

    def copy_to_device(self, device: int, host: int, nbytes: int, stream: int | None = None):
        call = "cuMemcpyHtoD_v2" if stream is None else "cuMemcpyHtoDAsync_v2"
        with self._lock:
            target = self._bytes(call, stream, device, nbytes, "the destination")
            if nbytes:
                ctypes.memmove(target.ctypes.data, self._host_pointer(call, host), nbytes)

    def copy_to_host(self, host: int, device: int, nbytes: int, stream: int | None = None):
        call = "cuMemcpyDtoH_v2" if stream is None else "cuMemcpyDtoHAsync_v2"
        with self._lock:
            source = self._bytes(call, stream, device, nbytes, "the source")
            if nbytes:
                ctypes.memmove(self._host_pointer(call, host), source.ctypes.data, nbytes)

    def copy_device(self, destination: int, source: int, nbytes: int,
                    stream: int | None = None):
        call = "cuMemcpyDtoD_v2" if stream is None else "cuMemcpyDtoDAsync_v2"
        with self._lock:
            target = self._bytes(call, stream, destination, nbytes, "the destination")
            target[:] = self._bytes(call, stream, source, nbytes, "the source")

    def memset8(self, device: int, value: int, count: int, stream: int | None = None):
        call = "cuMemsetD8_v2" if stream is None else "cuMemsetD8Async"
        with self._lock:
            self._bytes(call, stream, device, count, "the destination")[:] = value & 0xFF

    def memset32(self, device: int, value: int, count: int, stream: int | None = None):
        call = "cuMemsetD32_v2" if stream is None else "cuMemsetD32Async"
        with self._lock:
            target = self._bytes(call, stream, device, 4 * count, "the destination")
            if device % 4:
                raise self._error(call, INVALID_VALUE, f"{device:#x} is not 4-byte aligned")
            target.view(np.uint32)[:] = value & 0xFFFFFFFF

    def _bytes(self, call: str, stream, pointer: int, nbytes: int, what: str) -> np.ndarray:
        """The `nbytes` of device memory at `pointer`, which must lie in one block."""
        self._current(call)
        if stream is not None:
            self._stream(call, stream)
        if nbytes < 0:
            raise self._error(call, INVALID_VALUE, f"{nbytes} bytes")
        found = self._device_memory.span(pointer, nbytes)
        if found is None:
            raise self._error(call, INVALID_VALUE, f"{what} {pointer:#x} + {nbytes} bytes: "
                              f"{self._device_memory.whereabouts(pointer, nbytes)}")
        return found

    def _host_pointer(self, call: str, host: int) -> int:
        if not host:
            raise self._error(call, INVALID_VALUE, "the host pointer is null")
        return host

    # streams and events

    def stream_create(self, flags: int = 0) -> int:
        self._current("cuStreamCreate")
        with self._lock:
            handle = self._new_handle(None, None)
            self._streams.add(handle)
        return handle

    def stream_synchronize(self, stream: int) -> None:
        self._stream("cuStreamSynchronize", stream)

    def stream_done(self, stream: int) -> bool:
        self._stream("cuStreamQuery", stream)
        return True

    def stream_wait_event(self, stream: int, event: int) -> None:
        self._stream("cuStreamWaitEvent", stream)
        self._event("cuStreamWaitEvent", event)

    def stream_destroy(self, stream: int) -> None:
        with self._lock:
            if stream not in self._streams:
                raise self._error("cuStreamDestroy_v2", INVALID_HANDLE, f"no stream {stream:#x}")
            self._streams.discard(stream)

    def _stream(self, call: str, stream: int) -> None:
        if stream != 0 and stream not in self._streams:
            raise self._error(call, INVALID_HANDLE, f"no stream {stream:#x}")

    def event_create(self, timing: bool = True, blocking: bool = False) -> int:
        self._current("cuEventCreate")
        return self._new_handle(self._events, [timing, None])

    def event_record(self, event: int, stream: int = 0) -> None:
        self._stream("cuEventRecord", stream)
        self._event("cuEventRecord", event)[1] = time.perf_counter()

    def event_synchronize(self, event: int) -> None:
        self._event("cuEventSynchronize", event)

    def event_done(self, event: int) -> bool:
        self._event("cuEventQuery", event)
        return True

    def event_elapsed_ms(self, start: int, end: int) -> float:
        """Host wall-clock milliseconds between the two records."""
        call = "cuEventElapsedTime"
        first, last = self._event(call, start), self._event(call, end)
        if not (first[0] and last[0]) or first[1] is None or last[1] is None:
            raise self._error(call, INVALID_HANDLE, "both events must be made with timing "
                              "and recorded")
        return ctypes.c_float((last[1] - first[1]) * 1e3).value

    def event_destroy(self, event: int) -> None:
        with self._lock:
            if self._events.pop(event, None) is None:
                raise self._error("cuEventDestroy_v2", INVALID_HANDLE, f"no event {event:#x}")

    def _event(self, call: str, event: int) -> list:
        found = self._events.get(event)
        if found is None:
            raise self._error(call, INVALID_HANDLE, f"no event {event:#x}")
        return found

    def _new_handle(self, table, value) -> int:
        """A handle never given before (modules, kernels, streams, events share one
        count, so one kind's handle is never another's)."""
        with self._lock:
            handle, self._next_handle = self._next_handle, self._next_handle + 0x10
            if table is not None:
                table[handle] = value
        return handle


def _max_threads(fn: ir.Function) -> int:
    """The kernel's launch bound (nvvm.annotations maxntidx), 1024 without one."""
    annotations = fn.module.namedmetadata.get("nvvm.annotations")
    for entry in annotations.operands if annotations is not None else ():
        operands = entry.operands
        if operands and operands[0] is fn and getattr(operands[1], "string", "") == "maxntidx":
            return int(operands[2].constant)
    return _BLOCK_LIMITS[0]


def _static_shared(fn: ir.Function) -> int:
    """The bytes of the module's fixed-size shared-memory globals."""
    return sum(size_of(value.type.pointee) for value in fn.module.global_values
               if isinstance(value, ir.GlobalVariable) and value.type.addrspace == 3)
