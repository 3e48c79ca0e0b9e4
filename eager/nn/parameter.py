"""nn.Parameter: a leaf tensor that a Module registers as one of its parameters; nn.Buffer:
a tensor that a Module registers as one of its buffers."""
from __future__ import annotations

from eager.factories import empty
from eager.tensor import Tensor


class Parameter(Tensor):
    __slots__ = ()

    def __new__(cls, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            data = empty(0)
        t = Tensor._make.__func__(cls, data._storage, data._shape, data._stride, data._offset,
                                  data.dtype, data.device)
        t._np_cache = data._np_cache
        if requires_grad:
            t.requires_grad_(True)
        return t

    def __init__(self, data=None, requires_grad: bool = True):
        pass

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class _BufferMeta(type):
    def __instancecheck__(cls, instance) -> bool:
        """A tensor made by Buffer(...) is a Buffer, as in PyTorch (it stays a Tensor)."""
        return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)


class Buffer(metaclass=_BufferMeta):
    """`module.name = nn.Buffer(t)` registers a buffer (`persistent=False`: left out of
    state_dict). Buffer(t) is `t` detached, keeping requires_grad, and marked."""

    def __new__(cls, data: Tensor | None = None, *, persistent: bool = True):
        if data is None:
            data = empty(0)
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t
