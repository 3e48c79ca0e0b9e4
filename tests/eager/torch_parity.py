"""PyTorch, for the tests that compare kiln with it: they skip, saying why, without it."""
from __future__ import annotations

import pytest


def require_torch():
    """The torch module, or a skip of the calling test when it cannot be imported."""
    return pytest.importorskip(
        "torch", reason="PyTorch is not installed: kiln's parity with it is not checked")


def torch_to_numpy(out):
    """Outputs of a torch call (a tensor or a tuple of them) as numpy arrays (bfloat16 as
    ml_dtypes' bfloat16, which torch's numpy() does not give)."""
    if isinstance(out, (tuple, list)):
        return [torch_to_numpy(o) for o in out]
    out = out.detach()
    if str(out.dtype) == "torch.bfloat16":
        import ml_dtypes
        import torch
        return out.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return out.numpy()


def dtype_name(dtype) -> str:
    """`torch.float32` or `eager.float32` -> 'float32'."""
    return str(dtype).split(".")[-1]
