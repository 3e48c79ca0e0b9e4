"""Reading what torch.save writes: its zip layout and its legacy one.

The zip layout (PyTorch 1.6 on) holds `<archive>/data.pkl`, a pickle of the saved object
whose tensors name their storages by persistent id, and each storage's bytes in
`<archive>/data/<key>`, with records `byteorder` and `version`. The legacy layout
(`_use_new_zipfile_serialization=False`) is five pickles in a row (a magic number, a
protocol version, system info, the object, the storage keys), then each storage as an
8-byte element count and its bytes.

Pickles run in eager/serialization_pickle.py under PyTorch's weights_only rules, with the
globals of eager/serialization_torch_globals.py and the functions below that rebuild
tensors and Parameters as kiln's. A tensor is checked
against the storage its persistent id claims (a negative stride or an element past the end
is refused) and made a view of one kiln Storage per key, so tensors that shared a storage
in torch share one in kiln. A storage is read after the pickle, straight into its tensors'
memory, and must hold exactly the bytes its claim needs; on a device other than the CPU it
is moved once and its tensors re-pointed to the moved copy.
"""
from __future__ import annotations

import io
import math
import struct
import sys

import numpy as np

from eager.device import CPU, META, device
from eager.nn.parameter import Parameter
from eager.serialization_files import CorruptFileError, Members, WeightsOnlyError
from eager.serialization_pickle import Call, Unpickler, brief
from eager.serialization_torch_globals import (
    PLAIN_GLOBALS,
    WEIGHTS_ONLY_GLOBALS,
    StorageKind,
    whole_numbers,
)
from eager.tensor import Storage, Tensor, aligned_empty, from_array
from ir import dtypes

PICKLE_MAX = 1 << 30  # bytes of a file's pickle
_BUDGET = (64 << 20, 64)  # a pickle may build 64 MiB of objects, and 64 bytes a byte of it
_LEGACY_MAGIC, _LEGACY_PROTOCOL = 0x1950A86A20F9469CFC6C, 1001
_VERSIONS = range(1, 11)  # of the zip layout, as torch.load reads them


class _Entry:
    """One storage key's claim (kind, bytes, saved location) and, once a tensor views it,
    its dtype and kiln Storage (without data until the file's bytes are read)."""
    def __init__(self, key: str, kind: StorageKind, nbytes: int, location: str):
        self.key, self.kind, self.nbytes, self.location = key, kind, nbytes, location
        self.dtype, self.storage = kind.dtype, None

    def storage_for(self, dt) -> Storage:
        if self.dtype is None:  # an UntypedStorage takes its first tensor's dtype
            if self.nbytes % dt.itemsize:
                raise CorruptFileError(f"storage {self.key} of {self.nbytes} bytes is read "
                                       f"as {dt.name}, of {dt.itemsize}-byte elements")
            self.dtype = dt
        elif dt is not self.dtype:
            raise CorruptFileError(f"storage {self.key} holds {self.dtype.name} and is read "
                                   f"as {dt.name} too")
        if self.storage is None:
            self.storage = Storage(None, CPU, self.nbytes)
        return self.storage


class _StorageRef:
    """What a persistent id gives: its storage's entry, for a rebuild function."""
    def __init__(self, entry: _Entry):
        self.entry = entry

    def __repr__(self) -> str:
        return f"<storage {self.entry.key} of a PyTorch file>"


class TorchFile:
    """A PyTorch file read: its pickle's result and its storages, placed on devices by
    `place`. Built in four steps: `unpickle`, then `read_zip_storages` or
    `read_legacy_storages`, then `place`."""

    def __init__(self, name: str, file_size: int, legacy: bool):
        self.name, self.file_size, self.legacy = name, file_size, legacy
        self.entries: dict[str, _Entry] = {}
        self.views: list[Tensor] = []  # every tensor over the file's storages
        self.rebuilds: set[Call] = set()  # the functions that rebuild a tensor
        self.result = None

    def refuse(self, why: str) -> CorruptFileError:
        return CorruptFileError(f"eager.load: {self.name} is corrupted ({why})")

    def unpickle(self, source, end: int, where: str) -> None:
        budget = _BUDGET[0] + _BUDGET[1] * (end - source.tell())
        self.result = Unpickler(source, end, self.name, where, self.globals(), self.claim,
                                budget).load()
        bare = [e.key for e in self.entries.values() if e.storage is None]
        if bare:
            raise self.refuse(f"storage {bare[0]} is no tensor's: kiln loads tensors, not "
                              f"bare storages")

    def globals(self) -> dict:
        rebuilds = {"_rebuild_tensor": self.tensor_v1, "_rebuild_tensor_v2": self.tensor_v2,
                    "_rebuild_tensor_v3": self.tensor_v3,
                    "_rebuild_parameter": self.parameter,
                    "_rebuild_parameter_with_state": self.parameter_with_state,
                    "_rebuild_meta_tensor_no_storage": self.meta_tensor}
        table = {f"torch._utils.{n}": Call(f"torch._utils.{n}", f) for n, f in rebuilds.items()}
        self.rebuilds = set(table.values())
        table["torch._tensor._rebuild_from_type_v2"] = Call(
            "torch._tensor._rebuild_from_type_v2", self.from_type)
        return WEIGHTS_ONLY_GLOBALS | table

    # persistent ids -----------------------------------------------------------------------
    def claim(self, pid: tuple) -> _StorageRef:
        """The zip layout's ('storage', kind, key, location, numel); the legacy layout's
        has a sixth field, a view of another storage, which PyTorch has not written since
        before 1.0 and kiln does not read."""
        if len(pid) != (6 if self.legacy else 5) or (self.legacy and pid[5] is not None):
            raise CorruptFileError(f"persistent id {brief(pid)}; expected ('storage', kind, "
                                   f"key, location, numel{', None' if self.legacy else ''})")
        _, kind, key, location, numel = pid[:5]
        if type(kind) is not StorageKind or type(key) is not str or \
                type(location) is not str or type(numel) is not int or numel < 0:
            raise CorruptFileError(f"persistent id {brief(pid)}; expected ('storage', a "
                                   f"storage class, key, location, element count)")
        nbytes = numel * (kind.dtype.itemsize if kind.dtype else 1)
        if nbytes > self.file_size:
            raise CorruptFileError(f"storage {key} claims {nbytes} bytes; the file has only "
                                   f"{self.file_size}")
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(key, kind, nbytes, location)
        if (entry.kind, entry.nbytes, entry.location) != (kind, nbytes, location):
            raise CorruptFileError(f"storage {key} is claimed as {entry.kind} of "
                                   f"{entry.nbytes} bytes on {entry.location!r} and as {kind} "
                                   f"of {nbytes} bytes on {location!r}")
        return _StorageRef(entry)

    # rebuild functions --------------------------------------------------------------------
    def view(self, ref, offset, size, stride, dt, requires_grad, hooks=None,
             metadata=None) -> Tensor:
        """A tensor over `ref`'s storage, its geometry checked against the storage's
        claimed size."""
        _storage_ref(ref)
        size, stride = whole_numbers(size, "size"), _strides(stride)
        if len(size) != len(stride) or type(offset) is not int or not 0 <= offset < 1 << 63:
            raise CorruptFileError(f"a tensor of size {size}, stride {stride} at offset "
                                   f"{brief(offset)}")
        _check_flags(requires_grad, hooks, metadata)
        entry = ref.entry
        storage = entry.storage_for(dt)
        elements = entry.nbytes // dt.itemsize
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if math.prod(size) and last >= elements:
            raise CorruptFileError(f"a tensor of size {size}, stride {stride} at offset "
                                   f"{offset} reaches element {last} of storage {entry.key}, "
                                   f"which holds {elements}")
        t = Tensor._make(storage, size, stride, offset, dt, CPU)
        t.requires_grad_(requires_grad)
        self.views.append(t)
        return t

    def tensor_v1(self, ref, offset, size, stride) -> Tensor:
        return self.view(ref, offset, size, stride, _typed(ref), False)

    def tensor_v2(self, ref, offset, size, stride, requires_grad, hooks, metadata=None):
        return self.view(ref, offset, size, stride, _typed(ref), requires_grad, hooks,
                         metadata)

    def tensor_v3(self, ref, offset, size, stride, requires_grad, hooks, dt, metadata=None):
        if type(dt) is not dtypes.DType:
            raise CorruptFileError(f"dtype {brief(dt)}")
        return self.view(ref, offset, size, stride, dt, requires_grad, hooks, metadata)

    def parameter(self, data, requires_grad, hooks) -> Parameter:
        if not isinstance(data, Tensor) or data.device.type == "meta":
            raise CorruptFileError(f"a Parameter of {brief(data)}")
        _check_flags(requires_grad, hooks, None)
        p = Parameter(data, requires_grad)
        if data.device == CPU:  # over one of the file's storages, which place() may move
            self.views.append(p)
        return p

    def parameter_with_state(self, data, requires_grad, hooks, state) -> Parameter:
        if state:
            raise CorruptFileError(f"a Parameter with Python attributes {brief(state)}, "
                                   f"which kiln does not restore")
        return self.parameter(data, requires_grad, hooks)

    def meta_tensor(self, dt, size, stride, requires_grad) -> Tensor:
        if type(dt) is not dtypes.DType:
            raise CorruptFileError(f"dtype {brief(dt)}")
        size, stride = whole_numbers(size, "size"), _strides(stride)
        if len(size) != len(stride):
            raise CorruptFileError(f"a tensor of size {size} and stride {stride}")
        _check_flags(requires_grad, None, None)
        t = Tensor._make(Storage(None, META, 0), size, stride, 0, dt, META)
        return t.requires_grad_(requires_grad)

    def from_type(self, call, new_type, args, state):
        """PyTorch's way to save a tensor subclass or a tensor with attributes."""
        if call not in self.rebuilds or new_type not in (Tensor, Parameter) or \
                type(args) is not tuple:
            raise WeightsOnlyError(f"rebuilds {brief(new_type)} with {brief(call)}; kiln "
                                   f"rebuilds tensors and Parameters")
        if state:
            raise CorruptFileError(f"a tensor with Python attributes {brief(state)}, which "
                                   f"kiln does not restore")
        result = call.fn(*args)
        if type(result) is not new_type:
            raise CorruptFileError(f"{call.name} gives a {type(result).__name__}, not a "
                                   f"{new_type.__name__}")
        return result

    # storages -----------------------------------------------------------------------------
    def new_bytes(self, entry: _Entry) -> np.ndarray:
        return aligned_empty(entry.nbytes, np.uint8)

    def fill(self, entry: _Entry, raw: np.ndarray, big_endian: bool = False) -> None:
        data = raw.view(entry.dtype.np)
        if big_endian != (sys.byteorder == "big"):
            data.byteswap(inplace=True)
        entry.storage.data = data

    def read_zip_storages(self, members: Members, prefix: str, big_endian: bool) -> None:
        for entry in self.entries.values():
            member = f"{prefix}data/{entry.key}"
            if not members.holds(member):
                raise self.refuse(f"storage {entry.key} has no member {member}")
            raw = self.new_bytes(entry)
            members.read_into(member, raw, f"its claim, {entry.kind} of {entry.nbytes} "
                              f"bytes, needs {entry.nbytes}")
            self.fill(entry, raw, big_endian)

    def read_legacy_storages(self, fh, keys) -> None:
        """Each storage of `keys`, in order: an 8-byte element count, then its bytes."""
        if type(keys) is not list or not all(type(k) is str for k in keys):
            raise self.refuse(f"the storage keys are {brief(keys)}, not a list of strings")
        if len(set(keys)) != len(keys) or set(keys) != set(self.entries):
            missing = sorted(set(self.entries) - set(keys)) or ["(none)"]
            raise self.refuse(f"the storage list {brief(keys)} is not the storages the "
                              f"pickle claims, each once (missing: {missing[0]})")
        for key in keys:
            entry = self.entries[key]
            count = fh.read(8)
            numel = entry.nbytes // (entry.kind.dtype or entry.dtype).itemsize
            if len(count) != 8 or struct.unpack("<q", count)[0] != numel:
                raise self.refuse(f"storage {key} is stored with element count "
                                  f"{brief(count)}; its claim is {numel}")
            if fh.tell() + entry.nbytes > self.file_size:
                raise self.refuse(f"storage {key} of {entry.nbytes} bytes runs past the end")
            raw = self.new_bytes(entry)
            view, done = memoryview(raw), 0
            while done < entry.nbytes:
                n = fh.readinto(view[done:])
                if not n:
                    raise self.refuse(f"storage {key} ends early")
                done += n
            self.fill(entry, raw)
        if fh.tell() != self.file_size:
            raise self.refuse(f"{self.file_size - fh.tell()} bytes follow the last storage")

    def place(self, map_location):
        """The result, each storage on the device `map_location` gives for its saved
        location: None keeps it, a device or string sets it, a dict maps saved locations
        ('cuda:0') to devices."""
        moved = {}
        for entry in self.entries.values():
            where = _target(map_location, entry.location, self.refuse)
            if where != CPU:
                moved[id(entry.storage)] = from_array(entry.storage.data).to(where)._storage
        for t in self.views:
            storage = moved.get(id(t._storage))
            if storage is not None:
                t.data = Tensor._make(storage, t._shape, t._stride, t._offset, t.dtype,
                                      storage.device)
        return self.result


def _target(map_location, location: str, refuse) -> device:
    """Where a storage saved on `location` goes; a bad `map_location` is the caller's
    error, a saved location kiln does not know is the file's."""
    if callable(map_location):
        raise TypeError("eager.load's map_location is a device, a string or a dict; kiln "
                        "takes no function")
    chosen = map_location.get(location) if isinstance(map_location, dict) else map_location
    if chosen is not None:
        return device(chosen)
    try:
        return device(location)
    except (RuntimeError, TypeError):
        raise refuse(f"a storage was saved on {brief(location)}, not a device kiln knows; "
                     f"map_location='cpu' loads it on the CPU") from None


def _storage_ref(ref) -> _StorageRef:
    if type(ref) is not _StorageRef:
        raise CorruptFileError(f"a tensor over {brief(ref)}, not a storage")
    return ref


def _typed(ref) -> dtypes.DType:
    """The dtype of `ref`'s storage class (a tensor_v1 or v2 names none of its own)."""
    dt = _storage_ref(ref).entry.kind.dtype
    if dt is None:
        raise CorruptFileError(f"storage {ref.entry.key} is untyped and names no dtype")
    return dt


def _strides(stride) -> tuple:
    if isinstance(stride, tuple) and any(type(s) is int and s < 0 for s in stride):
        raise CorruptFileError(f"stride {brief(stride)} is negative; tensors have none")
    return whole_numbers(stride, "stride")


def _check_flags(requires_grad, hooks, metadata) -> None:
    if type(requires_grad) is not bool:
        raise CorruptFileError(f"requires_grad {brief(requires_grad)}, not True or False")
    if hooks is not None and (not isinstance(hooks, dict) or hooks):
        raise CorruptFileError(f"backward hooks {brief(hooks)}; kiln loads none")
    if metadata:
        raise CorruptFileError(f"tensor metadata {brief(metadata)}, which kiln lacks")


def read_zip(z, members: Members, name: str, file_size: int) -> TorchFile:
    """A torch.save zip: the first member's folder is the archive's."""
    prefix = z.namelist()[0].partition("/")[0] + "/"
    if members.holds(f"{prefix}constants.pkl"):
        raise CorruptFileError(f"eager.load: {name} is a TorchScript archive "
                               f"(torch.jit.save); kiln loads torch.save files")
    version = _record(members, f"{prefix}version") or _record(members, f"{prefix}.data/version")
    if not version or not version.strip().isdigit() or int(version) not in _VERSIONS:
        raise members.refuse(f"its version record is {brief(version)}; torch.load reads "
                             f"versions {_VERSIONS.start} to {_VERSIONS.stop - 1}")
    order = _record(members, f"{prefix}byteorder") or b"little"
    if order not in (b"little", b"big"):
        raise members.refuse(f"its byteorder record is {brief(order)}")
    loaded = TorchFile(name, file_size, legacy=False)
    pickle_bytes = members.read(f"{prefix}data.pkl", 0, PICKLE_MAX,
                                f"at most {PICKLE_MAX} are allowed")
    loaded.unpickle(io.BytesIO(pickle_bytes), len(pickle_bytes), f"{prefix}data.pkl")
    loaded.read_zip_storages(members, prefix, order == b"big")
    return loaded


def _record(members: Members, member: str) -> bytes | None:
    if not members.holds(member):
        return None
    return members.read(member, 0, 64, "a record holds at most 64")


def read_legacy(fh, name: str, file_size: int) -> TorchFile:
    """A torch.save(..., _use_new_zipfile_serialization=False) file, from its start."""
    loaded = TorchFile(name, file_size, legacy=True)

    def plain(what: str):
        end = min(file_size, fh.tell() + PICKLE_MAX)
        return Unpickler(fh, end, name, what, PLAIN_GLOBALS, None, _BUDGET[0]).load()
    if plain("the magic number") != _LEGACY_MAGIC:
        raise loaded.refuse("it starts with a pickle but not PyTorch's magic number")
    if plain("the protocol version") != _LEGACY_PROTOCOL:
        raise loaded.refuse(f"its protocol version is not {_LEGACY_PROTOCOL}")
    if type(plain("the system info")) is not dict:
        raise loaded.refuse("its system info is not a dict")
    loaded.unpickle(fh, min(file_size, fh.tell() + PICKLE_MAX), "the pickle of the object")
    loaded.read_legacy_storages(fh, plain("the storage keys"))
    return loaded


def is_torch_zip(z) -> bool:
    """Whether zip `z` is laid out as torch.save lays it out: `<archive>/data.pkl`, where
    the first member's folder is the archive's."""
    names = z.namelist()
    return bool(names) and f"{names[0].partition('/')[0]}/data.pkl" in names
