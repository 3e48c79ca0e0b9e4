"""Tensor methods and operators, each a thin call of an op handle (PyTorch's spelling:
`t.sum(1, keepdim=True)`, `t.view(2, 3)`, `a @ b`, `t[0, 1:]`, `t.to(...)`, ...), and the
autograd methods (`t.backward()`, `t.register_hook(...)`, `t.retain_grad()`): eager/tensor.py
sits below the ops and autograd, so their methods are attached from here."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from eager import autograd, indexing
from eager.arguments import dtype_arg, int_arg
from eager.autograd.grad_mode import is_grad_enabled
from eager.autograd.function import (register_post_accumulate_grad_hook, register_tensor_hook,
                                     retain_grad)
from eager.backends import backend_for
from eager.device import CPU, as_device
from eager.dispatcher import ATEN
from eager.factories import TYPED, ones, tensor, zeros
from eager.kernels._common import check_castable, promote
from eager.kernels._common import type_word as _type_word
from ir.records import named
from eager.tensor import Storage, Tensor, ops, whole_step, wrap_scalar
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op

# ops whose Python method has the schema's own signature (`t.exp()`, `t.mm(m)`): every op
# whose record names a method; methods and operators are the handles' plain functions
# (OpHandle.entry), which bind to a tensor without a Python-level __get__
for _name, _op in named("method").items():
    setattr(Tensor, _name, ATEN[_op].entry)


def _sizes(args):
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def _view(self, *shape, dtype=None):
    """`t.view(*shape)`, or `t.view(dtype)` / `t.view(dtype=...)`: the same bytes read as
    another dtype."""
    if dtype is None and len(shape) == 1 and isinstance(shape[0], DType):
        dtype = shape[0]
    if dtype is not None:
        return _view_as_dtype(self, dtype_arg("view", dtype))
    return ops.view(self, _sizes(shape))


def _view_as_dtype(self: Tensor, dtype: DType) -> Tensor:
    """`t.view(dtype)`: the same bytes read as `dtype`. With another element size, the last
    dim (stride 1) grows or shrinks by the ratio, as PyTorch's. It shares the memory; its
    in-place version counter is its own (kiln counts versions per typed storage)."""
    old, new = self.dtype.itemsize, dtype.itemsize
    if dtype is self.dtype:
        return self.view(self.shape)
    shape, stride = list(self._shape), list(self._stride)
    if old != new:
        if not shape:
            raise RuntimeError(f"self.dim() cannot be 0 to view {self.dtype} as {dtype} "
                               f"(different element sizes)")
        if stride[-1] != 1:
            raise RuntimeError("self.stride(-1) must be 1 to view " f"{self.dtype} as {dtype} "
                               "(different element sizes), but got " f"{stride[-1]}")
        if (shape[-1] * old) % new or (self._offset * old) % new or \
                any((s * old) % new for s in stride[:-1]):
            raise RuntimeError(f"the last dimension's size, the storage offset and the other "
                               f"strides must be divisible by {new // old if new > old else 1} "
                               f"to view {self.dtype} as {dtype}")
        shape[-1] = shape[-1] * old // new
        stride = [s * old // new for s in stride[:-1]] + [1]
    storage = self._storage
    if storage.data is None:
        raise NotImplementedError(f"view({dtype}) of a {self.device} tensor: kiln "
                                  f"reinterprets CPU memory only")
    raw = storage.data.view(np.uint8)[:storage.nbytes]
    raw = raw[:raw.size - raw.size % new]
    typed = Storage(raw.view(dtype.np), CPU, raw.size)
    return Tensor._make(typed, shape, stride, self._offset * old // new, dtype, CPU)


def _reshape(self, *shape):
    return ops.reshape(self, _sizes(shape))


def _permute(self, *dims):
    return ops.permute(self, _sizes(dims))


def _expand(self, *sizes):
    return ops.expand(self, _sizes(sizes))


def _expand_as(self, other):
    return ops.expand(self, other.shape)


def _view_as(self, other):
    return ops.view(self, other.shape)


def _reshape_as(self, other):
    return ops.reshape(self, other.shape)


def _squeeze(self, dim=None):
    return ops.squeeze(self, dim)


max_result = namedtuple("max", ["values", "indices"])  # torch.return_types.max
min_result = namedtuple("min", ["values", "indices"])


def _max(self, dim=None, keepdim=False):
    if dim is None:
        return ops.amax(self)
    if isinstance(dim, Tensor):
        return ops.maximum(self, dim)
    return max_result(*ops.max(self, dim, keepdim))


def _min(self, dim=None, keepdim=False):
    if dim is None:
        return ops.amin(self)
    if isinstance(dim, Tensor):
        return ops.minimum(self, dim)
    return min_result(*ops.min(self, dim, keepdim))


def _correction(name: str, unbiased, correction):
    if unbiased is not None:
        if isinstance(unbiased, bool):
            return int(unbiased)
        # t.var(dim, keepdim) with keepdim passed positionally as PyTorch allows
        raise TypeError(f"{name}(): unbiased must be a bool")
    return correction


def _var(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return ops.var(self, dim, correction=_correction("var", unbiased, correction),
                   keepdim=keepdim)


def _std(self, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return ops.std(self, dim, correction=_correction("std", unbiased, correction),
                   keepdim=keepdim)




def _format(self, spec: str) -> str:
    """A zero-dim tensor formats as its number (`f"{loss:.3f}"`); others only as str()."""
    if self.dim() == 0 and spec:
        return format(self.item(), spec)
    return object.__format__(self, spec)


def _size_fn(self, dim=None):
    return Tensor.size(self, dim)


def _split(self, split_size, dim=0):
    return ops.split(self, split_size, dim)


def _chunk(self, chunks, dim=0):
    chunks = int_arg("chunk", "chunks", chunks)
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    size = self.size(dim)
    return ops.split(self, max(-(-size // chunks), 1), dim)


def _where(self, condition, other):
    return ops.where(condition, self, other)


def _masked_fill(self, mask, value):
    """PyTorch's masked_fill: the result keeps self's type, the value converted to it (a
    Python number as a Scalar is: checked, dtypes.checked_scalar; a tensor of no dims)."""
    if isinstance(value, Tensor):
        if value.dim() != 0:
            raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but "
                               f"got tensor with {value.dim()} dimension(s).")
        if value.dtype is not self.dtype:
            value = value.to(self.dtype)
    else:
        value = dtypes.checked_scalar(value, self.dtype).item()
    return ops.where(mask, value, self)


def _rsub(self, other):
    return ops.sub(other, self)


def _rdiv(self, other):
    """number / tensor: reciprocal, then the product, as PyTorch's __rtruediv__ (its
    values round as that product's, its gradient is MulBackward0 of ReciprocalBackward0)."""
    return ops.mul(ops.div(1.0, self), other)  # (derived_math.reciprocal's form)


class _NoMode:
    """div's rounding_mode when none is given: div.Tensor runs. A mode given, None
    included, runs div.Tensor_mode, as PyTorch's overloads choose (its gradient is
    DivBackward2)."""

    def __repr__(self):
        return "None"


NO_MODE = _NoMode()


def div(self, other, *, rounding_mode=NO_MODE):
    """div.Tensor, or div.Tensor_mode for a rounding mode (None, "trunc", "floor"):
    eager.div, Tensor.div and their alias divide."""
    if rounding_mode is NO_MODE:
        return ops.div(self, other)
    return ATEN[Op.DIV_MODE].entry(self, other, rounding_mode=rounding_mode)


def div_(self, other, *, rounding_mode=NO_MODE):
    if rounding_mode is NO_MODE:
        return ops.div_(self, other)
    return ATEN[Op.DIV_MODE_].entry(self, other, rounding_mode=rounding_mode)


def _unbounded(self, bound, upper: bool) -> Tensor:
    """A 0-dim bound that bounds nothing, in the type of self clamped by `bound` (so it
    changes no type): +-inf, or the integer type's largest or smallest value."""
    dt = promote(self, bound if isinstance(bound, Tensor) else wrap_scalar(bound))
    if dt.is_floating_point:
        value = float("inf") if upper else float("-inf")
    elif dt is dtypes.bool_:
        value = upper
    else:
        value = int(np.iinfo(dt.np).max if upper else np.iinfo(dt.np).min)
    return tensor(value, dtype=dt, device=self.device)


def _tensor_bounds(self, min, max) -> tuple:  # noqa: A002 (PyTorch's argument names)
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if any(b is not None and not isinstance(b, Tensor) for b in (min, max)):
        got = ", ".join(type(v).__name__ if not isinstance(v, Tensor) else "Tensor"
                        for v in (self, min, max) if v is not None)
        raise TypeError(f"clamp() received an invalid combination of arguments - got ({got}), "
                        "but expected one of:\n * (Tensor input, Tensor min = None, Tensor "
                        "max = None)\n * (Tensor input, Number min = None, Number max = None)")
    return (_unbounded(self, max, False) if min is None else min,
            _unbounded(self, min, True) if max is None else max)


def clamp(self, min=None, max=None):  # noqa: A002
    """clamp with Python numbers for bounds, or clamp.Tensor where a bound is a tensor
    (broadcast, the type promoted over all three): eager.clamp, Tensor.clamp, clip,
    clamp_min and clamp_max."""
    if not isinstance(min, Tensor) and not isinstance(max, Tensor):
        return ops.clamp(self, min, max)
    return ATEN[Op.CLAMP_TENSOR].entry(self, *_tensor_bounds(self, min, max))


def clamp_(self, min=None, max=None):  # noqa: A002
    if not isinstance(min, Tensor) and not isinstance(max, Tensor):
        return ops.clamp_(self, min, max)
    return ATEN[Op.CLAMP_TENSOR_].entry(self, *_tensor_bounds(self, min, max))


def _rpow(self, other):
    return ops.pow(other, self)


def _rmatmul(self, other):
    return ops.matmul(other, self)


def _pos(self):
    return self


def _invert(self):
    if self.dtype.is_floating_point:
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type "
                        "tensors")
    return ops.bitwise_not(self)


def _reflected(fn):
    def reflected(self, other):
        return fn(other, self)
    return reflected


def written_back(name: str, fn, operand: bool = True):
    """`t.bitwise_and_(u)`, `t &= u`, `t.erfinv_()`: the result written into `t`, as
    PyTorch's in-place ops write it (a type `t` cannot hold is refused); autograd records
    the copy, and the op reads a copy of `t` where its backward would save `t` (written
    over next). `operand`: the first argument after `t` is a tensor or number whose type
    is promoted with t's (not cumsum_'s dim)."""
    def inplace(self, *args, **kwargs):
        if args and operand:  # before the op's own checks, as PyTorch checks
            other = args[0] if isinstance(args[0], Tensor) else wrap_scalar(args[0])
            check_castable(promote(self, other), self.dtype)
        read = ops.clone(self) if self._requires_grad and is_grad_enabled() else self
        out = fn(read, *args, **kwargs)
        check_castable(out.dtype, self.dtype)
        return ops.copy_(self, out)
    inplace.__name__ = inplace.__qualname__ = name
    return inplace


def _iadd(self, other):
    return ops.add_(self, other)


def _isub(self, other):
    return ops.sub_(self, other)


def _imul(self, other):
    return ops.mul_(self, other)


def _idiv(self, other):
    return ops.div_(self, other)


def _ifloordiv(self, other):
    return ops.floor_divide_(self, other)


def _imod(self, other):
    return ops.remainder_(self, other)


def _eq(self, other):
    return ops.eq(self, other)


def _ne(self, other):
    return ops.ne(self, other)


def _zero_(self):
    return ops.zero_(self)


def _new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    return zeros(_sizes(size), dtype=dtype or self.dtype, device=device or self.device,
                 requires_grad=requires_grad)


def _new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    return ones(_sizes(size), dtype=dtype or self.dtype, device=device or self.device,
                requires_grad=requires_grad)


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    return tensor(data, dtype=dtype or self.dtype, device=device or self.device,
                  requires_grad=requires_grad)


def _to(self, *args, dtype=None, device=None, copy: bool = False, non_blocking: bool = False):
    """`t.to(dtype)`, `t.to(device)`, `t.to(device, dtype)` or `t.to(other)`."""
    for a in args:
        if isinstance(a, (DType, type)):
            dtype = a
        elif isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        else:
            device = a
    dtype = dtype_arg("to", dtype)
    device = as_device(device) if device is not None else None
    if (dtype is None or dtype is self.dtype) and (device is None or device == self.device):
        return self.clone() if copy else self
    if device is not None and device != self.device:
        if device.type != "cpu":
            backend_for(device)  # raises, naming why, when the device is not usable
        if self.device.type == "meta":
            raise NotImplementedError("Cannot copy out of meta tensor; no data!")
    return ops._to_copy(self, dtype=dtype, device=device)


def _type(self, dtype=None, non_blocking=False):
    """PyTorch's Tensor.type: without an argument, the name of the tensor's type
    ('torch.FloatTensor', 'torch.cuda.HalfTensor'); with a dtype, a legacy type
    (eager.ByteTensor) or such a name, the tensor converted to that type."""
    place = "torch.cuda." if self.device.type == "cuda" else "torch."
    if dtype is None:
        return f"{place}{_type_word(self.dtype)}Tensor"
    if isinstance(dtype, str):
        typed = TYPED.get(dtype.removeprefix("torch.").removeprefix("cuda."))
        if typed is None:
            raise ValueError(f"invalid type: '{dtype}'")
        device = "cuda" if dtype.startswith("torch.cuda.") else "cpu"
        return self.to(device=device, dtype=typed.dtype)
    return self.to(getattr(dtype, "dtype", dtype))


def _cpu(self) -> Tensor:
    return self.to("cpu")


def _cuda(self, device=None) -> Tensor:
    return self.to(as_device(device if device is not None else "cuda"))


def _float(self):
    return self.to(dtypes.float32)


def _double(self):
    return self.to(dtypes.float64)


def _half(self):
    return self.to(dtypes.float16)


def _bfloat16(self):
    return self.to(dtypes.bfloat16)


def _short(self):
    return self.to(dtypes.int16)


def _char(self):
    return self.to(dtypes.int8)


def _byte(self):
    return self.to(dtypes.uint8)


def _long(self):
    return self.to(dtypes.int64)


def _int(self):
    return self.to(dtypes.int32)


def _bool(self):
    return self.to(dtypes.bool_)


def _backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    if gradient is None and inputs is None and not create_graph:
        # a whole step: under compile() the graph before it runs with its compiled backward
        return whole_step(lambda t: autograd.backward(t, None, retain_graph), "Tensor.backward()",
                          tensors=(self,))
    autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def _deepcopy(self, memo):
    """copy.deepcopy of a leaf (a module's parameters when a Transformer copies its layer):
    new memory, the same class (a Parameter stays one), requires_grad and a copied .grad."""
    if not self.is_leaf:
        raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                           "the deepcopy protocol at the moment.")
    with autograd.no_grad():
        data = self.clone()
    new = data if type(self) is Tensor else type(self)(data, self.requires_grad)
    new.requires_grad_(self.requires_grad)
    if self.grad is not None:
        new.grad = _deepcopy(self.grad, memo)
    memo[id(self)] = new
    return new


def _T(self):
    return ops.permute(self, list(range(self.dim() - 1, -1, -1)))


def _mT(self):
    return ops.transpose(self, -2, -1)


_METHODS = {
    "view": _view, "reshape": _reshape, "permute": _permute, "expand": _expand,
    "expand_as": _expand_as, "view_as": _view_as, "reshape_as": _reshape_as,
    "squeeze": _squeeze, "max": _max, "min": _min, "var": _var, "std": _std,
    "split": _split, "chunk": _chunk, "where": _where,
    "masked_fill": _masked_fill, "new_zeros": _new_zeros, "new_ones": _new_ones,
    "new_tensor": _new_tensor,
    "to": _to, "type": _type, "cpu": _cpu, "cuda": _cuda, "float": _float, "double": _double,
    "half": _half, "bfloat16": _bfloat16, "long": _long, "int": _int, "short": _short,
    "char": _char, "byte": _byte, "bool": _bool,
    "__format__": _format, "backward": _backward,
    "register_hook": register_tensor_hook, "retain_grad": retain_grad,
    "register_post_accumulate_grad_hook": register_post_accumulate_grad_hook,
    "__deepcopy__": _deepcopy,
    "__add__": ATEN[Op.ADD].entry, "__radd__": ATEN[Op.ADD].entry,
    "__sub__": ATEN[Op.SUB].entry, "__rsub__": _rsub,
    "__mul__": ATEN[Op.MUL].entry, "__rmul__": ATEN[Op.MUL].entry,
    "__truediv__": ATEN[Op.DIV].entry, "__rtruediv__": _rdiv,
    "div": div, "div_": div_, "divide": div, "divide_": div_,
    "true_divide": ATEN[Op.DIV].entry, "true_divide_": ATEN[Op.DIV_].entry,
    "__floordiv__": ATEN[Op.FLOOR_DIVIDE].entry, "__rfloordiv__": _reflected(ops.floor_divide),
    "__mod__": ATEN[Op.REMAINDER].entry, "__rmod__": _reflected(ops.remainder),
    "clamp": clamp, "clamp_": clamp_,
    "__pow__": ATEN[Op.POW].entry, "__rpow__": _rpow,
    "__matmul__": ATEN[Op.MATMUL].entry, "__rmatmul__": _rmatmul,
    "__neg__": ATEN[Op.NEG].entry, "__pos__": _pos, "__abs__": ATEN[Op.ABS].entry,
    "__invert__": _invert,
    "__and__": ATEN[Op.BITWISE_AND].entry, "__rand__": _reflected(ops.bitwise_and),
    "__or__": ATEN[Op.BITWISE_OR].entry, "__ror__": _reflected(ops.bitwise_or),
    "__xor__": ATEN[Op.BITWISE_XOR].entry, "__rxor__": _reflected(ops.bitwise_xor),
    "__lt__": ATEN[Op.LT].entry, "__le__": ATEN[Op.LE].entry, "__gt__": ATEN[Op.GT].entry,
    "__ge__": ATEN[Op.GE].entry, "__eq__": _eq, "__ne__": _ne,
    "__iadd__": _iadd, "__isub__": _isub, "__imul__": _imul, "__itruediv__": _idiv,
    "__ifloordiv__": _ifloordiv, "__imod__": _imod,
    "__getitem__": indexing.getitem, "__setitem__": indexing.setitem,
    "gather": indexing.gather, "scatter": indexing.scatter, "scatter_": indexing.scatter_,
    "scatter_add": indexing.scatter_add, "scatter_add_": indexing.scatter_add_,
    "nonzero": indexing.nonzero, "index_put": indexing.index_put,
    "index_put_": indexing.index_put_,
}
for _name, _op in (("and", Op.BITWISE_AND), ("or", Op.BITWISE_OR), ("xor", Op.BITWISE_XOR),
                  ("not", Op.BITWISE_NOT)):
    _METHODS[f"bitwise_{_name}_"] = written_back(f"bitwise_{_name}_", ATEN[_op].entry)
    if _name != "not":
        _METHODS[f"__i{_name}__"] = _METHODS[f"bitwise_{_name}_"]
_METHODS["erfinv_"] = written_back("erfinv_", ATEN[Op.ERFINV].entry)
for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
Tensor.T = property(_T)
Tensor.mT = property(_mT)
Tensor.__hash__ = lambda self: id(self)
