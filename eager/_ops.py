"""torch.ops (torch._ops.ops): operators by namespace, `torch.ops.aten.mm` for kiln's own
and `torch.ops.mylib.op` for one defined with torch._custom_ops, each its handle's
dispatch entry; and `load_library`, which cannot load a PyTorch C++ extension library
(libraries that try catch the OSError it raises, as PyTorch's raises when a library
fails to load)."""
from __future__ import annotations

from eager import dispatcher


class _Namespace:
    """`torch.ops.<namespace>`: its operators as attributes."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, op: str):
        if op.startswith("__"):
            raise AttributeError(op)
        try:  # looked up each time: a user's op may be undefined and defined again
            return dispatcher.find(f"{self._name}::{op}").entry
        except KeyError:
            raise AttributeError(f"torch.ops.{self._name} has no operator {op!r}") from None

    def __repr__(self) -> str:
        return f"<torch.ops.{self._name}>"


class _Ops:
    """`torch.ops`: any name is a namespace (its operators may be defined later)."""

    def __getattr__(self, namespace: str) -> _Namespace:
        if namespace.startswith("__"):
            raise AttributeError(namespace)
        found = _Namespace(namespace)
        setattr(self, namespace, found)
        return found

    @staticmethod
    def load_library(path) -> None:
        raise OSError(f"torch.ops.load_library({str(path)!r}): kiln cannot load a PyTorch "
                      f"C++ extension library (it is built against libtorch's C++ API, which "
                      f"kiln does not have); the operators it defines are not available")

    def __repr__(self) -> str:
        return "<torch.ops>"


ops = _Ops()
