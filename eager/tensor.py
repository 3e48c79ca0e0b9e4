"""Tensor: a strided view (shape, strides, offset, dtype, device) of a Storage.

Views share their Storage, and so its version counter, which in-place ops bump and
autograd checks. On the CPU a Storage holds a 1-D numpy array; `_np()` is the tensor's
numpy view of it, built once and cached.

Methods that run ops or autograd (`t.to(...)`, `t.backward()`, `t.exp()`, `a + b`, ...) are
attached to Tensor by eager/_tensor_methods.py, which sits above the kernels and autograd.
"""
from __future__ import annotations

import contextlib
import math
import threading
import types

import numpy as np

from eager import dispatcher, layouts
from eager._formatting import tensor_repr
from eager.device import CPU, META, device
from eager.dispatcher import AUTOGRAD_OF, DispatchKey
from eager.shapes import contiguous_strides, wrap_dim
from runtime.addresses import array_address
from ir import dtypes
from ir.dtypes import DType


class Size(tuple):
    def __repr__(self) -> str:
        return f"eager.Size([{', '.join(str(s) for s in self)}])"

    def numel(self) -> int:
        n = 1
        for s in self:
            n *= s
        return n


class Storage:
    """Memory that tensors view. `data` is a 1-D numpy array on the CPU, None on meta."""
    __slots__ = ("data", "version", "device", "nbytes", "_address", "__weakref__")

    def __init__(self, data, device_: device, nbytes: int):
        self.data = data
        self.version = 0
        self.device = device_
        self.nbytes = nbytes
        self._address = None

    @property
    def address(self) -> int:
        """Where the memory starts (asked once: numpy's ctypes bridge is slow)."""
        if self._address is None:
            self._address = 0 if self.data is None else array_address(self.data)
        return self._address


class DeviceStorage(Storage):
    """Memory on a device: `memory` is the device backend's allocation (a CUDA tensor's
    holds a runtime/cuda_allocator.DeviceMemory, freed when the last view goes) and
    `data` is None: the host reads it only through a copy (`t.cpu()`)."""
    __slots__ = ("memory",)

    def __init__(self, memory, device_: device, nbytes: int):
        super().__init__(None, device_, nbytes)
        self.memory = memory
        self._address = memory.pointer


# bound once: every new tensor passed to native code asks for its address


_BACKEND_KEY = {"cpu": DispatchKey.CPU, "cuda": DispatchKey.CUDA, "meta": DispatchKey.Meta}
_BACKEND_BIT = {kind: 1 << key for kind, key in _BACKEND_KEY.items()}


def _dispatch_keys(device_: device, requires_grad: bool) -> int:
    """A tensor's key bits: its backend, and that backend's Autograd key if it needs grad."""
    backend = _BACKEND_KEY[device_.type]
    return (1 << backend) | ((1 << AUTOGRAD_OF[backend]) if requires_grad else 0)


_data_watch = None
"""While graph capture runs: called with every tensor whose elements are about to be read
or written on the host (compiler/capture.py breaks the graph where Python sees the values
of a tensor the call did not make)."""


def set_data_watch(watch) -> None:
    global _data_watch
    _data_watch = watch


_whole_step_hook = None  # while graph capture runs: see whole_step
_grad_watch = None
"""While graph capture runs: called with a tensor and the value given to its `.grad`
(compiler/capture.py: Python setting a `.grad` is a side effect a replay would miss)."""


def set_whole_step_hook(hook, grad_watch) -> None:
    global _whole_step_hook, _grad_watch
    _whole_step_hook, _grad_watch = hook, grad_watch


def whole_step(call, what: str, nulls_grads_of=(), tensors=()):
    """Run `call(*tensors)`, a step of a library's own (an optimiser's step, zero_grad,
    Tensor.backward) that capture takes whole: while a capture runs, compiler/capture.py's
    hook runs it eagerly after the graph before it and keeps it in the captured program,
    to run again (on that graph's new results) when the program replays. `what` names it
    (`Adam.step()`); `nulls_grads_of`: the tensors whose `.grad` it sets to None."""
    hook = _whole_step_hook
    return call(*tensors) if hook is None else hook(call, what, nulls_grads_of, tensors)


_break_hook = None  # while graph capture runs: see run_eagerly


def set_break_hook(hook) -> None:
    global _break_hook
    _break_hook = hook


def run_eagerly(call, why: str):
    """Run `call()` eagerly: while a capture runs, compiler/capture.py's hook ends the
    pending region there (a graph break explain() lists, `why` its reason) and runs
    `call` outside capture (an autograd.Function: its backward is the user's Python)."""
    hook = _break_hook
    return call() if hook is None else hook(call, why)


_reading = threading.local()


@contextlib.contextmanager
def reading_values(why: str):
    """Says why the code inside reads tensors' values on the host (`one_hot` finding its
    number of classes); a graph break there gives this reason (reading_why)."""
    prev = getattr(_reading, "why", None)
    _reading.why = why
    try:
        yield
    finally:
        _reading.why = prev


def reading_why() -> str | None:
    return getattr(_reading, "why", None)


class Tensor:
    __slots__ = ("_storage", "_shape", "_stride", "_offset", "dtype", "device", "_keys",
                 "_requires_grad", "_grad", "grad_fn", "output_nr", "_base", "_np_cache",
                 "_wrapped", "_hooks", "_retains_grad", "_grad_accumulator", "_lazy", "__weakref__",
                 "__dict__")

    __array_priority__ = 1000  # numpy defers `ndarray op tensor` to our reflected ops

    @classmethod
    def _make(cls, storage: Storage, shape, stride, offset: int, dtype: DType,
              device_: device, base: Tensor | None = None) -> Tensor:
        t = object.__new__(cls)
        t._storage = storage
        t._shape = shape if type(shape) is Size else Size(shape)
        t._stride = stride if type(stride) is tuple else tuple(stride)
        t._offset = offset
        t.dtype = dtype
        t.device = device_
        t._keys = _BACKEND_BIT[device_.type]
        t._requires_grad = False
        t._grad = None
        t.grad_fn = None
        t.output_nr = 0
        t._base = base
        t._np_cache = None
        t._lazy = None  # set while graph capture holds this tensor's value unevaluated
        t._wrapped = False
        t._hooks = None
        t._retains_grad = False
        t._grad_accumulator = None
        return t

    # Tensor(...) itself is PyTorch's legacy constructor, attached by eager/factories.py

    # metadata ----------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return self._shape

    def size(self, dim: int | None = None):
        return self._shape if dim is None else self._shape[wrap_dim(dim, len(self._shape))]

    def stride(self, dim: int | None = None):
        return self._stride if dim is None else self._stride[wrap_dim(dim, len(self._shape))]

    def storage_offset(self) -> int:
        return self._offset

    def dim(self) -> int:
        return len(self._shape)

    ndim = property(dim)

    def numel(self) -> int:
        return self._shape.numel()

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_meta(self) -> bool:
        return self.device.type == "meta"

    # PyTorch's predicates for devices kiln has no backend for, and for layouts it has not
    # (kiln's tensors are dense and strided: not sparse, quantized, nested or mkldnn)
    is_xpu = is_mps = is_ipu = is_mtia = is_xla = is_maia = is_vulkan = property(
        lambda self: False)
    is_sparse = is_sparse_csr = is_quantized = is_nested = is_mkldnn = property(
        lambda self: False)

    @property
    def layout(self):
        """Always `strided`: kiln's tensors are dense (eager/layouts.py)."""
        return layouts.strided

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_contiguous(self) -> bool:
        expected = 1
        for size, stride in zip(reversed(self._shape), reversed(self._stride)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def data_ptr(self) -> int:
        """The address of the first element: host memory on the CPU, device memory on a
        device (0 on meta, which has none)."""
        storage = self._storage
        address = storage._address  # (known once asked: the property only the first time)
        if address is None:
            address = storage.address
        return address + self._offset * self.dtype.itemsize if address else 0

    @property
    def _version(self) -> int:
        return self._storage.version

    def _bump(self) -> None:
        self._storage.version += 1

    # autograd state ----------------------------------------------------------------
    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value) -> None:
        if _grad_watch is not None:
            _grad_watch(self, value)
        self._grad = value

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if self.grad_fn is not None and not value:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you "
                               "want to use a computed variable in a subgraph that doesn't require "
                               "differentiation use var_no_grad = var.detach().")
        self._set_requires_grad(bool(value))

    def _set_requires_grad(self, value: bool) -> None:
        if value and not self.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients, "
                               f"got {self.dtype}")
        self._requires_grad = value
        self._keys = _dispatch_keys(self.device, value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def data(self) -> Tensor:
        return self.detach()

    @data.setter
    def data(self, other: Tensor) -> None:
        self._shape, self.dtype, self.device = other._shape, other.dtype, other.device
        self._storage, self._stride, self._offset = other._storage, other._stride, other._offset
        self._np_cache = None
        self._keys = _dispatch_keys(self.device, self._requires_grad)

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    # data access -------------------------------------------------------------------
    def _np(self) -> np.ndarray:
        """The numpy view of this tensor's elements (CPU only; no grad checks)."""
        if _data_watch is not None:
            _data_watch(self)
        a = self._np_cache
        if a is None:
            data = self._storage.data
            if data is None and self._lazy is not None:
                self._lazy.materialize(self)  # a graph break: run the captured region
                return self._np()
            if data is None:
                raise RuntimeError(f"tensor on {self.device} has no host data; move it with "
                                   ".cpu() first" if self.device.type == "cuda" else
                                   "Cannot access data of a meta tensor")
            size = self.dtype.itemsize
            # an empty view may sit past the end of its storage (zeros(0, 3)[:, 1:])
            offset = self._offset * size if self.numel() else 0
            a = np.ndarray(self._shape, dtype=data.dtype, buffer=data, offset=offset,
                           strides=[s * size for s in self._stride])
            self._np_cache = a
        return a

    def numpy(self, *, force: bool = False) -> np.ndarray:
        if self.device.type != "cpu":
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. "
                            "Use Tensor.cpu() to copy the tensor to host memory first.")
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return self._np()

    def tolist(self):
        return self._host_np().tolist()

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to "
                               "Scalar")
        return self._host_np().reshape(()).item()

    def _host_np(self) -> np.ndarray:
        return self._np() if self.device.type == "cpu" else self.cpu()._np()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point or self.dtype is dtypes.bool_:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            kind = "no values" if self.numel() == 0 else "more than one value"
            raise RuntimeError(f"Boolean value of Tensor with {kind} is ambiguous")
        return bool(self.item())

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._shape[0]))

    def __array__(self, dtype=None, copy=None):
        a = self.detach()._host_np()
        return a if dtype is None else a.astype(dtype)

    def __hash__(self):
        return id(self)

    def __repr__(self) -> str:
        return tensor_repr(self)

    def __reduce_ex__(self, protocol):
        raise TypeError("kiln tensors are not pickled; use eager.save / eager.load")


def from_array(a: np.ndarray, device_: device = CPU) -> Tensor:
    """A new tensor over `a` (made contiguous first if it is not).

    Every op's result is made here, so this is Storage.__init__ and Tensor._make written
    out in one function: two calls fewer, ~0.3 us of ~0.7 (a test checks that it sets
    what they set)."""
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)  # (this would also turn a 0-d array into 1-d)
    dt = _DTYPE_OF_NP.get(a.dtype) or dtypes.from_numpy(a.dtype)
    layout = _LAYOUTS.get(a.shape)
    if layout is None:
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        layout = _LAYOUTS[a.shape] = Size(a.shape), contiguous_strides(a.shape)
    storage = _new(Storage)
    storage.data = a.ravel()  # a view: `a` is contiguous
    storage.version = 0
    storage.device = device_
    storage.nbytes = a.nbytes
    storage._address = None
    t = _new(Tensor)
    t._storage = storage
    t._shape, t._stride = layout
    t._offset = 0
    t.dtype = dt
    t.device = device_
    t._keys = _CPU_BIT if device_ is CPU else _BACKEND_BIT[device_.type]
    t._requires_grad = False
    t._grad = None
    t.grad_fn = None
    t.output_nr = 0
    t._base = None
    t._np_cache = a
    t._lazy = None
    t._wrapped = False
    t._hooks = None
    t._retains_grad = False
    t._grad_accumulator = None
    return t


_new = object.__new__
_CPU_BIT = _BACKEND_BIT["cpu"]


ALIGN = 64
ALIGN_FROM = 1 << 14
"""kiln allocates host memory of ALIGN_FROM bytes or more on a cache line (ALIGN bytes):
numpy's large allocations start 16 bytes past one, and row kernels reading them ran
20-30% slower (a compiled 512x256 row sum: 6.62 us against 5.35 aligned)."""


def aligned_empty(shape, np_dtype) -> np.ndarray:
    """np.empty(shape, np_dtype), starting on an ALIGN-byte boundary from ALIGN_FROM bytes
    on (numbers only: bool, integers, floats)."""
    dt = np_dtype if isinstance(np_dtype, np.dtype) else np.dtype(np_dtype)
    flat = type(shape) is int
    count = shape if flat else math.prod(shape)
    size = dt.itemsize
    if count * size < ALIGN_FROM or dt.kind not in "biuf":
        return np.empty(shape, dt)
    # ALIGN bytes more, in elements of dt, and a slice from the first aligned one: the
    # memory is the allocator's, at least 16-byte aligned, so the skip is whole elements
    # (1.2 -> 0.35 us a call where a byte buffer was viewed as dt)
    raw = np.empty(count + ALIGN // size, dt)
    skip = -array_address(raw) % ALIGN
    if skip % size:  # (an allocator aligned to less than an element)
        raw = np.empty(count * size + ALIGN, np.uint8)
        skip = -array_address(raw) % ALIGN
        return raw[skip:skip + count * size].view(dt).reshape(shape)
    skip //= size
    return raw[skip:skip + count] if flat else raw[skip:skip + count].reshape(shape)


def aligned(a: np.ndarray) -> np.ndarray:
    """`a`, or a copy of it on an ALIGN-byte boundary where it is large and not on one."""
    if a.nbytes < ALIGN_FROM or a.dtype.kind not in "biuf" or \
            array_address(a) % ALIGN == 0:
        return a
    out = aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def empty_spec(shape, dtype: DType) -> tuple:
    """(Size, contiguous strides, elements, dtype) of a new tensor of `shape`: what
    `empty_cpu` takes, computed once (a kernel's output spec)."""
    size = Size(shape)
    return size, contiguous_strides(size), size.numel(), dtype


def empty_cpu(shape: Size, strides: tuple, numel: int, dtype: DType) -> Tensor:
    """A new contiguous CPU tensor of uninitialised memory, for hot paths (compiled
    kernels' outputs) that compute its Size, strides and element count once: Storage
    and Tensor._make written out, as in from_array."""
    a = np.empty(numel, dtype.np) if numel * dtype.itemsize < ALIGN_FROM else \
        aligned_empty(numel, dtype.np)
    storage = _new(Storage)
    storage.data = a
    storage.version = 0
    storage.device = CPU
    storage.nbytes = a.nbytes
    storage._address = None
    t = _new(Tensor)
    t._storage = storage
    t._shape = shape
    t._stride = strides
    t._offset = 0
    t.dtype = dtype
    t.device = CPU
    t._keys = _CPU_BIT
    t._requires_grad = False
    t._grad = None
    t.grad_fn = None
    t.output_nr = 0
    t._base = None
    t._np_cache = None
    t._lazy = None
    t._wrapped = False
    t._hooks = None
    t._retains_grad = False
    t._grad_accumulator = None
    return t


def meta_empty(shape, dt: DType) -> Tensor:
    """A new meta tensor: shape and dtype, no data."""
    return Tensor._make(Storage(None, META, 0), shape, contiguous_strides(shape), 0, dt, META)


_DTYPE_OF_NP = {d.np: d for d in dtypes.ALL}
_LAYOUTS: dict = {}  # shape -> (Size, contiguous strides): shapes repeat, so remember them


def share_array(a: np.ndarray) -> Tensor:
    """A tensor sharing `a`'s memory, whatever its (non-negative) strides."""
    dt = dtypes.from_numpy(a.dtype)
    size = a.itemsize
    if any(s < 0 for s in a.strides):
        raise ValueError("At least one stride in the given numpy array is negative; this is not "
                         "supported. (You can probably work around this by making a copy of "
                         "your array with array.copy().)")
    if any(s % size for s in a.strides):
        raise ValueError("given numpy array strides not a multiple of the element byte size. "
                         "Copy the numpy array to reallocate the memory.")
    span = 1 + sum((n - 1) * s // size for n, s in zip(a.shape, a.strides)) if a.size else 0
    flat = np.lib.stride_tricks.as_strided(a, shape=(span,), strides=(size,),
                                           writeable=a.flags.writeable)
    t = Tensor._make(Storage(flat, CPU, span * size), a.shape,
                     tuple(s // size for s in a.strides), 0, dt, CPU)
    t._np_cache = a
    return t


def wrap_scalar(value) -> Tensor:
    """A Python number as a zero-dim 'wrapped number': it takes part in type promotion
    as a scalar and carries no dispatch key of its own. Each call makes a new tensor;
    the read-only array under it is kept per (type, value) for the numbers met again
    (`x * 0.5` in a loop)."""
    key = (value.__class__, value)
    try:
        dt, a = _NUMBER_ARRAYS[key]
    except (KeyError, TypeError):  # TypeError: an unhashable number-like
        dt = dtypes.scalar_dtype(value)
        a = np.asarray(value, dtype=np.float64 if dt.is_floating_point else dt.np)
        # floats equal to zero are not kept: 0.0 and -0.0 are one key
        if value == value and (value or not dt.is_floating_point):
            a.flags.writeable = False
            if len(_NUMBER_ARRAYS) >= 1024:
                _NUMBER_ARRAYS.clear()
            # a float's dtype is the default dtype of the moment, not kept
            _NUMBER_ARRAYS[key] = None if dt.is_floating_point else dt, a
    if dt is None:
        dt = dtypes.get_default_dtype()
    t = from_array(a)
    t.dtype = dt
    t._wrapped = True
    t._keys = 0
    return t


_NUMBER_ARRAYS: dict = {}  # (type, value) -> (dtype, read-only zero-dim array)
dispatcher.set_number_wrapper(wrap_scalar)


ops = types.ModuleType("eager.ops", """`ops.mm(...)`: the aten ops by schema name, each
its handle's plain function (OpHandle.entry: the same call, without the handle's own
__call__ in between). A module object, each op's entry kept in its namespace at the first
use: CPython reads a module's attributes on a specialised path, where an instance of a
class with `__getattr__` takes the slow generic one at every read.""")


def _first_use(name: str):
    try:
        entry = dispatcher.find(name).entry
    except KeyError:
        raise AttributeError(f"eager.ops has no operator named {name!r}") from None
    setattr(ops, name, entry)
    return entry


ops.__getattr__ = _first_use
