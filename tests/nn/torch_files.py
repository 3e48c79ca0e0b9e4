"""Helpers for the tests of PyTorch's checkpoint files: saving with torch or as torch
does, and comparing what kiln loaded with what torch loaded."""
import io
import math

import numpy as np
import pytest

import eager

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

LAYOUTS = {"zip": True, "legacy": False}  # _use_new_zipfile_serialization


def torch_saved(obj, layout="zip") -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=LAYOUTS[layout])
    buf.seek(0)
    return buf


def kiln_saved(obj) -> io.BytesIO:
    buf = io.BytesIO()
    eager.save(obj, buf, format="torch")
    buf.seek(0)
    return buf


def same(kiln, ref, path="root"):
    """kiln's object is torch's `ref` in kiln's terms: tensors of the same dtype, shape,
    strides, offset, requires_grad and bits; Size, device and dtype by name."""
    if isinstance(ref, torch.Tensor):
        assert isinstance(kiln, eager.Tensor), path
        assert isinstance(kiln, eager.nn.Parameter) == isinstance(ref, torch.nn.Parameter), path
        assert kiln.dtype.name == str(ref.dtype).removeprefix("torch."), path
        assert (tuple(kiln.shape), kiln.stride(), kiln.storage_offset()) == \
            (tuple(ref.shape), ref.stride(), ref.storage_offset()), path
        assert kiln.requires_grad == ref.requires_grad, path
        if ref.device.type != "meta":
            assert kiln.device.type == "cpu", path
            # bits compared as 16-bit words where torch's numpy() takes no bfloat16
            words = ref.dtype == torch.bfloat16
            theirs = ref.detach().view(torch.int16).numpy() if words else ref.detach().numpy()
            ours = kiln.detach().numpy()
            np.testing.assert_array_equal(ours.view(np.int16) if words else ours, theirs,
                                          err_msg=path)
    elif isinstance(ref, (torch.Size, torch.device, torch.dtype)):
        assert str(kiln).replace("eager.", "torch.") == str(ref), path
    elif isinstance(ref, dict):
        assert type(kiln) is type(ref) and list(kiln) == list(ref), path
        for k in ref:
            same(kiln[k], ref[k], f"{path}[{k!r}]")
        assert getattr(kiln, "__dict__", {}).keys() == getattr(ref, "__dict__", {}).keys()
    elif isinstance(ref, (list, tuple)):
        assert type(kiln) is type(ref) and len(kiln) == len(ref), path
        for i, (a, b) in enumerate(zip(kiln, ref)):
            same(a, b, f"{path}[{i}]")
    elif isinstance(ref, float) and math.isnan(ref):
        assert isinstance(kiln, float) and math.isnan(kiln), path
    else:
        assert type(kiln) is type(ref) and kiln == ref, path
