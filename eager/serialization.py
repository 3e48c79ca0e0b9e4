"""eager.save / eager.load: state dicts and nested containers of tensors and Python values.

eager.load reads kiln's own files and PyTorch's (torch.save's zip layout and its legacy one:
eager/serialization_torch.py); eager.save writes kiln's, or PyTorch's zip layout with
format="torch" (eager/serialization_torch_save.py), which torch.load reads.

kiln's format is safe by construction: a zip of .npy arrays plus a JSON manifest (no pickle
on load). The manifest records each array's dtype, shape and SHA-256, so a truncated or
corrupted file is rejected with a clear error instead of loading wrong numbers. Loading reads
no more than the file holds: members must be stored uncompressed, as `save` writes them, each
member's size is checked against what its shape and dtype need before a byte of it is read,
a tensor's member may be named once, and the manifest is at most 16 MiB. Each manifest
entry's fields are checked for their types and ranges before use; an error names the
entry by its path from the root (root['layers'][2]).
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import pickle
import threading
import zipfile
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from eager import serialization_torch, serialization_torch_save
from eager.factories import tensor
from eager.serialization_files import (
    DAMAGE,
    CorruptFileError,
    Members,
    WeightsOnlyError,
)
from eager.tensor import Tensor
from ir import dtypes
from ir.dtypes import DType, from_name

__all__ = ["CorruptFileError", "WeightsOnlyError", "load", "save"]

_FORMAT = "kiln-save-1"
_MANIFEST_MAX = 1 << 24  # bytes: about 90,000 tensors' entries
_NPY_HEADER_MAX = 1 << 14  # bytes before the data; np.load refuses headers over 10,000


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


def save(obj, f, *, format: str = "kiln") -> None:
    """Write `obj` to the path or binary file `f`; a path is written atomically: to a
    temporary file beside it, renamed over `f` only once complete.

    format="kiln" (the default) writes kiln's format; format="torch" writes PyTorch's zip
    layout, which torch.load(f, weights_only=True) reads and which keeps views that share
    memory sharing it. kiln's stays the default: a kiln file holds no pickle, so any
    reader can check it without running one, and it holds each tensor's own elements
    (PyTorch's writes the whole storage a view looks into: saving x[:10] of a 1 GB tensor
    writes 1 GB)."""
    if format == "kiln":
        arrays: list = []
        manifest = {"format": _FORMAT, "root": _encode(obj, arrays)}

        def write(fh):
            _write(fh, manifest, arrays)
    elif format == "torch":
        def write(fh):
            serialization_torch_save.write_zip(obj, fh)
    else:
        raise ValueError(f"eager.save writes format 'kiln' or 'torch', not {format!r}")
    if not isinstance(f, (str, os.PathLike)):
        write(f)
        return
    tmp = f"{os.fspath(f)}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, f)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _file_type(dtype: DType) -> np.dtype:
    """The numpy type a .npy member of `dtype` is written in: bfloat16 (ml_dtypes' type,
    which .npy headers cannot name) as its 16-bit words, the manifest naming the dtype."""
    return np.dtype(np.uint16) if dtype is dtypes.bfloat16 else dtype.np


def _write(fh, manifest, arrays) -> None:
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, a.view(_file_type(dtypes.from_numpy(a.dtype))), allow_pickle=False)
            z.writestr(f"{i}.npy", buf.getvalue())


def load(f, map_location=None, weights_only: bool = True):
    """Read what eager.save or torch.save wrote to the path or binary file `f`, its tensors
    on `map_location`: None puts them where they were saved, a device or string there, and
    for PyTorch's files a dict maps saved locations ('cuda:0') to devices.

    Raises CorruptFileError for a damaged or foreign file or one holding what kiln lacks,
    WeightsOnlyError (a CorruptFileError) for a PyTorch file whose pickle asks for more
    than weights, and the usual OSError, such as FileNotFoundError, when a path cannot be
    opened. kiln reads weights only whatever `weights_only` says: it never runs a pickle's
    code."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            read = _read(fh, repr(os.fspath(f)))
    else:
        read = _read(f, repr(getattr(f, "name", "<stream>")))
    return read.place(map_location)


def _read(fh, name: str):
    """What the file holds, read and checked, not yet placed on a device (an object with
    `place(map_location)`); any damage is a CorruptFileError."""
    try:
        file_size = fh.seek(0, io.SEEK_END)
        fh.seek(0)
        if fh.read(1) == pickle.PROTO:
            fh.seek(0)
            return serialization_torch.read_legacy(fh, name, file_size)
        fh.seek(0)
        with zipfile.ZipFile(fh) as z:
            members = Members(z, name, file_size)
            if members.holds("manifest.json"):
                return _KilnFile(_read_manifest(members, name))
            if serialization_torch.is_torch_zip(z):
                return serialization_torch.read_zip(z, members, name, file_size)
            raise CorruptFileError(f"eager.load: {name} is not a kiln or PyTorch save file")
    except CorruptFileError:
        raise
    except DAMAGE as e:
        raise CorruptFileError(f"eager.load: {name} is truncated or corrupted "
                               f"({type(e).__name__}: {e})") from e


def _read_manifest(members: Members, name: str):
    """The saved tree with verified arrays as _Checked."""
    manifest = json.loads(members.read("manifest.json", 0, _MANIFEST_MAX,
                                       f"at most {_MANIFEST_MAX} are allowed"))
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise CorruptFileError(f"eager.load: {name} is not a kiln save file")
    return _decode(manifest["root"], members)


class _Checked(NamedTuple):
    """A tensor's array, read and verified, not yet placed on a device."""
    array: np.ndarray
    dtype: object
    requires_grad: bool


class _KilnFile(NamedTuple):
    """A kiln file read: its tree, tensors as _Checked until placed."""
    tree: object

    def place(self, map_location):
        return _materialise(self.tree, map_location)


_KINDS = ("tensor", "dict", "list", "tuple", "value")
_PLAIN_VALUES = (type(None), bool, int, float, str)


def _brief(value) -> str:
    """`value`'s repr, cut short: a crafted manifest's entry may be megabytes."""
    shown = repr(value)
    return shown if len(shown) <= 80 else f"{shown[:60]}...{shown[-12:]}"


def _decode(node, members: Members, where: str = "root"):
    """What manifest entry `node` stands for; `where` names the entry in errors, as the
    path to it from the root (root['layers'][2])."""
    def refuse(why: str) -> CorruptFileError:
        return members.refuse(why, where)
    if not isinstance(node, dict):
        raise refuse(f"is {_brief(node)}, not an entry")
    kind = next((k for k in _KINDS if k in node), None)
    if kind is None:
        raise refuse(f"has none of the fields {', '.join(_KINDS)}")
    content = node[kind]
    if kind == "tensor":
        return _decode_tensor(node, members, where)
    if kind == "value":
        if type(content) not in _PLAIN_VALUES:
            raise refuse(f"has value {_brief(content)}; a value is a number, string, bool "
                         f"or null")
        return content
    if not isinstance(content, list):
        raise refuse(f"has {kind} {_brief(content)}, not a list")
    if kind != "dict":
        items = [_decode(v, members, f"{where}[{i}]") for i, v in enumerate(content)]
        return items if kind == "list" else tuple(items)
    ordered = node.get("ordered")
    if type(ordered) is not bool:
        raise refuse(f"has ordered {_brief(ordered)}, not true or false")
    items = []
    for item in content:
        if not isinstance(item, list) or len(item) != 2:
            raise refuse(f"has dict item {_brief(item)}, not a [key, entry] pair")
        key, value = item
        if type(key) not in (str, int):
            raise refuse(f"has dict key {_brief(key)}; keys are strings or whole numbers")
        items.append((key, _decode(value, members, f"{where}[{_brief(key)}]")))
    return OrderedDict(items) if ordered else dict(items)


_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}


def _decode_tensor(node, members: Members, where: str) -> _Checked:
    """Tensor entry `node`'s array, read and checked against the entry (`where` names
    the entry in errors)."""
    def refuse(why: str) -> CorruptFileError:
        return members.refuse(why, where)
    index, shape = node["tensor"], node.get("shape")
    if type(index) is not int or index < 0:
        raise refuse(f"has tensor index {_brief(index)}; expected a whole number, 0 or more")
    try:
        dtype = from_name(node.get("dtype"))
    except TypeError:
        raise refuse(f"has dtype {_brief(node.get('dtype'))}, not one kiln knows") from None
    if not dtype.has_kernels:
        raise refuse(f"has dtype {_brief(node.get('dtype'))}, which kiln names but makes no "
                     f"tensors of")
    if type(shape) is not list or not all(type(s) is int and s >= 0 for s in shape):
        raise refuse(f"has shape {_brief(shape)}; expected a list of whole numbers, 0 or more")
    requires_grad, sha256 = node.get("requires_grad"), node.get("sha256")
    if type(requires_grad) is not bool:
        raise refuse(f"has requires_grad {_brief(requires_grad)}, not true or false")
    if requires_grad and not dtype.is_floating_point:
        raise refuse(f"a tensor of {dtype.name} cannot require grad (only floating point "
                     f"tensors can)")
    if type(sha256) is not str:
        raise refuse(f"has sha256 {_brief(sha256)}, not a hex digest")
    member = f"{index}.npy"
    if not members.holds(member):
        raise refuse(f"names member {member}, which the file does not hold")
    nbytes = math.prod(shape) * dtype.itemsize
    data = members.read(member, nbytes, nbytes + _NPY_HEADER_MAX,
                        f"shape {shape} of {dtype.name} needs {nbytes} and a header", where)
    npy = io.BytesIO(data)
    try:
        header = _NPY_HEADER_READERS[np.lib.format.read_magic(npy)](npy)
    except (ValueError, KeyError) as e:
        raise refuse(f"member {member} has no .npy header numpy reads ({e})") from None
    # the checksum covers the bytes; dtype (byte order included) and shape say what they mean
    stored = _file_type(dtype)
    if header != (tuple(shape), False, stored) or len(data) != npy.tell() + nbytes or \
            hashlib.sha256(memoryview(data)[npy.tell():]).hexdigest() != sha256:
        raise refuse(f"member {member} does not match its dtype, shape and checksum")
    a = np.frombuffer(data, stored, offset=npy.tell()).reshape(shape).view(dtype.np)
    return _Checked(a, dtype, requires_grad)


def _materialise(tree, map_location):
    if isinstance(tree, _Checked):
        return tensor(tree.array, dtype=tree.dtype, device=map_location,
                      requires_grad=tree.requires_grad)
    if isinstance(tree, dict):
        return type(tree)((k, _materialise(v, map_location)) for k, v in tree.items())
    if isinstance(tree, (list, tuple)):
        return type(tree)(_materialise(v, map_location) for v in tree)
    return tree
