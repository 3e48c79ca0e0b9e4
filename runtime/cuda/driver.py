"""The CUDA driver API (libcuda) through ctypes.

    Driver(lib)     the calls kiln makes, over a ctypes library or any object with the
                    same functions (tests pass a fake): devices, primary contexts,
                    modules from PTX, launches, memory, copies, streams, events
    CudaError       a call returned an error: names the call, the driver's error name
                    and its text (cuGetErrorName, cuGetErrorString)

Every call's status is checked. Handles (contexts, modules, functions, streams, events)
are plain ints; stream 0 is the default stream. Device pointers are ints passed as
c_uint64, host pointers ints passed as c_void_p. Symbols are bound under the names
cuda.h maps them to (cuMemAlloc -> cuMemAlloc_v2, ...). A context is current per thread:
activate(ordinal) retains the device's primary context once and makes it current on the
calling thread. The caching allocator on top of this is runtime/cuda/allocator.py; which
driver a process uses, runtime/cuda/current.py.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import threading
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_ubyte, c_uint
from ctypes import c_uint64, c_void_p

CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_READY = 600
_ATTRIBUTE = {"multiprocessor_count": 16, "compute_capability_major": 75,
              "compute_capability_minor": 76, "max_shared_memory_per_block_optin": 97}
_FUNCTION_ATTRIBUTE = {"max_threads_per_block": 0, "shared_bytes": 1, "local_bytes": 3,
                       "registers": 4, "max_dynamic_shared_bytes": 8}
_JIT_INFO_LOG, _JIT_INFO_LOG_BYTES, _JIT_ERROR_LOG, _JIT_ERROR_LOG_BYTES = 3, 4, 5, 6
_JIT_LOG_BYTES = 16384
_EVENT_BLOCKING_SYNC, _EVENT_DISABLE_TIMING = 1, 2
_MISSING_LIBRARY = ("the CUDA driver library (libcuda.so) was not found; is an NVIDIA "
                    "driver installed?")

_P, _DEVICE_POINTER = c_void_p, c_uint64
_SIGNATURES = {
    "cuGetErrorName": (c_int, POINTER(c_char_p)),
    "cuGetErrorString": (c_int, POINTER(c_char_p)),
    "cuInit": (c_uint,),
    "cuDriverGetVersion": (POINTER(c_int),),
    "cuDeviceGetCount": (POINTER(c_int),),
    "cuDeviceGet": (POINTER(c_int), c_int),
    "cuDeviceGetName": (c_char_p, c_int, c_int),
    "cuDeviceGetAttribute": (POINTER(c_int), c_int, c_int),
    "cuDeviceTotalMem_v2": (POINTER(c_size_t), c_int),
    "cuDevicePrimaryCtxRetain": (POINTER(_P), c_int),
    "cuCtxSetCurrent": (_P,),
    "cuCtxSynchronize": (),
    "cuMemGetInfo_v2": (POINTER(c_size_t), POINTER(c_size_t)),
    "cuModuleLoadDataEx": (POINTER(_P), _P, c_uint, POINTER(c_int), POINTER(_P)),
    "cuModuleGetFunction": (POINTER(_P), _P, c_char_p),
    "cuModuleUnload": (_P,),
    "cuFuncGetAttribute": (POINTER(c_int), c_int, _P),
    "cuFuncSetAttribute": (_P, c_int, c_int),
    "cuLaunchKernel": (_P, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, _P,
                       POINTER(_P), POINTER(_P)),
    "cuMemAlloc_v2": (POINTER(_DEVICE_POINTER), c_size_t),
    "cuMemFree_v2": (_DEVICE_POINTER,),
    "cuMemHostAlloc": (POINTER(_P), c_size_t, c_uint),
    "cuMemFreeHost": (_P,),
    "cuMemcpyHtoD_v2": (_DEVICE_POINTER, _P, c_size_t),
    "cuMemcpyDtoH_v2": (_P, _DEVICE_POINTER, c_size_t),
    "cuMemcpyDtoD_v2": (_DEVICE_POINTER, _DEVICE_POINTER, c_size_t),
    "cuMemcpyHtoDAsync_v2": (_DEVICE_POINTER, _P, c_size_t, _P),
    "cuMemcpyDtoHAsync_v2": (_P, _DEVICE_POINTER, c_size_t, _P),
    "cuMemcpyDtoDAsync_v2": (_DEVICE_POINTER, _DEVICE_POINTER, c_size_t, _P),
    "cuMemsetD8_v2": (_DEVICE_POINTER, c_ubyte, c_size_t),
    "cuMemsetD32_v2": (_DEVICE_POINTER, c_uint, c_size_t),
    "cuMemsetD8Async": (_DEVICE_POINTER, c_ubyte, c_size_t, _P),
    "cuMemsetD32Async": (_DEVICE_POINTER, c_uint, c_size_t, _P),
    "cuStreamCreate": (POINTER(_P), c_uint),
    "cuStreamSynchronize": (_P,),
    "cuStreamQuery": (_P,),
    "cuStreamWaitEvent": (_P, _P, c_uint),
    "cuStreamDestroy_v2": (_P,),
    "cuEventCreate": (POINTER(_P), c_uint),
    "cuEventRecord": (_P, _P),
    "cuEventSynchronize": (_P,),
    "cuEventQuery": (_P,),
    "cuEventElapsedTime_v2": (POINTER(c_float), _P, _P),
    "cuEventDestroy_v2": (_P,),
}
# Drivers before CUDA 12.8 have only the first version of these.
_OLDER_NAMES = {"cuEventElapsedTime_v2": "cuEventElapsedTime"}


class CudaUnavailable(RuntimeError):
    """No CUDA driver library or no GPU: the message says which."""


class CudaError(RuntimeError):
    """A driver call failed: `call`, `status` (the CUresult), `name` and `text` (the
    driver's), and `log` (the JIT's error log, for a module load)."""

    def __init__(self, call: str, status: int, name: str, text: str, log: str = ""):
        message = f"{call} failed with {name} ({status}): {text}"
        super().__init__(f"{message}\nJIT error log:\n{log}" if log else message)
        self.call, self.status, self.name, self.text, self.log = call, status, name, text, log


def load_library():
    """libcuda as a ctypes library with every function's argument types declared, or
    CudaUnavailable where it cannot be loaded."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        raise CudaUnavailable(_MISSING_LIBRARY) from None
    for symbol, argtypes in _SIGNATURES.items():
        if not hasattr(lib, symbol) and symbol in _OLDER_NAMES:
            setattr(lib, symbol, getattr(lib, _OLDER_NAMES[symbol]))
        function = getattr(lib, symbol)
        function.argtypes, function.restype = argtypes, c_int
    return lib


def _address(index: int, arg) -> int:
    try:
        return ctypes.addressof(arg)
    except TypeError:
        raise TypeError(f"kernel argument {index} is a {type(arg).__name__}: pass a ctypes "
                        "value (c_uint64 for a device pointer)") from None


def _dims(what: str, dims) -> tuple[int, int, int]:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, int) or d < 1 for d in dims):
        raise ValueError(f"a launch's {what} is 1 to 3 positive ints, got {dims}")
    return dims + (1,) * (3 - len(dims))


class Driver:
    """The driver calls kiln makes, each checked, over `lib` (libcuda or a fake)."""

    def __init__(self, lib):
        self._lib = lib
        self._contexts: dict[int, int] = {}
        self._count: int | None = None
        self._thread = threading.local()

    @classmethod
    def open(cls, lib) -> "Driver":
        """A Driver over `lib` after cuInit, or CudaUnavailable where cuInit fails or
        there is no GPU."""
        found = cls(lib)
        try:
            found.check("cuInit", lib.cuInit(0))
            count = found.device_count()
        except CudaError as error:
            raise CudaUnavailable(str(error)) from error
        if count == 0:
            raise CudaUnavailable("no CUDA device was found")
        return found

    def check(self, call: str, status: int, log: str = "") -> None:
        """CudaError naming `call` and the driver's error name and text unless `status`
        is CUDA_SUCCESS."""
        if status == 0:
            return
        name, text = c_char_p(), c_char_p()
        if self._lib.cuGetErrorName(status, byref(name)) != 0 or not name.value:
            raise CudaError(call, status, f"CUDA error {status}", "unknown to this driver", log)
        self._lib.cuGetErrorString(status, byref(text))
        raise CudaError(call, status, name.value.decode(), (text.value or b"").decode(), log)

    # devices and contexts

    def version(self) -> int:
        """The driver's CUDA version, 1000 * major + 10 * minor (12040 is 12.4)."""
        value = c_int()
        self.check("cuDriverGetVersion", self._lib.cuDriverGetVersion(byref(value)))
        return value.value

    def device_count(self) -> int:
        """The GPUs the driver sees (asked once: they do not change while a process runs)."""
        if self._count is None:
            value = c_int()
            self.check("cuDeviceGetCount", self._lib.cuDeviceGetCount(byref(value)))
            self._count = value.value
        return self._count

    def device(self, ordinal: int) -> int:
        handle = c_int()
        self.check("cuDeviceGet", self._lib.cuDeviceGet(byref(handle), ordinal))
        return handle.value

    def device_name(self, ordinal: int) -> str:
        name = ctypes.create_string_buffer(256)
        self.check("cuDeviceGetName", self._lib.cuDeviceGetName(name, 256, self.device(ordinal)))
        return name.value.decode()

    def attribute(self, ordinal: int, name: str) -> int:
        """A device attribute by its name in _ATTRIBUTE (multiprocessor_count, ...)."""
        value = c_int()
        self.check("cuDeviceGetAttribute", self._lib.cuDeviceGetAttribute(
            byref(value), _ATTRIBUTE[name], self.device(ordinal)))
        return value.value

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        return (self.attribute(ordinal, "compute_capability_major"),
                self.attribute(ordinal, "compute_capability_minor"))

    def total_memory(self, ordinal: int) -> int:
        value = c_size_t()
        self.check("cuDeviceTotalMem_v2",
                   self._lib.cuDeviceTotalMem_v2(byref(value), self.device(ordinal)))
        return value.value

    def activate(self, ordinal: int = 0) -> None:
        """Make device `ordinal`'s primary context current on this thread (retained the
        first time; every call below runs in the current context)."""
        if getattr(self._thread, "ordinal", None) == ordinal:
            return
        if ordinal not in self._contexts:
            context = _P()
            self.check("cuDevicePrimaryCtxRetain",
                       self._lib.cuDevicePrimaryCtxRetain(byref(context), self.device(ordinal)))
            self._contexts[ordinal] = context.value
        self.check("cuCtxSetCurrent", self._lib.cuCtxSetCurrent(_P(self._contexts[ordinal])))
        self._thread.ordinal = ordinal

    def current_device(self) -> int | None:
        """The ordinal activated on this thread, None before any."""
        return getattr(self._thread, "ordinal", None)

    def synchronize(self) -> None:
        """Wait for all work in the current context."""
        self.check("cuCtxSynchronize", self._lib.cuCtxSynchronize())

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
        free, total = c_size_t(), c_size_t()
        self.check("cuMemGetInfo_v2", self._lib.cuMemGetInfo_v2(byref(free), byref(total)))
        return free.value, total.value

    # modules and launches

    def load_module(self, ptx: str | bytes) -> int:
        """Load PTX (the driver's JIT assembles it); a failure raises CudaError with the
        JIT's error log (`.log`) and its info log in the message."""
        image = ctypes.create_string_buffer(ptx.encode() if isinstance(ptx, str) else ptx)
        error_log = ctypes.create_string_buffer(_JIT_LOG_BYTES)
        info_log = ctypes.create_string_buffer(_JIT_LOG_BYTES)
        options = (c_int * 4)(_JIT_ERROR_LOG, _JIT_ERROR_LOG_BYTES,
                              _JIT_INFO_LOG, _JIT_INFO_LOG_BYTES)
        values = (_P * 4)(ctypes.addressof(error_log), _JIT_LOG_BYTES,
                          ctypes.addressof(info_log), _JIT_LOG_BYTES)
        module = _P()
        status = self._lib.cuModuleLoadDataEx(byref(module), image, 4, options, values)
        log = "\n".join(part for part in (error_log.value.decode(errors="replace").strip(),
                                          info_log.value.decode(errors="replace").strip())
                        if part)
        self.check("cuModuleLoadDataEx", status, log or "(the JIT wrote no log)")
        return module.value

    def unload_module(self, module: int) -> None:
        self.check("cuModuleUnload", self._lib.cuModuleUnload(_P(module)))

    def function(self, module: int, name: str) -> int:
        """The kernel `name` of a loaded module."""
        handle = _P()
        status = self._lib.cuModuleGetFunction(byref(handle), _P(module), name.encode())
        self.check(f"cuModuleGetFunction({name!r})", status)
        return handle.value

    def function_attribute(self, function: int, name: str) -> int:
        """A kernel's attribute by its name in _FUNCTION_ATTRIBUTE (registers, ...)."""
        value = c_int()
        self.check("cuFuncGetAttribute", self._lib.cuFuncGetAttribute(
            byref(value), _FUNCTION_ATTRIBUTE[name], _P(function)))
        return value.value

    def set_function_attribute(self, function: int, name: str, value: int) -> None:
        """Set a kernel's attribute (max_dynamic_shared_bytes, to launch with more than
        48 KiB of dynamic shared memory)."""
        self.check("cuFuncSetAttribute", self._lib.cuFuncSetAttribute(
            _P(function), _FUNCTION_ATTRIBUTE[name], value))

    def launch(self, function: int, grid, block, args, shared_bytes: int = 0,
               stream: int = 0) -> None:
        """Launch a kernel on grid x block threads. `args` holds one ctypes value per
        kernel parameter, in order (c_uint64 for a device pointer, c_int32, c_float...);
        the driver reads each through a pointer to it."""
        params = (_P * len(args))(*(_address(i, arg) for i, arg in enumerate(args))) \
            if args else None
        (gx, gy, gz), (bx, by, bz) = _dims("grid", grid), _dims("block", block)
        self.check("cuLaunchKernel", self._lib.cuLaunchKernel(
            _P(function), gx, gy, gz, bx, by, bz, shared_bytes, _P(stream), params, None))

    # memory

    def alloc(self, nbytes: int) -> int:
        """`nbytes` of device memory (uncached: the allocator caches on top of this)."""
        pointer = _DEVICE_POINTER()
        self.check("cuMemAlloc_v2", self._lib.cuMemAlloc_v2(byref(pointer), nbytes))
        return pointer.value

    def free(self, pointer: int) -> None:
        self.check("cuMemFree_v2", self._lib.cuMemFree_v2(pointer))

    def host_alloc(self, nbytes: int, flags: int = 0) -> int:
        """`nbytes` of page-locked host memory, for copies that run at full speed (and
        asynchronously on a stream)."""
        pointer = _P()
        self.check("cuMemHostAlloc", self._lib.cuMemHostAlloc(byref(pointer), nbytes, flags))
        return pointer.value

    def host_free(self, pointer: int) -> None:
        self.check("cuMemFreeHost", self._lib.cuMemFreeHost(_P(pointer)))

    def copy_to_device(self, device: int, host: int, nbytes: int, stream: int | None = None):
        """Host -> device; on `stream` asynchronously when one is given (the host memory
        then stays untouched until the stream reaches the copy: pin it)."""
        if stream is None:
            self.check("cuMemcpyHtoD_v2", self._lib.cuMemcpyHtoD_v2(device, _P(host), nbytes))
        else:
            self.check("cuMemcpyHtoDAsync_v2", self._lib.cuMemcpyHtoDAsync_v2(
                device, _P(host), nbytes, _P(stream)))

    def copy_to_host(self, host: int, device: int, nbytes: int, stream: int | None = None):
        """Device -> host; on `stream` asynchronously when one is given."""
        if stream is None:
            self.check("cuMemcpyDtoH_v2", self._lib.cuMemcpyDtoH_v2(_P(host), device, nbytes))
        else:
            self.check("cuMemcpyDtoHAsync_v2", self._lib.cuMemcpyDtoHAsync_v2(
                _P(host), device, nbytes, _P(stream)))

    def copy_device(self, destination: int, source: int, nbytes: int,
                    stream: int | None = None):
        """Device -> device; on `stream` asynchronously when one is given."""
        if stream is None:
            self.check("cuMemcpyDtoD_v2",
                       self._lib.cuMemcpyDtoD_v2(destination, source, nbytes))
        else:
            self.check("cuMemcpyDtoDAsync_v2", self._lib.cuMemcpyDtoDAsync_v2(
                destination, source, nbytes, _P(stream)))

    def memset8(self, device: int, value: int, count: int, stream: int | None = None):
        """Set `count` bytes to `value`."""
        if stream is None:
            self.check("cuMemsetD8_v2", self._lib.cuMemsetD8_v2(device, value, count))
        else:
            self.check("cuMemsetD8Async",
                       self._lib.cuMemsetD8Async(device, value, count, _P(stream)))

    def memset32(self, device: int, value: int, count: int, stream: int | None = None):
        """Set `count` 32-bit words to `value` (a float's bits, for a fill)."""
        if stream is None:
            self.check("cuMemsetD32_v2", self._lib.cuMemsetD32_v2(device, value, count))
        else:
            self.check("cuMemsetD32Async",
                       self._lib.cuMemsetD32Async(device, value, count, _P(stream)))

    # streams and events

    def stream_create(self, flags: int = 0) -> int:
        stream = _P()
        self.check("cuStreamCreate", self._lib.cuStreamCreate(byref(stream), flags))
        return stream.value

    def stream_synchronize(self, stream: int) -> None:
        self.check("cuStreamSynchronize", self._lib.cuStreamSynchronize(_P(stream)))

    def stream_done(self, stream: int) -> bool:
        """Whether all work queued on `stream` has finished."""
        return self._ready("cuStreamQuery", self._lib.cuStreamQuery(_P(stream)))

    def stream_wait_event(self, stream: int, event: int) -> None:
        """Work queued on `stream` from now on waits for `event`."""
        self.check("cuStreamWaitEvent", self._lib.cuStreamWaitEvent(_P(stream), _P(event), 0))

    def stream_destroy(self, stream: int) -> None:
        self.check("cuStreamDestroy_v2", self._lib.cuStreamDestroy_v2(_P(stream)))

    def event_create(self, timing: bool = True, blocking: bool = False) -> int:
        flags = (0 if timing else _EVENT_DISABLE_TIMING) | (_EVENT_BLOCKING_SYNC if blocking else 0)
        event = _P()
        self.check("cuEventCreate", self._lib.cuEventCreate(byref(event), flags))
        return event.value

    def event_record(self, event: int, stream: int = 0) -> None:
        self.check("cuEventRecord", self._lib.cuEventRecord(_P(event), _P(stream)))

    def event_synchronize(self, event: int) -> None:
        self.check("cuEventSynchronize", self._lib.cuEventSynchronize(_P(event)))

    def event_done(self, event: int) -> bool:
        """Whether the work before the event's record has finished."""
        return self._ready("cuEventQuery", self._lib.cuEventQuery(_P(event)))

    def event_elapsed_ms(self, start: int, end: int) -> float:
        """Milliseconds between two recorded events (both made with timing)."""
        value = c_float()
        self.check("cuEventElapsedTime",
                   self._lib.cuEventElapsedTime_v2(byref(value), _P(start), _P(end)))
        return value.value

    def event_destroy(self, event: int) -> None:
        self.check("cuEventDestroy_v2", self._lib.cuEventDestroy_v2(_P(event)))

    def _ready(self, call: str, status: int) -> bool:
        if status == CUDA_ERROR_NOT_READY:
            return False
        self.check(call, status)
        return True
