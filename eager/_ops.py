"""torch.ops (torch._ops.ops): operators by namespace (dispatcher.OpNamespace),
`torch.ops.aten.mm` for kiln's own and `torch.ops.mylib.op` for one defined with
torch.library or torch._custom_ops; and `load_library`, which cannot load a PyTorch C++
extension library (libraries that try catch the OSError it raises, as PyTorch's raises
when a library fails to load)."""
from __future__ import annotations

from eager import dispatcher


class _Ops:
    """`torch.ops`: any name is a namespace (its operators may be defined later)."""

    def __getattr__(self, namespace: str) -> dispatcher.OpNamespace:
        if namespace.startswith("__"):
            raise AttributeError(namespace)
        return dispatcher.OpNamespace(namespace)  # (not kept: ops come and go)

    @staticmethod
    def load_library(path) -> None:
        raise OSError(f"torch.ops.load_library({str(path)!r}): kiln cannot load a PyTorch "
                      f"C++ extension library (it is built against libtorch's C++ API, which "
                      f"kiln does not have); the operators it defines are not available")

    def __repr__(self) -> str:
        return "<torch.ops>"


ops = _Ops()
