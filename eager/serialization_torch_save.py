"""eager.save(obj, f, format="torch"): PyTorch's zip layout, which torch.load reads with
weights_only=True.

The pickle is written opcode by opcode, in protocol 2 and only with the opcodes and globals
PyTorch's weights-only unpickler runs (and eager/serialization_pickle.py runs), as
torch.save's pickler writes them: a tensor is `torch._utils._rebuild_tensor_v2` of a
persistent id naming its storage, its offset, size, stride and requires_grad; a Parameter
is `_rebuild_parameter` of its data; an OrderedDict keeps its attributes (a state dict's
`_metadata`). Each kiln Storage is written once, whole, as PyTorch writes its storages, so
views that shared one in kiln share one in torch; a tensor whose memory is not the CPU's
(CUDA) is written as a storage of its own elements, tagged with its device. Lists, dicts
and tensors met twice are written once and referred to again.

The zip holds `archive/data.pkl`, `archive/data/<key>` for each storage, and records
`byteorder` and `version`. It has no `.format_version` record: with one, torch.load may
compute where a storage lies from the layout its own zip writer uses, which Python's
zipfile does not follow; without, it reads each storage's offset from the zip.
"""
from __future__ import annotations

import io
import pickle
import struct
import sys
import zipfile
from collections import OrderedDict

import numpy as np

from eager.device import device
from eager.nn.parameter import Parameter
from eager.serialization_torch_globals import STORAGE_DTYPES
from eager.shapes import contiguous_strides
from eager.tensor import Size, Tensor
from ir.dtypes import DType

_STORAGE_CLASS = {dtype: name for name, dtype in STORAGE_DTYPES.items()}
_BATCH = 1000  # items a MARK gathers, as pickle's


def write_zip(obj, fh) -> None:
    """Write `obj` in PyTorch's zip layout to binary file `fh`."""
    pickler = _Pickler()
    data = pickler.dump(obj)
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", data)
        z.writestr("archive/byteorder", sys.byteorder)
        for key, array in pickler.storages:
            z.writestr(f"archive/data/{key}", memoryview(array.reshape(-1).view(np.uint8)))
        z.writestr("archive/version", "3\n")


class _Pickler:
    def __init__(self):
        self.out = io.BytesIO()
        self.memo: dict[int, int] = {}  # id(obj) -> memo index
        self.alive: list = []  # what is memoised, kept so that no id is reused meanwhile
        self.keys: dict[int, str] = {}  # id(kiln Storage) -> its key
        self.storages: list[tuple[str, np.ndarray]] = []

    def dump(self, obj) -> bytes:
        self.out.write(pickle.PROTO + b"\x02")
        self.save(obj)
        self.out.write(pickle.STOP)
        return self.out.getvalue()

    def save(self, obj) -> None:
        index = self.memo.get(id(obj))
        if index is not None:
            self.out.write(pickle.BINGET + bytes([index]) if index < 256 else
                           pickle.LONG_BINGET + struct.pack("<I", index))
            return
        write = _WRITERS.get(type(obj))
        if write is None:
            if not isinstance(obj, Tensor):
                raise TypeError(f"eager.save cannot store objects of type "
                                f"{type(obj).__name__} for PyTorch; it stores tensors, dicts, "
                                f"lists, tuples, sets, numbers, strings, bytes, None, dtypes, "
                                f"sizes and devices")
            write = _tensor
        write(self, obj)

    def remember(self, obj) -> None:
        """Memoise `obj` (on the stack's top) so that a second sight refers to it."""
        index = self.memo[id(obj)] = len(self.memo)
        self.alive.append(obj)
        self.out.write(pickle.BINPUT + bytes([index]) if index < 256 else
                       pickle.LONG_BINPUT + struct.pack("<I", index))

    def global_(self, module: str, name: str) -> None:
        self.out.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())

    def call(self, module: str, name: str, *args) -> None:
        """GLOBAL module.name, args, REDUCE."""
        self.global_(module, name)
        _tuple(self, args)
        self.out.write(pickle.REDUCE)

    def items(self, values, closing: bytes) -> None:
        for start in range(0, len(values), _BATCH):
            self.out.write(pickle.MARK)
            for v in values[start:start + _BATCH]:
                self.save(v)
            self.out.write(closing)

    def storage_of(self, t: Tensor) -> tuple:
        """(key, element count, location, offset, stride) of the storage `t` is written
        over: its own kiln Storage where that is host memory of t's dtype, else a storage
        of t's elements alone."""
        s = t._storage
        data = s.data if t.device.type == "cpu" else None
        if data is not None and data.flags.c_contiguous and data.dtype == t.dtype.np:
            if id(s) not in self.keys:
                self.keys[id(s)] = str(len(self.storages))
                self.storages.append((self.keys[id(s)], data))
            return self.keys[id(s)], data.size, "cpu", t._offset, t._stride
        elements = np.array(t.detach()._host_np(), order="C")  # a copy off the device
        key = str(len(self.storages))
        self.storages.append((key, elements))
        return key, elements.size, str(t.device), 0, contiguous_strides(t.shape)


def _none(p: _Pickler, obj) -> None:
    p.out.write(pickle.NONE)


def _bool(p: _Pickler, obj: bool) -> None:
    p.out.write(pickle.NEWTRUE if obj else pickle.NEWFALSE)


def _int(p: _Pickler, v: int) -> None:
    if 0 <= v < 256:
        p.out.write(pickle.BININT1 + bytes([v]))
    elif 0 <= v < 65536:
        p.out.write(pickle.BININT2 + struct.pack("<H", v))
    elif -2**31 <= v < 2**31:
        p.out.write(pickle.BININT + struct.pack("<i", v))
    else:
        encoded = pickle.encode_long(v)
        if len(encoded) > 255:
            raise TypeError(f"eager.save cannot store an int of {len(encoded)} bytes for "
                            f"PyTorch (at most 255)")
        p.out.write(pickle.LONG1 + bytes([len(encoded)]) + encoded)


def _float(p: _Pickler, v: float) -> None:
    p.out.write(pickle.BINFLOAT + struct.pack(">d", v))


def _str(p: _Pickler, s: str) -> None:
    encoded = s.encode("utf-8", "surrogatepass")
    p.out.write(pickle.BINUNICODE + struct.pack("<I", len(encoded)) + encoded)


def _bytes(p: _Pickler, b: bytes) -> None:
    p.call("_codecs", "encode", b.decode("latin-1"), "latin1")


def _complex(p: _Pickler, z: complex) -> None:
    p.call("__builtin__", "complex", z.real, z.imag)


def _tuple(p: _Pickler, t: tuple) -> None:
    if not t:
        p.out.write(pickle.EMPTY_TUPLE)
    elif len(t) <= 3:
        for v in t:
            p.save(v)
        p.out.write((pickle.TUPLE1, pickle.TUPLE2, pickle.TUPLE3)[len(t) - 1])
    else:
        p.items(t, pickle.TUPLE)


def _list(p: _Pickler, items: list) -> None:
    p.out.write(pickle.EMPTY_LIST)
    p.remember(items)
    p.items(items, pickle.APPENDS)


def _dict(p: _Pickler, d: dict) -> None:
    if type(d) is OrderedDict:
        p.call("collections", "OrderedDict")
    else:
        p.out.write(pickle.EMPTY_DICT)
    p.remember(d)
    p.items([x for item in d.items() for x in item], pickle.SETITEMS)
    if type(d) is OrderedDict and d.__dict__:
        p.save(d.__dict__)
        p.out.write(pickle.BUILD)


def _set(p: _Pickler, s: set) -> None:
    p.call("__builtin__", "set", list(s))


def _size(p: _Pickler, size: Size) -> None:
    p.call("torch", "Size", tuple(size))


def _device(p: _Pickler, d: device) -> None:
    p.call("torch", "device", *((d.type,) if d.index is None else (d.type, d.index)))


def _dtype(p: _Pickler, dt: DType) -> None:
    p.global_("torch", dt.name)


def _tensor(p: _Pickler, t: Tensor) -> None:
    _rebuild_tensor(p, t)
    p.remember(t)


def _rebuild_tensor(p: _Pickler, t: Tensor) -> None:
    if t.device.type == "meta":
        p.call("torch._utils", "_rebuild_meta_tensor_no_storage", t.dtype, tuple(t.shape),
               t.stride(), t.requires_grad)
    else:
        key, numel, location, offset, stride = p.storage_of(t)
        p.global_("torch._utils", "_rebuild_tensor_v2")
        p.out.write(pickle.MARK + pickle.MARK)
        p.save("storage")
        p.global_("torch", _STORAGE_CLASS[t.dtype.name])  # (kiln's dtypes all have one)
        for v in (key, location, numel):
            p.save(v)
        p.out.write(pickle.TUPLE + pickle.BINPERSID)
        for v in (offset, tuple(t.shape), tuple(stride), t.requires_grad):
            p.save(v)
        p.call("collections", "OrderedDict")
        p.out.write(pickle.TUPLE + pickle.REDUCE)


def _parameter(p: _Pickler, param: Parameter) -> None:
    p.global_("torch._utils", "_rebuild_parameter")
    p.out.write(pickle.MARK)
    _rebuild_tensor(p, param.detach())
    p.save(param.requires_grad)
    p.call("collections", "OrderedDict")
    p.out.write(pickle.TUPLE + pickle.REDUCE)
    p.remember(param)


_WRITERS = {type(None): _none, bool: _bool, int: _int, float: _float, str: _str,
            bytes: _bytes, complex: _complex, tuple: _tuple, list: _list, dict: _dict,
            OrderedDict: _dict, set: _set, Size: _size, device: _device, DType: _dtype,
            Tensor: _tensor, Parameter: _parameter}
