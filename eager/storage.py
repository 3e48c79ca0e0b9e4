"""torch.UntypedStorage, torch.asarray and torch.frombuffer: a tensor's memory as bytes,
and tensors made over bytes (what safetensors' loader does: it maps the file as an
UntypedStorage, slices it, and views each slice as the tensor's dtype without copying;
`Tensor.view(dtype)` is eager/_tensor_methods.py's).

A tensor made over bytes shares the memory, as PyTorch's does."""
from __future__ import annotations

import os

import numpy as np

from eager.arguments import array_dtype, dtype_arg
from eager.device import CPU
from eager.factories import tensor
from eager.tensor import Storage, Tensor, share_array
from ir import dtypes
from ir.dtypes import DType


class UntypedStorage:
    """Bytes on the CPU that tensors view: `UntypedStorage(n)` (zeroed), a tensor's
    `untyped_storage()`, or `UntypedStorage.from_file(...)`. `data_ptr`, `nbytes`,
    `len`, `s[i]` (a byte) and `s[a:b]` (a storage sharing those bytes)."""

    def __init__(self, size: int = 0, *, device=None):
        if device is not None and str(device) != "cpu":
            raise NotImplementedError(f"UntypedStorage on {device}: kiln's storages here are "
                                      f"on the CPU (a device tensor's memory is its backend's)")
        self._bytes = np.zeros(int(size), np.uint8)

    @classmethod
    def _over(cls, data: np.ndarray) -> UntypedStorage:
        storage = cls.__new__(cls)
        storage._bytes = data
        return storage

    @classmethod
    def _of(cls, storage: Storage) -> UntypedStorage:
        if storage.data is None:
            raise NotImplementedError(f"untyped_storage() of a {storage.device} tensor: kiln "
                                      f"shows only CPU memory as bytes")
        return cls._over(storage.data.view(np.uint8)[:storage.nbytes])

    @staticmethod
    def from_file(filename, shared: bool = False, nbytes: int = 0) -> UntypedStorage:
        """The first `nbytes` of the file: a private copy (shared=False), or the file
        itself mapped, where writes go to the file (shared=True)."""
        size = int(nbytes)
        if shared:
            return UntypedStorage._over(np.memmap(filename, np.uint8, "r+", shape=(size,)))
        with open(os.fspath(filename), "rb") as f:
            data = np.frombuffer(bytearray(f.read(size)), np.uint8)
        if data.size != size:
            raise RuntimeError(f"unexpected EOF, expected {size - data.size} more bytes. The "
                               f"file might be corrupted.")
        return UntypedStorage._over(data)

    def untyped(self) -> UntypedStorage:
        return self

    @property
    def device(self):
        return CPU

    def nbytes(self) -> int:
        return int(self._bytes.size)

    size = nbytes

    def __len__(self) -> int:
        return self.nbytes()

    def data_ptr(self) -> int:
        return int(self._bytes.ctypes.data)

    def __getitem__(self, index):
        if isinstance(index, slice):
            if index.step not in (None, 1):
                raise RuntimeError("slices with steps are not supported")
            return UntypedStorage._over(self._bytes[index])
        return int(self._bytes[index])

    def __setitem__(self, index, value) -> None:
        self._bytes[index] = value

    def tolist(self) -> list[int]:
        return self._bytes.tolist()

    def __repr__(self) -> str:
        shown = "\n".join(f" {b}" for b in self._bytes[:20].tolist())
        return f"{shown}\n[eager.storage.UntypedStorage(device=cpu) of size {self.nbytes()}]"


def untyped_storage(self: Tensor) -> UntypedStorage:
    """`t.untyped_storage()`: all of the memory t views (its storage, not only t's part)."""
    return UntypedStorage._of(self._storage)


def _over_bytes(data: np.ndarray, dtype: DType, fn: str) -> Tensor:
    if data.size % dtype.itemsize:
        raise ValueError(f"{fn}(): the length of the buffer ({data.size} bytes) is not a "
                         f"multiple of the element size ({dtype.itemsize})")
    return share_array(data.view(dtype.np))


def frombuffer(buffer, *, dtype, count: int = -1, offset: int = 0,
               requires_grad: bool = False) -> Tensor:
    """A 1-D tensor over an object's buffer (bytes, bytearray, memoryview, array),
    sharing its memory: `count` elements (-1: all) from byte `offset`."""
    dt = dtype_arg("frombuffer", dtype)
    data = np.frombuffer(buffer, np.uint8, offset=offset)
    if count >= 0:
        data = data[:count * dt.itemsize]
    t = _over_bytes(data, dt, "frombuffer")
    return t.requires_grad_(True) if requires_grad else t


def asarray(obj, *, dtype=None, device=None, copy: bool | None = None,
            requires_grad: bool = False) -> Tensor:
    """A tensor of `obj`, sharing its memory where it can (a tensor, a numpy array, an
    UntypedStorage, an object with a buffer) unless `copy`; copying otherwise (nested
    numbers), or where copy=False forbids it, an error."""
    dt = dtype_arg("asarray", dtype)
    if isinstance(obj, UntypedStorage):
        t = _over_bytes(obj._bytes, dt or dtypes.get_default_dtype(), "asarray")
    elif isinstance(obj, Tensor):
        t = obj
    elif isinstance(obj, np.ndarray):
        array_dtype("asarray", obj.dtype)
        t = share_array(obj)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        t = frombuffer(obj, dtype=dt or dtypes.get_default_dtype())
    else:
        t = tensor(obj, dtype=dt)
        copy = False if copy is None else copy
    converted = t.to(device=device or t.device, dtype=dt or t.dtype)
    if converted is not t and copy is False:
        raise ValueError("can't alias tensor from tensor: its dtype or device differs, and "
                         "copy=False was given")
    if copy and converted is t:
        converted = t.clone()
    return converted.requires_grad_(True) if requires_grad else converted


Tensor.untyped_storage = untyped_storage

__all__ = ["UntypedStorage", "asarray", "frombuffer"]
