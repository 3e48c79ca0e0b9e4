"""eager.save / eager.load: state dicts and nested containers of tensors and Python values,
in a safe format: a zip of .npy arrays plus a JSON manifest (no pickle on load).

The manifest records each array's dtype, shape and SHA-256, so a truncated or corrupted
file is rejected with a clear error instead of loading wrong numbers. Loading reads no
more than the file holds: members must be stored uncompressed, as `save` writes them, each
member's size is checked against what its shape and dtype need before a byte of it is read,
a tensor's member may be named once, and the manifest is at most 16 MiB.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import struct
import threading
import zipfile
import zlib
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from eager.factories import tensor
from eager.tensor import Tensor
from ir.dtypes import from_name

_FORMAT = "kiln-save-1"
_MANIFEST_MAX = 1 << 24  # bytes: about 90,000 tensors' entries
_NPY_HEADER_MAX = 1 << 14  # bytes before the data; np.load refuses headers over 10,000


class CorruptFileError(RuntimeError):
    pass


def _encode(obj, arrays: list):
    if isinstance(obj, Tensor):
        a = np.array(obj.detach()._host_np(), order="C")  # ascontiguousarray makes 0-d 1-d
        arrays.append(a)
        return {"tensor": len(arrays) - 1, "dtype": obj.dtype.name, "shape": list(a.shape),
                "requires_grad": obj.requires_grad,
                "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, (str, int)):
                raise TypeError(f"eager.save: dict keys must be str or int, not "
                                f"{type(k).__name__}")
        return {"dict": [[k, _encode(v, arrays)] for k, v in obj.items()],
                "ordered": isinstance(obj, OrderedDict)}
    if isinstance(obj, (list, tuple)):
        return {"list" if isinstance(obj, list) else "tuple": [_encode(v, arrays) for v in obj]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise TypeError(f"eager.save cannot store objects of type {type(obj).__name__}; it stores "
                    "tensors, dicts, lists, tuples, numbers, strings and None")


def save(obj, f) -> None:
    """Write `obj` to the path or binary file `f`; a path is written atomically: to a
    temporary file beside it, renamed over `f` only once complete."""
    arrays: list = []
    manifest = {"format": _FORMAT, "root": _encode(obj, arrays)}
    if not isinstance(f, (str, os.PathLike)):
        _write(f, manifest, arrays)
        return
    tmp = f"{os.fspath(f)}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            _write(fh, manifest, arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, f)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _write(fh, manifest, arrays) -> None:
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            z.writestr(f"{i}.npy", buf.getvalue())


# What a damaged or crafted file can make zipfile, json, numpy or the decoder raise.
_DAMAGE = (zipfile.BadZipFile, zlib.error, struct.error, EOFError, OSError, ValueError,
           KeyError, IndexError, TypeError, AttributeError, NotImplementedError, RuntimeError)


def load(f, map_location=None, weights_only: bool = True):
    """Read what `save` wrote; raises CorruptFileError for damaged or foreign files (and
    the usual OSError, such as FileNotFoundError, when a path cannot be opened)."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            tree = _read(fh, repr(os.fspath(f)))
    else:
        tree = _read(f, repr(getattr(f, "name", "<stream>")))
    return _materialise(tree, map_location)


class _Checked(NamedTuple):
    """A tensor's array, read and verified, not yet placed on a device."""
    array: np.ndarray
    dtype: object
    requires_grad: bool


def _read(fh, name: str):
    """The saved tree with verified arrays as _Checked; any damage is a CorruptFileError."""
    try:
        file_size = fh.seek(0, io.SEEK_END)
        fh.seek(0)
        with zipfile.ZipFile(fh) as z:
            if "manifest.json" not in z.namelist():
                raise CorruptFileError(f"eager.load: {name} is not a kiln save file")
            members = _Members(z, name, file_size)
            manifest = json.loads(members.read("manifest.json", 0, _MANIFEST_MAX,
                                               f"at most {_MANIFEST_MAX} are allowed"))
            if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
                raise CorruptFileError(f"eager.load: {name} is not a kiln save file")
            return _decode(manifest["root"], members)
    except CorruptFileError:
        raise
    except _DAMAGE as e:
        raise CorruptFileError(f"eager.load: {name} is truncated or corrupted "
                               f"({type(e).__name__}: {e})") from e


class _Members:
    """Reads a save file's members, each once, refusing before reading any whose size in
    the zip directory is not what the caller expects or is more than the file holds (a
    deflated member could inflate a thousandfold; a stored one cannot)."""

    def __init__(self, z: zipfile.ZipFile, name: str, file_size: int):
        self.z, self.name, self.file_size, self.seen = z, name, file_size, set()

    def read(self, member: str, least: int, most: int, expected: str) -> bytes:
        """The member's bytes, refused unless its size is in [least, most] (`expected`
        says why, in the error)."""
        if member in self.seen:
            raise self.refuse(f"names member {member} twice")
        self.seen.add(member)
        info = self.z.getinfo(member)
        if info.compress_type != zipfile.ZIP_STORED:
            raise self.refuse(f"member {member} is compressed (method {info.compress_type}); "
                              "kiln save files store members uncompressed")
        if not least <= info.file_size <= most:
            raise self.refuse(f"member {member} holds {info.file_size} bytes; {expected}")
        if info.compress_size != info.file_size or \
                info.header_offset + info.compress_size > self.file_size:
            raise self.refuse(f"member {member} claims {info.compress_size} bytes stored "
                              f"but the file has only {self.file_size}")
        with self.z.open(info) as fh:
            return fh.read(info.file_size)  # zipfile checks the CRC on reaching the end

    def refuse(self, why: str) -> CorruptFileError:
        return CorruptFileError(f"eager.load: {self.name} is corrupted ({why})")


def _decode(node, members: _Members):
    if "tensor" in node:
        return _decode_tensor(node, members)
    if "dict" in node:
        items = [(k, _decode(v, members)) for k, v in node["dict"]]
        return OrderedDict(items) if node.get("ordered") else dict(items)
    if "list" in node:
        return [_decode(v, members) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, members) for v in node["tuple"])
    return node["value"]


_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}


def _decode_tensor(node, members: _Members) -> _Checked:
    dtype, shape = from_name(node["dtype"]), node["shape"]
    if not all(type(s) is int and s >= 0 for s in shape):
        raise members.refuse(f"tensor {node['tensor']} has shape {shape}")
    nbytes = math.prod(shape) * dtype.itemsize
    data = members.read(f"{int(node['tensor'])}.npy", nbytes, nbytes + _NPY_HEADER_MAX,
                        f"shape {shape} of {dtype.name} needs {nbytes} and a header")
    npy = io.BytesIO(data)
    header = _NPY_HEADER_READERS[np.lib.format.read_magic(npy)](npy)
    # the checksum covers the bytes; dtype (byte order included) and shape say what they mean
    if header != (tuple(shape), False, dtype.np) or len(data) != npy.tell() + nbytes or \
            hashlib.sha256(memoryview(data)[npy.tell():]).hexdigest() != node["sha256"]:
        raise members.refuse(f"tensor {node['tensor']} does not match its dtype, shape and "
                             "checksum")
    a = np.frombuffer(data, dtype.np, offset=npy.tell()).reshape(shape)
    return _Checked(a, dtype, bool(node["requires_grad"]))


def _materialise(tree, map_location):
    if isinstance(tree, _Checked):
        return tensor(tree.array, dtype=tree.dtype, device=map_location,
                      requires_grad=tree.requires_grad)
    if isinstance(tree, dict):
        return type(tree)((k, _materialise(v, map_location)) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        return type(tree)(_materialise(v, map_location) for v in tree)
    return tree
