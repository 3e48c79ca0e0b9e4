"""A fuzz test: files torch.save wrote, mutated (bytes anywhere, data.pkl's bytes, storage
members, zip directory fields), either load in kiln as torch loads them or raise
CorruptFileError; never another exception, a hang or a wrong tensor.

Where torch.load itself refuses the mutated bytes, kiln may still load them, but only to
the saved object unchanged: torch refuses some damage to what kiln does not read (a record
such as .storage_alignment, zip fields miniz checks and Python's zipfile does not).
Mutations of data.pkl and of storages are written back with fresh CRCs, so that the
checks past the zip's are the ones tried. Derandomised: the same examples every run."""
import io
import struct
import warnings
import zipfile
from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch_files import same, torch_saved

import eager
from eager.serialization import CorruptFileError

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

FUZZ = settings(derandomize=True, max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def _sample():
    base = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    state = OrderedDict([("w", base), ("t", base.t()), ("row", base[1]),
                         ("steps", torch.tensor([3, -1])), ("on", torch.tensor([True])),
                         ("half", torch.tensor([0.5], dtype=torch.float16))])
    state._metadata = {"": {"version": 1}}
    return {"state": state, "n": 3, "name": "net", "shape": torch.Size([4, 3])}


SAMPLE = _sample()
SAVED = {layout: torch_saved(SAMPLE, layout).getvalue() for layout in ("zip", "legacy")}


def _check(data: bytes) -> None:
    """kiln loads `data` as torch does, or as saved where torch refuses, or refuses."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            expected = torch.load(io.BytesIO(data), weights_only=True)
        except Exception:  # noqa: BLE001 - any refusal of torch's
            expected = SAMPLE
    try:
        loaded = eager.load(io.BytesIO(data))
    except CorruptFileError:
        return
    same(loaded, expected)


def test_the_unmutated_files_load_as_saved():
    for data in SAVED.values():
        same(eager.load(io.BytesIO(data)), SAMPLE)


def _mutate(data: bytes, draw, start: int = 0, end: int | None = None) -> bytes:
    """1 to 3 edits in data[start:end]: a byte replaced, inserted or deleted, or the end cut."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        stop = len(out) if end is None else min(end, len(out))
        if stop <= start:
            break
        at = draw(st.integers(start, stop - 1))
        edit = draw(st.sampled_from(["replace", "replace", "insert", "delete", "cut"]))
        if edit == "replace":
            out[at] = draw(st.integers(0, 255))
        elif edit == "insert":
            out.insert(at, draw(st.integers(0, 255)))
        elif edit == "delete":
            del out[at]
        else:
            del out[at:stop]
    return bytes(out)


def _rezipped(data: bytes, edit) -> bytes:
    """The zip with `edit(name, content)` applied to each member and fresh CRCs."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, edit(name, src.read(name)))
    return out.getvalue()


@FUZZ
@given(st.data(), st.sampled_from(["zip", "legacy"]))
def test_bytes_changed_anywhere(data, layout):
    _check(_mutate(SAVED[layout], data.draw))


@FUZZ
@given(st.data())
def test_data_pkl_changed_behind_a_fresh_crc(data):
    pkl = zipfile.ZipFile(io.BytesIO(SAVED["zip"])).read("archive/data.pkl")
    changed = _mutate(pkl, data.draw)
    _check(_rezipped(SAVED["zip"], lambda n, c: changed if n.endswith("data.pkl") else c))


@FUZZ
@given(st.data())
def test_the_legacy_pickles_changed(data):
    legacy = SAVED["legacy"]
    storages_start = len(legacy) - sum(8 + t.untyped_storage().nbytes() for t in (
        SAMPLE["state"]["w"], SAMPLE["state"]["steps"], SAMPLE["state"]["on"],
        SAMPLE["state"]["half"]))
    _check(_mutate(legacy, data.draw, 0, storages_start))


@FUZZ
@given(st.data(), st.sampled_from(["0", "1", "2", "3"]))
def test_a_storage_member_changed_behind_a_fresh_crc(data, key):
    _check(_rezipped(SAVED["zip"], lambda n, c: _mutate(c, data.draw)
                     if n == f"archive/data/{key}" else c))


_FIELDS = {"crc": 16, "compress_size": 20, "file_size": 24, "header_offset": 42}


@FUZZ
@given(st.data())
def test_a_zip_directory_field_changed(data):
    out = bytearray(SAVED["zip"])
    entries = []
    at = out.find(b"PK\x01\x02")
    while at >= 0:
        entries.append(at)
        at = out.find(b"PK\x01\x02", at + 1)
    entry = data.draw(st.sampled_from(entries))
    offset = _FIELDS[data.draw(st.sampled_from(sorted(_FIELDS)))]
    (old,) = struct.unpack_from("<I", out, entry + offset)
    new = data.draw(st.sampled_from([0, 1, old - 1, old + 1, old + 64, old * 2, 2**31,
                                     2**32 - 1]))
    struct.pack_into("<I", out, entry + offset, new % 2**32)
    _check(bytes(out))
