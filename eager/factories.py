"""Tensor factories: tensor, zeros, ones, full, empty, arange, linspace, rand, randn,
the *_like variants, from_numpy, and the seeded random generators (Generator)."""
from __future__ import annotations

import math
import numbers
import os
import pickle

import numpy as np

from eager.arguments import (array_dtype, bool_arg, dtype_arg, int_arg, int_list, number_arg,
                             size_args)
from eager.backends import backend_for
from eager.device import as_device
from eager.tensor import (Size, Tensor, aligned, aligned_empty, from_array, meta_empty,
                          share_array)
from ir import dtypes



class Generator:
    """torch.Generator: a seeded stream of random numbers, taken by the random factories,
    nn.init and utils.data as `generator=`. numpy's PCG64 draws them, so kiln's numbers
    are not PyTorch's; a seed gives the same numbers on every run and machine.
    manual_seed returns the generator itself; get_state is an int64 tensor of bytes
    (kiln has no uint8) that set_state takes back."""

    def __init__(self, device="cpu"):
        self.device = as_device(device)
        self.seed()

    def manual_seed(self, seed) -> Generator:
        self._initial_seed = int_arg("manual_seed", "seed", seed) % (1 << 64)
        self._numpy = None  # made from the seed at the first draw
        return self

    def seed(self) -> int:
        """Seed from the operating system's entropy; returns the seed."""
        self.manual_seed(int.from_bytes(os.urandom(8), "little"))
        return self._initial_seed

    @property
    def numpy(self) -> np.random.Generator:
        """numpy's generator of this seed, made at the first draw: `import eager` need not
        load numpy.random (~5 ms)."""
        if self._numpy is None:
            self._numpy = np.random.default_rng(self._initial_seed)
        return self._numpy

    def initial_seed(self) -> int:
        return self._initial_seed

    def get_state(self) -> Tensor:
        state = pickle.dumps((self._initial_seed, self.numpy.bit_generator.state))
        return from_array(np.frombuffer(state, dtype=np.uint8).astype(np.int64))

    def set_state(self, state: Tensor) -> Generator:
        if not isinstance(state, Tensor) or state.dim() != 1 or state.dtype != dtypes.int64:
            raise TypeError("set_state() expects the 1-D int64 tensor get_state() returned")
        try:
            seed, bits = pickle.loads(state.numpy().astype(np.uint8).tobytes())
            fresh = np.random.default_rng()
            fresh.bit_generator.state = bits
        except Exception as e:  # noqa: BLE001 - any damage means the same thing
            raise RuntimeError(f"set_state(): not a state get_state() returned ({e})") from None
        self._initial_seed, self._numpy = seed, fresh
        return self


default_generator = Generator()


def numpy_generator(generator=None) -> np.random.Generator:
    """The numpy generator behind `generator` (the default generator when None; a
    numpy Generator is taken as it is)."""
    if generator is None:
        return default_generator.numpy
    if isinstance(generator, Generator):
        return generator.numpy
    if isinstance(generator, np.random.Generator):
        return generator
    raise TypeError(f"generator must be an eager.Generator, not {type(generator).__name__}")


def manual_seed(seed) -> Generator:
    """Seed the default generator; returns it (as torch.manual_seed)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> Tensor:
    return default_generator.get_state()


def set_rng_state(state: Tensor) -> None:
    default_generator.set_state(state)


# Graph capture watches tensor creation: `hook(tensor, random)` (see compiler/capture.py).
_creation_hook = None


def set_creation_hook(hook) -> None:
    global _creation_hook
    _creation_hook = hook


def _shape(fn: str, size: tuple) -> tuple[int, ...]:
    """A new tensor's shape from sizes given as varargs or as one tuple or list."""
    return _nonnegative(size_args(fn, size))


def _nonnegative(shape: tuple[int, ...]) -> tuple[int, ...]:
    if any(s < 0 for s in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape)}: "
                           f"{list(shape)}")
    return shape


def _place(fn: str, a: np.ndarray, dtype, device, requires_grad, random: bool = False) -> Tensor:
    """A fresh tensor from host array `a`, on `device`."""
    dt = dtype or dtypes.from_numpy(a.dtype)
    dev = as_device(device)
    requires_grad = bool_arg(fn, "requires_grad", requires_grad)
    if dev.type == "cpu":
        t = from_array(aligned(dtypes.cast(a, dt)))
    elif dev.type == "meta":
        t = meta_empty(a.shape, dt)
    else:
        t = backend_for(dev).from_host(dtypes.cast(a, dt), dev)
    if requires_grad:
        t.requires_grad_(True)
    if _creation_hook is not None:
        _creation_hook(t, random)
    return t


def _infer_dtype(data):
    """The dtype PyTorch gives a nested Python list: bool < int64 < default float."""
    kinds = set()
    stack = [data]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, Tensor):
            kinds.add(x.dtype)
        else:
            kinds.add(dtypes.scalar_dtype(x))
    if not kinds:
        return dtypes.get_default_dtype()
    return dtypes.result_type(kinds)


def tensor(data, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor copying `data` (numbers, nested lists, numpy arrays or tensors)."""
    dtype = dtype_arg("tensor", dtype)
    if isinstance(data, Tensor):
        a = data.detach()._host_np().copy()
        dt = dtype or data.dtype
    elif isinstance(data, np.ndarray):
        a = aligned_empty(data.shape, data.dtype)
        np.copyto(a, data)
        dt = dtype or array_dtype("tensor", a.dtype)
    else:
        dt = dtype or _infer_dtype(data)
        _check_ragged(data)
        a = _from_numbers(_to_numbers(data), dt)
    return _place("tensor", a, dt, device, requires_grad)


def _from_numbers(numbers, dt) -> np.ndarray:
    """Python numbers (nested lists) as an array of `dt`, converted as torch.tensor
    converts them: a 16-bit float rounds through float32 (and saturates to inf); a
    narrower integer type refuses a value beyond its range (an unsigned one also takes
    -max..-1, wrapping) and truncates a float."""
    if dt in dtypes.HALF:
        return dtypes.cast(np.array(numbers, dtype=np.float64), dt)
    if dt.is_floating_point or dt is dtypes.bool_ or dt is dtypes.int64:
        return np.array(numbers, dtype=dt.np)
    for v in _flat(numbers):
        if not dtypes.fits_integer(v, dt):
            raise RuntimeError(f"value cannot be converted to type {dt.name} without overflow")
    return np.array(numbers).astype(np.int64).astype(dt.np)


def _flat(numbers):
    if isinstance(numbers, list):
        for x in numbers:
            yield from _flat(x)
    else:
        yield numbers


def _to_numbers(data):
    if isinstance(data, (list, tuple)):
        return [_to_numbers(x) for x in data]
    if isinstance(data, Tensor):
        return data.tolist()
    if not isinstance(data, (numbers.Number, np.generic)):
        raise TypeError(f"Could not infer dtype of {type(data).__name__}")
    return data


def _check_ragged(data, depth=0):
    """PyTorch's errors for nested lists that do not form a rectangular array."""
    if not isinstance(data, (list, tuple)) or not data:
        return
    first = data[0]
    for x in data:
        if isinstance(x, (list, tuple)) != isinstance(first, (list, tuple)):
            raise TypeError(f"expected a sequence at dim {depth + 1} for every element or for "
                            f"none, got both {type(first).__name__} and {type(x).__name__}")
        if isinstance(x, (list, tuple)) and len(x) != len(first):
            raise ValueError(f"expected sequence of length {len(first)} at dim {depth + 1} "
                             f"(got {len(x)})")
    for x in data:
        _check_ragged(x, depth + 1)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing memory with numpy array `a`."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(a).__name__})")
    array_dtype("from_numpy", a.dtype)
    return share_array(a)


def _filled(fn: str, size: tuple, value, dtype, device, requires_grad) -> Tensor:
    shape = _shape(fn, size)
    dt = dtype_arg(fn, dtype) or dtypes.get_default_dtype()
    if as_device(device).type == "meta":
        t = meta_empty(shape, dt)
        return t.requires_grad_(True) if bool_arg(fn, "requires_grad", requires_grad) else t
    a = aligned_empty(shape, dt.np)
    a[...] = dtypes.checked_scalar(value, dt)
    return _place(fn, a, dt, device, requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled("zeros", size, 0, dtype, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled("ones", size, 1, dtype, device, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled("empty", size, 0, dtype, device, requires_grad)


def full(size, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    """`size` is a tuple or list of ints, or one int."""
    fill_value = number_arg("full", "fill_value", fill_value)
    dtype = dtype_arg("full", dtype) or dtypes.scalar_dtype(fill_value)
    return _filled("full", (size,), fill_value, dtype, device, requires_grad)


def arange(start, end=None, step=1, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    start, end, step = (number_arg("arange", name, value) for name, value in
                        (("start", start), ("end", end), ("step", step)))
    if not (math.isfinite(start) and math.isfinite(end)):
        raise RuntimeError(f"unsupported range: {start} -> {end}")
    if step == 0:
        raise RuntimeError("step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError(f"upper bound and lower bound inconsistent with step sign: "
                           f"start={start}, end={end}, step={step}")
    dtype = dtype_arg("arange", dtype) or dtypes.result_type(
        wrapped_dtypes=[dtypes.scalar_dtype(v) for v in (start, end, step)])
    n = max(int(np.ceil((end - start) / step)), 0)
    a = (start + step * np.arange(n, dtype=np.float64)) if dtype.is_floating_point else \
        np.arange(start, end, step, dtype=np.int64)
    return _place("arange", np.asarray(a), dtype, device, requires_grad)


def linspace(start, end, steps: int, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    start, end = number_arg("linspace", "start", start), number_arg("linspace", "end", end)
    steps = int_arg("linspace", "steps", steps)
    if steps < 0:
        raise RuntimeError(f"number of steps must be non-negative, got {steps}")
    dt = dtype_arg("linspace", dtype) or dtypes.get_default_dtype()
    return _place("linspace", np.linspace(start, end, steps), dt, device, requires_grad)


def _random_floats(fn: str, draw, size, dtype, device, requires_grad) -> Tensor:
    dt = dtype_arg(fn, dtype) or dtypes.get_default_dtype()
    if not dt.is_floating_point:
        raise NotImplementedError(f"{fn}(): random floats need a floating point dtype, not {dt}")
    return _place(fn, draw(_shape(fn, size)), dt, device, requires_grad, random=True)


def rand(*size, dtype=None, device=None, requires_grad=False, generator=None) -> Tensor:
    return _random_floats("rand", numpy_generator(generator).random, size, dtype, device,
                          requires_grad)


def randn(*size, dtype=None, device=None, requires_grad=False, generator=None) -> Tensor:
    return _random_floats("randn", numpy_generator(generator).standard_normal, size, dtype, device,
                          requires_grad)


def randint(low, high=None, size=None, *, dtype=None, device=None, generator=None) -> Tensor:
    """`randint(high, size)` or `randint(low, high, size)`: ints in [low, high)."""
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high
    if size is None:
        raise TypeError("randint(): argument 'size' is missing: call randint(high, size) or "
                        "randint(low, high, size)")
    low, high = int_arg("randint", "low", low), int_arg("randint", "high", high)
    shape = _nonnegative(int_list("randint", "size", size))
    if low >= high:
        raise RuntimeError(f"randint(): expects low < high, but got low={low} >= high={high}")
    a = numpy_generator(generator).integers(low, high, size=shape)
    return _place("randint", a, dtype_arg("randint", dtype) or dtypes.int64, device, False,
                  random=True)


def randperm(n: int, *, dtype=None, device=None, generator=None) -> Tensor:
    (n,) = _nonnegative((int_arg("randperm", "n", n),))
    return _place("randperm", numpy_generator(generator).permutation(n),
                  dtype_arg("randperm", dtype) or dtypes.int64, device, False, random=True)


def _like(fn):
    def like(t: Tensor, *, dtype=None, device=None, requires_grad=False) -> Tensor:
        return fn(t.shape, dtype=dtype_arg(like.__name__, dtype) or t.dtype,
                  device=device or t.device, requires_grad=requires_grad)
    like.__name__ = fn.__name__ + "_like"
    return like


zeros_like = _like(zeros)
ones_like = _like(ones)
empty_like = _like(empty)
rand_like = _like(rand)
randn_like = _like(randn)


def full_like(t: Tensor, fill_value, *, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype_arg("full_like", dtype) or t.dtype,
                device=device or t.device, requires_grad=requires_grad)


def set_default_dtype(dtype) -> None:
    """The dtype that floating-point factories make (a dtype with no kernels in kiln yet
    is refused, naming it)."""
    if not isinstance(dtype, dtypes.DType):
        raise TypeError(f"set_default_dtype(): argument 'd' must be a dtype, not "
                        f"{type(dtype).__name__}")
    dtypes.set_default_dtype(dtype_arg("set_default_dtype", dtype))


# the legacy constructors: torch.Tensor(...) and the typed tensors ---------------------
def _legacy(name: str, dtype, args: tuple, device) -> Tensor:
    """`name(*sizes)` (uninitialised), `name(size: Size)`, `name(data)` (a copy as
    `dtype`), `name(tensor)` (its data, shared, when it already has `dtype`) or
    `name()` (empty), as PyTorch's legacy constructors take them."""
    dtype = dtype or dtypes.get_default_dtype()
    if not args:
        return empty(0, dtype=dtype, device=device)
    if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
        return empty(*args, dtype=dtype, device=device)
    if len(args) == 1 and isinstance(args[0], Size):
        return empty(args[0], dtype=dtype, device=device)
    if len(args) == 1 and isinstance(args[0], Tensor):
        other = args[0]
        if other.dtype != dtype:
            raise TypeError(f"{name}(): expected {dtype} (got {other.dtype})")
        return other.detach() if device is None or as_device(device) == other.device else \
            other.detach().to(device)
    if len(args) == 1 and not isinstance(args[0], (numbers.Number, str)):
        return tensor(args[0], dtype=dtype, device=device)
    raise TypeError(f"{name}() takes sizes (ints), a torch.Size, a sequence or array of "
                    f"numbers, or a tensor; got {', '.join(type(a).__name__ for a in args)}")


def _tensor_new(cls, *args, device=None):
    if cls is not Tensor:  # a subclass makes its own (Parameter does)
        return object.__new__(cls)
    return _legacy("Tensor", None, args, device)


def _tensor_init(self, *args, **kwargs):
    pass  # __new__ did everything


Tensor.__new__ = staticmethod(_tensor_new)
Tensor.__init__ = _tensor_init


class _TypedTensorMeta(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device.type == "cpu"


def _typed(name: str, dtype):
    def new(cls, *args, device=None):
        return _legacy(name, dtype, args, device)
    return _TypedTensorMeta(name, (), {"dtype": dtype, "__new__": new, "__doc__":
                                       f"torch.{name}: the legacy constructor of {dtype} "
                                       f"tensors; isinstance(t, {name}) checks a CPU "
                                       f"tensor's dtype"})


FloatTensor = _typed("FloatTensor", dtypes.float32)
DoubleTensor = _typed("DoubleTensor", dtypes.float64)
HalfTensor = _typed("HalfTensor", dtypes.float16)
BFloat16Tensor = _typed("BFloat16Tensor", dtypes.bfloat16)
LongTensor = _typed("LongTensor", dtypes.int64)
IntTensor = _typed("IntTensor", dtypes.int32)
ShortTensor = _typed("ShortTensor", dtypes.int16)
CharTensor = _typed("CharTensor", dtypes.int8)
ByteTensor = _typed("ByteTensor", dtypes.uint8)
BoolTensor = _typed("BoolTensor", dtypes.bool_)
TYPED = {t.__name__: t for t in (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor,
                                 LongTensor, IntTensor, ShortTensor, CharTensor, ByteTensor,
                                 BoolTensor)}  # by name: Tensor.type's strings
