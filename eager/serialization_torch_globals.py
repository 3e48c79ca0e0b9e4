"""PyTorch's weights-only allowlist (torch/_weights_only_unpickler.py, _get_allowed_globals)
as kiln's objects: the table eager/serialization_pickle.py takes GLOBALs from.

Python's own types as protocol 2 pickles them (OrderedDict, Counter, set, complex, bytes,
bytearray), each a `Call` that checks its arguments; torch's dtypes as kiln's DTypes and
its storage classes as `StorageKind`s; torch.Size and torch.device; torch.Tensor and
Parameter as types a subclass rebuild may name. What PyTorch allows and kiln lacks (a dtype,
sparse or quantized tensors) is `Lacking`, refused naming what it is. The functions that
rebuild tensors are a loaded file's (eager/serialization_torch.py adds them).
"""
from __future__ import annotations

from collections import Counter, OrderedDict

from eager.device import device
from eager.nn.parameter import Parameter
from eager.serialization_files import CorruptFileError
from eager.serialization_pickle import Call, Lacking, brief, check_keys
from eager.tensor import Size, Tensor
from ir import dtypes

DIMS_MAX = 64  # numpy's


def _ordered_dict(*args) -> OrderedDict:
    """OrderedDict(), then SETITEMS, as pickle writes one (copying a dict into one takes
    microseconds an item: a few bytes could make the load crawl)."""
    if args:
        raise CorruptFileError(f"OrderedDict of {brief(args)}; pickle makes one of nothing")
    return OrderedDict()


def _counter(*args) -> Counter:
    if args and (len(args) > 1 or not isinstance(args[0], dict)):
        raise CorruptFileError(f"Counter of {brief(args)}; expected nothing or a dict")
    return Counter(*args)


def _set(*args) -> set:
    if args and (len(args) > 1 or type(args[0]) is not list):
        raise CorruptFileError(f"set of {brief(args)}; expected nothing or a list")
    check_keys(args[0] if args else (), {})
    return set(*args)


def _complex(real, imag=0.0) -> complex:
    if not all(type(x) in (int, float) for x in (real, imag)):
        raise CorruptFileError(f"complex of {brief((real, imag))}; expected two numbers")
    return complex(real, imag)


def _latin1(text, encoding) -> str:
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise CorruptFileError(f"bytes of {brief((text, encoding))}; protocol 2 writes "
                               f"bytes as (str, 'latin1')")
    return text


def _bytearray(*args) -> bytearray:
    return bytearray(_latin1(*args), "latin-1") if args else bytearray()


PLAIN_GLOBALS = {name: Call(name, fn) for name, fn in [
    ("collections.OrderedDict", _ordered_dict), ("collections.Counter", _counter),
    ("builtins.set", _set), ("builtins.complex", _complex),
    ("builtins.bytearray", _bytearray),
    ("_codecs.encode", lambda text, encoding: _latin1(text, encoding).encode("latin-1")),
]}


# torch's legacy storage classes, by the dtype each holds: torch.save names storages by these
STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
    "BoolStorage": "bool", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8", "QInt32Storage": "qint32",
    "QUInt8Storage": "quint8", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4"}
# torch's dtypes with no storage class: a tensor of one names an UntypedStorage and its dtype
UNTYPED_DTYPES = ("uint16", "uint32", "uint64", "complex32", "float8_e4m3fn",
                  "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
                  "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
                  *(f"{s}int{n}" for s in ("", "u") for n in range(1, 8)))
KILN_DTYPES = {d.name: d for d in dtypes.ALL}


class StorageKind:
    """What GLOBAL torch.FloatStorage (or torch.storage.UntypedStorage: dtype None) gives."""
    def __init__(self, name: str, dtype):
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def _dtype_entry(name: str):
    return KILN_DTYPES.get(name) or Lacking(f"tensors of {name}")


def _storage_entry(name: str, dtype_name: str):
    dt = KILN_DTYPES.get(dtype_name)
    return StorageKind(name, dt) if dt else Lacking(f"tensors of {dtype_name} (torch.{name})")


def _size(dims) -> Size:
    return Size(whole_numbers(dims, "torch.Size"))


def _device(kind, index=None) -> device:
    if type(kind) is not str or not (index is None or type(index) is int):
        raise CorruptFileError(f"a device of {brief((kind, index))}")
    return device(kind, index)


_LACKING_FUNCTIONS = {
    "_rebuild_sparse_tensor": "sparse tensors", "_rebuild_qtensor": "quantized tensors",
    "_rebuild_nested_tensor": "nested tensors",
    "_rebuild_wrapper_subclass": "a tensor subclass",
    "_rebuild_device_tensor_from_numpy": "a tensor of a device without storage (XLA, ...)",
    "_rebuild_device_tensor_from_cpu_tensor": "a tensor of a device without storage"}
WEIGHTS_ONLY_GLOBALS = {
    **PLAIN_GLOBALS,
    **{f"torch.{n}": _storage_entry(n, d) for n, d in STORAGE_DTYPES.items()},
    **{f"torch.{d}": _dtype_entry(d) for d in (*STORAGE_DTYPES.values(), *UNTYPED_DTYPES)},
    "torch.storage.UntypedStorage": StorageKind("UntypedStorage", None),
    "torch.Size": Call("torch.Size", _size), "torch.device": Call("torch.device", _device),
    "torch.Tensor": Tensor, "torch.nn.parameter.Parameter": Parameter,
    **{f"torch._utils.{f}": Lacking(what) for f, what in _LACKING_FUNCTIONS.items()},
    "torch.serialization._get_layout": Lacking("sparse tensors"),
    **{f"torch.{q}": Lacking("quantized tensors") for q in (
        "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
        "per_channel_symmetric", "per_channel_affine_float_qparams")},
}


def whole_numbers(value, what: str) -> tuple:
    if not isinstance(value, tuple) or len(value) > DIMS_MAX or \
            not all(type(v) is int and 0 <= v < 1 << 63 for v in value):
        raise CorruptFileError(f"{what} {brief(value)}; expected a tuple of at most "
                               f"{DIMS_MAX} whole numbers under 2**63")
    return value
