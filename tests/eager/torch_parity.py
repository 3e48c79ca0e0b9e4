"""PyTorch, for the tests that compare kiln with it: they skip, saying why, without it."""
from __future__ import annotations

import pytest


def require_torch():
    """The torch module, or a skip of the calling test when it cannot be imported."""
    return pytest.importorskip(
        "torch", reason="PyTorch is not installed: kiln's parity with it is not checked")


def torch_to_numpy(out):
    """Outputs of a torch call (a tensor or a tuple of them) as numpy arrays."""
    if isinstance(out, (tuple, list)):
        return [o.detach().numpy() for o in out]
    return out.detach().numpy()


def dtype_name(dtype) -> str:
    """`torch.float32` or `eager.float32` -> 'float32'."""
    return str(dtype).split(".")[-1]
