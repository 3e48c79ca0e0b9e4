"""Device memory and launches for eager's CUDA backend: CUDA tensors over the caching
allocator, copies between host and device, and kernels launched once loaded.

    empty(shape, dtype, dev)     a new contiguous CUDA tensor, its memory uninitialised
    from_host(array, dev)        a CUDA tensor holding a copy of a host array
    to_host(t)                   a host array of a CUDA tensor's elements (any strides)
    launch(kernel, grid, args)   run a CudaKernel; its module is loaded once per device

The driver is runtime.cuda.driver's, looked up at each call (runtime/cuda/emulated.py's
where KILN_CUDA=emulate or inside runtime.cuda.current.use_driver). A launch's arguments are
Python values matched to the kernel's parameters: a tensor for a pointer (its first
element's address), an int or float for a scalar."""
from __future__ import annotations

import ctypes
import weakref

import llvmlite.ir as ir
import numpy as np

from runtime.cuda.codegen import CudaKernel
from eager import profiler
from eager.device import device
from eager.shapes import contiguous_strides
from eager.tensor import DeviceStorage, Size, Tensor
from ir import dtypes
from ir.dtypes import DType
from runtime.cuda import current
from runtime.cuda import driver as cuda

_loaded = weakref.WeakKeyDictionary()  # driver -> {(ordinal, kernel name): function handle}
_SCALARS = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "i16": ctypes.c_int16,
            "i8": ctypes.c_int8, "i1": ctypes.c_bool, "float": ctypes.c_float,
            "double": ctypes.c_double}


def driver() -> cuda.Driver:
    return current.driver()


def empty(shape, dtype: DType, dev: device) -> Tensor:
    shape = Size(shape)
    nbytes = shape.numel() * dtype.itemsize
    memory = current.allocator(dev.index).malloc(nbytes)
    return Tensor._make(DeviceStorage(memory, dev, nbytes), shape,
                        contiguous_strides(shape), 0, dtype, dev)


def from_host(a: np.ndarray, dev: device) -> Tensor:
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)  # (which would also make a 0-d array 1-d)
    t = empty(a.shape, dtypes.from_numpy(a.dtype), dev)
    if a.nbytes:
        drv = driver()
        drv.activate(dev.index)
        drv.copy_to_device(t.data_ptr(), a.ctypes.data, a.nbytes)
    return t


def to_host(t: Tensor) -> np.ndarray:
    """The elements of CUDA tensor `t` as a new host array: the span of its storage that
    the view covers is copied, then read with the view's strides."""
    if t.numel() == 0:
        return np.empty(t.shape, t.dtype.np)
    size = t.dtype.itemsize
    lowest = sum((n - 1) * s for n, s in zip(t.shape, t._stride) if s < 0)
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t._stride) if s > 0) - lowest
    host = np.empty(span, t.dtype.np)
    drv = driver()
    drv.activate(t.device.index)
    drv.copy_to_host(host.ctypes.data, t.data_ptr() + lowest * size, span * size)
    view = np.lib.stride_tricks.as_strided(host[-lowest:], t.shape,
                                           [s * size for s in t._stride])
    return view.copy()


def copy_bytes(destination: Tensor, source: Tensor) -> None:
    """Device to device, both contiguous, of one dtype and size."""
    if destination.nbytes:
        drv = driver()
        drv.activate(destination.device.index)
        drv.copy_device(destination.data_ptr(), source.data_ptr(), destination.nbytes)


def launch(kernel: CudaKernel, grid, args: list, dev: device) -> None:
    """Run `kernel` on `dev` over `grid` blocks; `args` as the module's docstring says.
    While the profiler records, the launch is an event named after the kernel, timed on
    the device when the profiler was asked for CUDA activity."""
    prof = profiler.profile._active
    if prof is None:
        _launch(kernel, grid, args, dev)
        return
    with profiler.record_function(f"cuda::launch {kernel.name}") as event:
        if prof.use_cuda:
            event.device_time = _timed(kernel, grid, args, dev)
        else:
            _launch(kernel, grid, args, dev)


def _timed(kernel: CudaKernel, grid, args: list, dev: device) -> float:
    """Launch, and the microseconds the device took, between two CUDA events."""
    drv = driver()
    drv.activate(dev.index)
    start, end = drv.event_create(), drv.event_create()
    try:
        drv.event_record(start)
        _launch(kernel, grid, args, dev)
        drv.event_record(end)
        drv.event_synchronize(end)
        return drv.event_elapsed_ms(start, end) * 1e3
    finally:
        drv.event_destroy(start)
        drv.event_destroy(end)


def _launch(kernel: CudaKernel, grid, args: list, dev: device) -> None:
    drv = driver()
    drv.activate(dev.index)
    functions = _loaded.setdefault(drv, {})
    function = functions.get((dev.index, kernel.name))
    if function is None:
        module = drv.load_module(kernel.ptx(current.device_arch()))
        function = functions[dev.index, kernel.name] = drv.function(module, kernel.name)
    values = [_value(param.type, arg) for param, arg in zip(kernel.function.args, args)]
    drv.launch(function, grid, kernel.block, values)


def _value(ty: ir.Type, arg):
    if isinstance(ty, ir.PointerType):
        return ctypes.c_uint64(arg.data_ptr() if isinstance(arg, Tensor) else int(arg))
    return _SCALARS[str(ty)](arg)
