"""nn.Parameter: a leaf tensor that a Module registers as one of its parameters."""
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
