"""A fake libcuda for runtime.cuda.driver.Driver: the driver calls kiln makes, in Python.

Device memory is a dict of bytearrays, so copies round-trip; events read a clock the test
sets (`clock_ms`); kernels are the names given to `define_kernel`, and a launch records
its arguments read back through the parameter pointers. `fail(call, status)` makes the
next call of `call` return `status` (queue several to fail several times). Outputs are
written through the byref() objects the Driver passes, as the real library writes them
through pointers.
"""
from __future__ import annotations

import ctypes
import functools

ERRORS = {
    1: ("CUDA_ERROR_INVALID_VALUE", "invalid argument"),
    2: ("CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    3: ("CUDA_ERROR_NOT_INITIALIZED", "initialization error"),
    100: ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"),
    101: ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"),
    201: ("CUDA_ERROR_INVALID_CONTEXT", "invalid device context"),
    218: ("CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"),
    400: ("CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"),
    500: ("CUDA_ERROR_NOT_FOUND", "named symbol not found"),
    600: ("CUDA_ERROR_NOT_READY", "device not ready"),
    719: ("CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"),
}
INVALID_VALUE, OUT_OF_MEMORY, NOT_INITIALIZED, NO_DEVICE = 1, 2, 3, 100
INVALID_DEVICE, INVALID_CONTEXT, INVALID_PTX, INVALID_HANDLE = 101, 201, 218, 400
NOT_FOUND, NOT_READY, LAUNCH_FAILED = 500, 600, 719


def _set(ref, value) -> None:
    ref._obj.value = value


def _call(method):
    """Record the call; return a status queued by fail() instead of running it."""
    @functools.wraps(method)
    def run(self, *args):
        self.calls.append(method.__name__)
        queued = self.failures.get(method.__name__)
        if queued:
            return queued.pop(0)
        if self.needs_init and method.__name__ not in ("cuInit", "cuGetErrorName",
                                                       "cuGetErrorString"):
            return NOT_INITIALIZED
        return method(self, *args)
    return run


class FakeCuda:
    def __init__(self, devices: int = 1, memory: int = 1 << 30, name: str = "Fake GPU",
                 capability: tuple[int, int] = (9, 0)):
        self.devices, self.memory, self.name, self.capability = devices, memory, name, capability
        self.calls: list[str] = []
        self.failures: dict[str, list[int]] = {}
        self.needs_init = True
        self.jit_error_log = ""       # a module load fails with this log when set
        self.kernels: dict[str, tuple] = {}
        self.launches: list[tuple] = []
        self.buffers: dict[int, bytearray] = {}
        self.host: dict[int, ctypes.Array] = {}
        self.current_context = None
        self.clock_ms = 0.0
        self.events: dict[int, dict] = {}
        self.streams: set[int] = set()
        self._next_handle = 0x1000
        self._next_pointer = 0x7F0000000000

    def fail(self, call: str, status: int, times: int = 1) -> None:
        self.failures.setdefault(call, []).extend([status] * times)

    def define_kernel(self, name: str, argtypes: list) -> None:
        self.kernels[name] = argtypes

    def used(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def _handle(self) -> int:
        self._next_handle += 16
        return self._next_handle

    def cuGetErrorName(self, status, ref):
        if status not in ERRORS:
            return INVALID_VALUE
        _set(ref, ERRORS[status][0].encode())
        return 0

    def cuGetErrorString(self, status, ref):
        if status not in ERRORS:
            return INVALID_VALUE
        _set(ref, ERRORS[status][1].encode())
        return 0

    @_call
    def cuInit(self, flags):
        self.needs_init = False
        return 0

    @_call
    def cuDriverGetVersion(self, ref):
        _set(ref, 12040)
        return 0

    @_call
    def cuDeviceGetCount(self, ref):
        _set(ref, self.devices)
        return 0

    @_call
    def cuDeviceGet(self, ref, ordinal):
        if not 0 <= ordinal < self.devices:
            return INVALID_DEVICE
        _set(ref, ordinal)
        return 0

    @_call
    def cuDeviceGetName(self, buffer, length, device):
        buffer.value = f"{self.name} {device}".encode()[:length - 1]
        return 0

    @_call
    def cuDeviceGetAttribute(self, ref, attribute, device):
        values = {75: self.capability[0], 76: self.capability[1], 16: 132}
        if attribute not in values:
            return INVALID_VALUE
        _set(ref, values[attribute])
        return 0

    @_call
    def cuDeviceTotalMem_v2(self, ref, device):
        _set(ref, self.memory)
        return 0

    @_call
    def cuDevicePrimaryCtxRetain(self, ref, device):
        _set(ref, 0xC0 + device)
        return 0

    @_call
    def cuCtxSetCurrent(self, context):
        self.current_context = context.value
        return 0

    @_call
    def cuCtxSynchronize(self):
        return 0 if self.current_context else INVALID_CONTEXT

    @_call
    def cuMemGetInfo_v2(self, free, total):
        _set(free, self.memory - self.used())
        _set(total, self.memory)
        return 0

    @_call
    def cuModuleLoadDataEx(self, ref, image, count, options, values):
        assert list(options[:count]) == [5, 6, 3, 4]
        if self.jit_error_log:
            log = self.jit_error_log.encode()[:values[1] - 1]
            ctypes.memmove(values[0], log, len(log))
            return INVALID_PTX
        self.last_ptx = ctypes.string_at(ctypes.addressof(image))
        _set(ref, self._handle())
        return 0

    @_call
    def cuModuleGetFunction(self, ref, module, name):
        if name.decode() not in self.kernels:
            return NOT_FOUND
        handle = self._handle()
        self.kernels[handle] = name.decode()
        _set(ref, handle)
        return 0

    @_call
    def cuModuleUnload(self, module):
        return 0

    @_call
    def cuFuncGetAttribute(self, ref, attribute, function):
        _set(ref, 32 if attribute == 4 else 1024)
        return 0

    @_call
    def cuFuncSetAttribute(self, function, attribute, value):
        return 0

    @_call
    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        name = self.kernels[function.value]
        args = [kind.from_address(params[i]).value for i, kind in enumerate(self.kernels[name])]
        self.launches.append((name, (gx, gy, gz), (bx, by, bz), shared, stream.value, args))
        return 0

    @_call
    def cuMemAlloc_v2(self, ref, nbytes):
        if nbytes == 0:
            return INVALID_VALUE
        if self.used() + nbytes > self.memory:
            return OUT_OF_MEMORY
        pointer = self._next_pointer
        self._next_pointer += -(-nbytes // 4096) * 4096
        self.buffers[pointer] = bytearray(nbytes)
        _set(ref, pointer)
        return 0

    @_call
    def cuMemFree_v2(self, pointer):
        return 0 if self.buffers.pop(pointer, None) is not None else INVALID_VALUE

    @_call
    def cuMemHostAlloc(self, ref, nbytes, flags):
        block = (ctypes.c_char * nbytes)()
        self.host[ctypes.addressof(block)] = block
        _set(ref, ctypes.addressof(block))
        return 0

    @_call
    def cuMemFreeHost(self, pointer):
        return 0 if self.host.pop(pointer.value, None) is not None else INVALID_VALUE

    def _device(self, pointer, nbytes):
        for start, buffer in self.buffers.items():
            if start <= pointer and pointer + nbytes <= start + len(buffer):
                return buffer, pointer - start
        return None, 0

    @_call
    def cuMemcpyHtoD_v2(self, device, host, nbytes):
        buffer, at = self._device(device, nbytes)
        if buffer is None:
            return INVALID_VALUE
        buffer[at:at + nbytes] = ctypes.string_at(host.value, nbytes)
        return 0

    @_call
    def cuMemcpyDtoH_v2(self, host, device, nbytes):
        buffer, at = self._device(device, nbytes)
        if buffer is None:
            return INVALID_VALUE
        ctypes.memmove(host.value, bytes(buffer[at:at + nbytes]), nbytes)
        return 0

    @_call
    def cuMemcpyDtoD_v2(self, destination, source, nbytes):
        (out, at), (src, start) = self._device(destination, nbytes), self._device(source, nbytes)
        if out is None or src is None:
            return INVALID_VALUE
        out[at:at + nbytes] = src[start:start + nbytes]
        return 0

    @_call
    def cuMemcpyHtoDAsync_v2(self, device, host, nbytes, stream):
        return self._on(stream) or self.cuMemcpyHtoD_v2(device, host, nbytes)

    @_call
    def cuMemcpyDtoHAsync_v2(self, host, device, nbytes, stream):
        return self._on(stream) or self.cuMemcpyDtoH_v2(host, device, nbytes)

    @_call
    def cuMemcpyDtoDAsync_v2(self, destination, source, nbytes, stream):
        return self._on(stream) or self.cuMemcpyDtoD_v2(destination, source, nbytes)

    @_call
    def cuMemsetD8_v2(self, device, value, count):
        buffer, at = self._device(device, count)
        if buffer is None:
            return INVALID_VALUE
        buffer[at:at + count] = bytes([value]) * count
        return 0

    @_call
    def cuMemsetD32_v2(self, device, value, count):
        buffer, at = self._device(device, 4 * count)
        if buffer is None:
            return INVALID_VALUE
        buffer[at:at + 4 * count] = value.to_bytes(4, "little") * count
        return 0

    @_call
    def cuMemsetD8Async(self, device, value, count, stream):
        return self._on(stream) or self.cuMemsetD8_v2(device, value, count)

    @_call
    def cuMemsetD32Async(self, device, value, count, stream):
        return self._on(stream) or self.cuMemsetD32_v2(device, value, count)

    def _on(self, stream) -> int:
        """INVALID_HANDLE unless `stream` is the default stream or one created."""
        handle = getattr(stream, "value", stream)
        return 0 if not handle or handle in self.streams else INVALID_HANDLE

    @_call
    def cuStreamCreate(self, ref, flags):
        handle = self._handle()
        self.streams.add(handle)
        _set(ref, handle)
        return 0

    @_call
    def cuStreamSynchronize(self, stream):
        return self._on(stream)

    @_call
    def cuStreamQuery(self, stream):
        return self._on(stream)

    @_call
    def cuStreamWaitEvent(self, stream, event, flags):
        return self._on(stream) or (0 if event.value in self.events else INVALID_HANDLE)

    @_call
    def cuStreamDestroy_v2(self, stream):
        if stream.value not in self.streams:
            return INVALID_HANDLE
        self.streams.remove(stream.value)
        return 0

    @_call
    def cuEventCreate(self, ref, flags):
        handle = self._handle()
        self.events[handle] = {"flags": flags, "at": None}
        _set(ref, handle)
        return 0

    @_call
    def cuEventRecord(self, event, stream):
        if event.value not in self.events:
            return INVALID_HANDLE
        self.events[event.value]["at"] = self.clock_ms
        return self._on(stream)

    @_call
    def cuEventSynchronize(self, event):
        return 0 if event.value in self.events else INVALID_HANDLE

    @_call
    def cuEventQuery(self, event):
        return 0 if event.value in self.events else INVALID_HANDLE

    @_call
    def cuEventElapsedTime_v2(self, ref, start, end):
        first, last = self.events.get(start.value), self.events.get(end.value)
        if first is None or last is None or first["at"] is None or last["at"] is None \
                or (first["flags"] | last["flags"]) & 2:
            return INVALID_HANDLE
        _set(ref, last["at"] - first["at"])
        return 0

    @_call
    def cuEventDestroy_v2(self, event):
        return 0 if self.events.pop(event.value, None) is not None else INVALID_HANDLE
