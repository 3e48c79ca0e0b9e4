"""eager.save / eager.load: state dicts and nested containers of tensors and Python values,
in a safe format: a zip of .npy arrays plus a JSON manifest (no pickle on load).

The manifest records each array's dtype, shape and SHA-256, so a truncated or corrupted
file is rejected with a clear error instead of loading wrong numbers.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections import OrderedDict

import numpy as np

_FORMAT = "kiln-save-1"


class CorruptFileError(RuntimeError):
    pass


def _encode(obj, arrays: list):
    from eager.tensor import Tensor
    if isinstance(obj, Tensor):
        a = np.ascontiguousarray(obj.detach()._host_np())
        arrays.append(a)
        return {"tensor": len(arrays) - 1, "dtype": obj.dtype.name, "shape": list(a.shape),
                "requires_grad": obj.requires_grad,
                "sha256": hashlib.sha256(a.tobytes()).hexdigest()}
    if isinstance(obj, dict):
        if not all(isinstance(k, (str, int)) for k in obj):
            raise TypeError("eager.save: dict keys must be str or int")
        return {"dict": [[k, _encode(v, arrays)] for k, v in obj.items()],
                "ordered": isinstance(obj, OrderedDict)}
    if isinstance(obj, (list, tuple)):
        return {"list" if isinstance(obj, list) else "tuple": [_encode(v, arrays) for v in obj]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    raise TypeError(f"eager.save cannot store objects of type {type(obj).__name__}; it stores "
                    "tensors, dicts, lists, tuples, numbers, strings and None")


def save(obj, f) -> None:
    """Write `obj` to the path or binary file `f`; a path is written atomically."""
    arrays: list = []
    manifest = {"format": _FORMAT, "root": _encode(obj, arrays)}
    if isinstance(f, (str, os.PathLike)):
        tmp = f"{os.fspath(f)}.tmp{os.getpid()}"
        with open(tmp, "wb") as fh:
            _write(fh, manifest, arrays)
        os.replace(tmp, f)
    else:
        _write(f, manifest, arrays)


def _write(fh, manifest, arrays) -> None:
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for i, a in enumerate(arrays):
            buf = io.BytesIO()
            np.save(buf, a, allow_pickle=False)
            z.writestr(f"{i}.npy", buf.getvalue())


def load(f, map_location=None, weights_only: bool = True):
    """Read what `save` wrote; raises CorruptFileError for damaged or foreign files."""
    name = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", "<stream>")
    try:
        with zipfile.ZipFile(f) as z:
            bad = z.testzip()
            if bad is not None:
                raise CorruptFileError(f"eager.load: {name!r} is corrupted (bad CRC in {bad})")
            manifest = json.loads(z.read("manifest.json"))
            if manifest.get("format") != _FORMAT:
                raise CorruptFileError(f"eager.load: {name!r} is not a kiln save file")
            return _decode(manifest["root"], z, name, map_location)
    except (zipfile.BadZipFile, KeyError, ValueError, EOFError, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise CorruptFileError(f"eager.load: {name!r} is truncated or corrupted ({e})") from None


def _decode(node, z, name, map_location):
    if "tensor" in node:
        from eager.factories import tensor
        from ir.dtypes import from_name
        with z.open(f"{node['tensor']}.npy") as fh:
            a = np.load(io.BytesIO(fh.read()), allow_pickle=False)
        if hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest() != node["sha256"] or \
                list(a.shape) != node["shape"]:
            raise CorruptFileError(f"eager.load: {name!r} is corrupted (tensor {node['tensor']} "
                                   "does not match its checksum)")
        return tensor(a, dtype=from_name(node["dtype"]), device=map_location,
                      requires_grad=node["requires_grad"])
    if "dict" in node:
        items = [(k, _decode(v, z, name, map_location)) for k, v in node["dict"]]
        return OrderedDict(items) if node.get("ordered") else dict(items)
    if "list" in node:
        return [_decode(v, z, name, map_location) for v in node["list"]]
    if "tuple" in node:
        return tuple(_decode(v, z, name, map_location) for v in node["tuple"])
    return node["value"]
