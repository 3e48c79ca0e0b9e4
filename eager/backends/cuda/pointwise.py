"""CUDA kernels of eager's pointwise ops, copies, casts, fills and in-place ops, each a
single-op elementwise kernel (elementwise.py). Shapes, result dtypes and every argument
check come from the op's Meta kernel, so CUDA raises what the CPU raises.

They take every dtype: the 16-bit floats compute in float32 and round once per op, the
narrow integers wrap in their width, as the CPU's kernels (runtime/cpu/values.py); the
other CUDA kernels that compute (reductions, matmul, ...) take the narrow dtypes through
wider ones (widened.py)."""
from __future__ import annotations

import numpy as np

from eager.backends.cuda import device as D
from runtime.cuda.codegen import VECTOR_BYTES
from runtime.cuda.codegen.kernel_ir import blocks_for, vector_lanes
from eager.backends.cuda.elementwise import ElementwiseSpec, elementwise_kernel, layout
from eager.dispatcher import ATEN, DispatchKey
from eager.kernels._common import promote, scalar_value
from ir.records import OpRecord
from eager.device import as_device
from eager.tensor import Tensor, from_array, wrap_scalar
from ir import dtypes
from ir.dtypes import DType
from ir.ops import Op

def _check_own_half(record: OpRecord, dt: DType) -> None:
    """Refuse an op that computes in the 16-bit float itself (Pointwise.own_half: each
    step rounded, as the CPU's numpy does it), which CUDA's float32 emitters do not."""
    if record.pointwise.own_half and dt in dtypes.HALF:
        name = record.op.schema.name
        raise NotImplementedError(f"Could not run 'aten::{name}' with arguments from the "
                                  f"'CUDA' backend: kiln's CUDA kernels have no {dt.name} "
                                  f"code for {name} (it rounds each step in {dt.name}; "
                                  f"the kernels compute in float32 and round once)")


def by_value(t: Tensor) -> bool:
    """A Python number or a zero-dim CPU tensor: passed to a kernel as a number."""
    return t.device.type == "cpu"


def device_of(op_name: str, tensors) -> object:
    """The one CUDA device of `tensors` (numbers aside); PyTorch's error for two."""
    found = None
    for t in tensors:
        if by_value(t):
            continue
        if found is not None and t.device != found:
            raise RuntimeError("Expected all tensors to be on the same device, but found at "
                               f"least two devices, {found} and {t.device}! (while running "
                               f"aten::{op_name})")
        found = t.device
    return found


def run(op: Op, out: Tensor, operands: list, attrs: dict, compute: DType,
        scale=None) -> Tensor:
    """out[...] = op(*operands) elementwise; operands broadcast to out's shape (a Python
    number is passed by value, in the type it is used in)."""
    n = out.numel()
    if n == 0:
        return out
    views = [t for t in operands if not by_value(t)]
    strides = [_broadcast_strides(t, out._shape) for t in views] + [out._stride]
    sizes, strides = layout(out._shape, strides)
    at = out.dtype if op is Op.WHERE else compute
    inputs = tuple((at, True) if by_value(t) else (t.dtype, False) for t in operands)
    vector = _vector(operands, views + [out], sizes, strides)
    spec = ElementwiseSpec(op, inputs, out.dtype, compute,
                           tuple(sorted(attrs.items())), len(sizes), scale is not None,
                           vector)
    args = [_number(t, at) if by_value(t) else t for t in operands] + [out]
    if scale is not None:
        args.append(scale)
    args += [*sizes]
    if vector is None:
        args += [stride for st in strides for stride in st]
    kernel = elementwise_kernel(spec)
    lanes = 1 if vector is None else vector_lanes(t.dtype for t in views + [out])
    D.launch(kernel, (blocks_for(n, kernel.block[0], lanes), 1, 1), args, out.device)
    return out


def _vector(operands: list, tensors: list, sizes: tuple, strides: list) -> tuple | None:
    """The vector kernel's strides (per operand and the output: 1, or 0 for a number or
    one element read by all) where the elements are one dim that every tensor walks
    contiguously or not at all, and each tensor's first element is 16-byte aligned;
    else None (the strided kernel)."""
    if len(sizes) != 1 or any(t.data_ptr() % VECTOR_BYTES for t in tensors) \
            or strides[-1] != (1,) or any(st not in ((0,), (1,)) for st in strides):
        return None
    walked = iter(st[0] for st in strides)
    return tuple(0 if by_value(t) else next(walked) for t in operands) + (next(walked),)


def _number(t: Tensor, dt: DType):
    """t's value in the kernel parameter's type: a 16-bit float's is float32 (the value
    is not rounded to the type: numpy's path computes with the number in float32)."""
    value = t.item()
    return int(bool(value)) if dt is dtypes.bool_ else (float(value) if dt.is_floating_point
                                                       else int(value))


def _broadcast_strides(t: Tensor, shape) -> tuple:
    lead = len(shape) - len(t._shape)
    return tuple(0 if d < lead or t._shape[d - lead] == 1 else t._stride[d - lead]
                 for d in range(len(shape)))


def copy_into(destination: Tensor, source: Tensor) -> Tensor:
    """destination[...] = source, cast to destination's dtype; both on one CUDA device."""
    return run(Op.TO_COPY, destination, [source], {}, destination.dtype)


def pointwise_kernel(record: OpRecord):
    """The CUDA kernel of a pointwise op, from its record and Meta kernel."""
    op, pointwise = record.op, record.pointwise
    meta = ATEN[op].kernels[DispatchKey.Meta][0]
    count = sum(a.type.base == "Tensor" for a in op.schema.arguments)
    names = [a.name for a in op.schema.arguments[count:]]

    def kernel(*args, **attrs):
        shape_and_dtype = meta(*args, **attrs)
        tensors = args[:count]
        attrs = {**dict(zip(names, args[count:])), **attrs}
        attrs = {k: scalar_value(v) for k, v in attrs.items()}
        dev = device_of(op.schema.name, tensors)
        out_dt = shape_and_dtype.dtype
        compute = promote(*tensors) if pointwise.rule == "compare" else \
            dtypes.bool_ if pointwise.rule == "logical" else out_dt
        _check_own_half(record, compute)
        scale = attrs.pop(pointwise.scaled, 1) if pointwise.scaled else 1
        if scale != 1 and compute in dtypes.HALF:  # of the tensors' type: 0.3 rounds
            scale = float(np.asarray(scale, compute.np))
        out = D.empty(shape_and_dtype.shape, out_dt, dev)
        return run(op, out, list(tensors), attrs, compute, None if scale == 1 else scale)
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


def inplace_kernel(op: Op, twin: Op):
    """add_ and friends: the out-of-place kernel, then a copy into `self` (checked as the
    CPU checks it, by the op's Meta kernel)."""
    meta = ATEN[op].kernels[DispatchKey.Meta][0]
    out_of_place = ATEN[twin].kernels[DispatchKey.CUDA][0]

    def kernel(self, *args, **kwargs):
        meta(self, *args, **kwargs)
        return copy_into(self, out_of_place(self, *args, **kwargs))
    kernel.__name__ = f"{op.schema.name}_cuda"
    return kernel


def fill_(self, value):
    ATEN[Op.FILL_].kernels[DispatchKey.Meta][0](self, value)
    return run(Op.TO_COPY, self, [wrap_scalar(scalar_value(value))], {}, self.dtype)


def zero_(self):
    return fill_(self, 0)


def copy_(self, src):
    """self[...] = src; either may be on the host (copy_ takes two devices)."""
    ATEN[Op.COPY_].kernels[DispatchKey.Meta][0](self, src)
    if self.device.type == "cpu":
        ATEN[Op.COPY_].kernels[DispatchKey.CPU][0](self, src.cpu())
        return self
    if src.device.type == "cpu":
        src = D.from_host(src._np(), self.device)
    elif src.device != self.device:
        src = D.from_host(D.to_host(src), self.device)
    return copy_into(self, src)


def clone(self, **kwargs):
    return run(Op.TO_COPY, D.empty(self._shape, self.dtype, self.device), [self], {},
               self.dtype)


def to_copy(self, *, dtype=None, device=None):
    """A copy of a CUDA tensor, cast to `dtype`, on `device` (the host or a GPU)."""
    dt = dtype or self.dtype
    target = as_device(device) if device is not None else self.device
    if target.type == "cpu":
        return from_array(dtypes.cast(D.to_host(self), dt))
    if target != self.device:
        return D.from_host(dtypes.cast(D.to_host(self), dt), target)
    return run(Op.TO_COPY, D.empty(self._shape, dt, target), [self], {}, dt)

