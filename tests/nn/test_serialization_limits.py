"""eager.load reads no more than a file holds: hostile files, each small, that claim huge
sizes or would inflate, are refused with CorruptFileError before their members are read,
and loading them allocates little (measured with tracemalloc)."""
import hashlib
import io
import json
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

import eager
from eager.serialization import CorruptFileError

VALUES = np.array([1.0, 2.0, 3.0], np.float32)


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _node(index=0, shape=(3,), data=VALUES):
    return {"tensor": index, "dtype": "float32", "shape": list(shape), "requires_grad": False,
            "sha256": hashlib.sha256(data.tobytes()).hexdigest()}


def _file(root, members, deflated=()) -> bytes:
    """A save file with manifest `root` and `members` ({name: bytes or an iterator of
    byte chunks}), stored but for the names in `deflated`."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("manifest.json", json.dumps({"format": "kiln-save-1", "root": root}))
        for name, content in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED
            with z.open(info, "w") as fh:
                for chunk in ([content] if isinstance(content, bytes) else content):
                    fh.write(chunk)
    return out.getvalue()


def _zeros(nbytes):
    """`nbytes` zero bytes, a MiB at a time."""
    return (bytes(1 << 20) for _ in range(nbytes >> 20))


def _with_directory_entry(data: bytes, name: str, **fields) -> bytes:
    """`data` with the zip central directory's crc, compress_size or file_size of member
    `name` overwritten (what a hostile writer controls; the contents stay as they are)."""
    offsets = {"crc": 16, "compress_size": 20, "file_size": 24}
    out, entry = bytearray(data), -1
    while True:
        entry = out.index(b"PK\x01\x02", entry + 1)
        (length,) = struct.unpack_from("<H", out, entry + 28)
        if out[entry + 46:entry + 46 + length] == name.encode():
            break
    for field, value in fields.items():
        struct.pack_into("<I", out, entry + offsets[field], value)
    return bytes(out)


def _load_measured(data: bytes):
    """Load `data`, returning (the CorruptFileError raised, peak bytes allocated)."""
    tracemalloc.start()
    try:
        with pytest.raises(CorruptFileError) as caught:
            eager.load(io.BytesIO(data))
        return caught.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_plain_file_loads_through_these_helpers():
    data = _file({"dict": [["x", _node()]], "ordered": False}, {"0.npy": _npy(VALUES)})
    np.testing.assert_array_equal(eager.load(io.BytesIO(data))["x"].numpy(), VALUES)


def test_a_deflated_member_is_refused_before_it_is_inflated():
    bomb = 64 << 20
    data = _file(_node(), {"0.npy": _zeros(bomb)}, deflated={"0.npy"})
    assert len(data) < bomb // 100
    error, peak = _load_measured(data)
    assert "member 0.npy is compressed" in str(error)
    assert peak < 4 << 20


def test_members_the_manifest_does_not_name_are_not_read(monkeypatch):
    data = _file(_node(), {"0.npy": _npy(VALUES), "junk.bin": _zeros(64 << 20)},
                 deflated={"junk.bin"})
    opened = []
    real_open = zipfile.ZipFile.open

    def spy(z, name, *args, **kwargs):
        opened.append(getattr(name, "filename", name))
        return real_open(z, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", spy)
    np.testing.assert_array_equal(eager.load(io.BytesIO(data)).numpy(), VALUES)
    assert opened == ["manifest.json", "0.npy"]


def test_a_member_larger_than_its_shape_needs_is_refused_before_reading():
    member = _npy(VALUES) + bytes(4 << 20)
    error, peak = _load_measured(_file(_node(), {"0.npy": member}))
    assert f"member 0.npy holds {len(member)} bytes; shape [3] of float32 needs 12" in str(error)
    assert peak < 1 << 20


def test_a_shape_of_2_to_the_40_elements_is_refused_not_allocated():
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
    data = _file(_node(shape=(2**40,)), {"0.npy": header.getvalue() + VALUES.tobytes()})
    error, peak = _load_measured(data)
    assert f"shape [{2**40}] of float32 needs {4 * 2**40}" in str(error)
    assert peak < 1 << 20


def test_a_manifest_whose_size_claims_more_than_the_bound_is_refused_before_reading():
    data = _file(_node(), {"0.npy": _npy(VALUES)})
    error, _ = _load_measured(_with_directory_entry(data, "manifest.json", file_size=2**31))
    assert "member manifest.json holds 2147483648 bytes; at most 16777216" in str(error)


def test_a_member_claiming_more_bytes_than_the_file_holds_is_refused():
    data = _file(_node(shape=(1000,)), {"0.npy": _npy(VALUES)})
    claim = 4000 + 128
    error, _ = _load_measured(_with_directory_entry(data, "0.npy", file_size=claim,
                                                    compress_size=claim))
    assert f"member 0.npy claims {claim} bytes stored but the file has only {len(data)}" \
        in str(error)


def test_a_member_named_by_two_tensors_is_refused():
    data = _file({"list": [_node(), _node()]}, {"0.npy": _npy(VALUES)})
    error, _ = _load_measured(data)
    assert "names member 0.npy twice" in str(error)


def test_a_bad_crc_is_still_noticed():
    data = _file(_node(), {"0.npy": _npy(VALUES)})
    error, _ = _load_measured(_with_directory_entry(data, "0.npy", crc=0))
    assert "Bad CRC-32" in str(error)


_unpickled = []


def _record_unpickling():
    _unpickled.append(True)


class _Payload:
    def __reduce__(self):
        return _record_unpickling, ()


def test_a_pickled_member_is_refused_without_unpickling():
    buf = io.BytesIO()
    np.save(buf, np.array([_Payload()], dtype=object), allow_pickle=True)
    data = _file(_node(shape=(1,), data=VALUES[:1]), {"0.npy": buf.getvalue()})
    error, _ = _load_measured(data)
    assert "does not match its dtype, shape and checksum" in str(error)
    assert _unpickled == []
