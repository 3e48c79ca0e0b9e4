"""eager.save / eager.load: round trips of nested containers and every kind of tensor, and
damaged or foreign files, each of which must raise CorruptFileError and never load wrong
numbers; unsupported objects; atomic writes."""
import io
import json
import math
import pickle
import re
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import eager
from eager import serialization
from eager.serialization import CorruptFileError


def _sample():
    return {
        "weights": OrderedDict([("w", eager.randn(3, 4)), ("b", eager.zeros(4))]),
        "int64": eager.tensor([1, -2, 2**40]),
        "int32": eager.tensor([7, -8], dtype=eager.int32),
        "bool": eager.tensor([[True, False], [False, True]]),
        "float64": eager.tensor([math.pi, -0.0, math.inf], dtype=eager.float64),
        "float16": eager.tensor([0.5, 65504.0], dtype=eager.float16),
        "zero-d": eager.tensor(2.5),
        "empty": eager.zeros(0, 3),
        "transposed": eager.arange(12.0).reshape(3, 4).t(),
        "strided": eager.arange(10)[::3],
        "leaf": eager.ones(2, requires_grad=True),
        7: "an int key",
        "nested": [1, 2.5, "text", None, True, False, (3, [4, {"deep": eager.ones(1)}]), ()],
        "numbers": {"big": 2**70, "inf": -math.inf, "tiny": 5e-324},
    }


def assert_same(ours, ref, path="root"):
    assert type(ours) is type(ref), f"{path}: {type(ours).__name__} != {type(ref).__name__}"
    if isinstance(ref, eager.Tensor):
        assert (ours.dtype, tuple(ours.shape)) == (ref.dtype, tuple(ref.shape)), path
        assert ours.requires_grad == ref.requires_grad, path
        np.testing.assert_array_equal(ours.detach().numpy(), ref.detach().numpy(), err_msg=path)
    elif isinstance(ref, dict):
        assert list(ours) == list(ref), f"{path}: keys"
        for k in ref:
            assert_same(ours[k], ref[k], f"{path}[{k!r}]")
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref), f"{path}: length"
        for i, (a, b) in enumerate(zip(ours, ref)):
            assert_same(a, b, f"{path}[{i}]")
    else:
        assert ours == ref, path


@pytest.fixture
def saved(tmp_path):
    """A saved sample: (path, object, file bytes)."""
    eager.manual_seed(0)
    obj, path = _sample(), tmp_path / "sample.kiln"
    eager.save(obj, path)
    return path, obj, path.read_bytes()


def test_round_trip_keeps_values_types_order_and_dtypes(saved):
    path, obj, _ = saved
    assert_same(eager.load(path), obj)
    assert_same(eager.load(str(path)), obj)


def test_round_trip_through_a_binary_stream():
    buf = io.BytesIO()
    obj = _sample()
    eager.save(obj, buf)
    buf.seek(0)
    assert_same(eager.load(buf), obj)


def test_assert_same_notices_differences():
    obj = _sample()
    for change in [lambda o: o["weights"].move_to_end("w"), lambda o: o.__setitem__("zero-d",
                   eager.tensor(2.5, dtype=eager.float64)), lambda o: o["nested"].append(0)]:
        other = _sample()
        change(other)
        with pytest.raises(AssertionError):
            assert_same(other, obj)


def test_loaded_tensors_are_independent_of_the_saved_ones(tmp_path):
    t = eager.zeros(3)
    eager.save({"t": t}, tmp_path / "t.kiln")
    loaded = eager.load(tmp_path / "t.kiln")["t"]
    loaded.add_(1.0)
    assert t.tolist() == [0.0, 0.0, 0.0] and loaded.tolist() == [1.0, 1.0, 1.0]


def test_module_state_dict_round_trip(tmp_path):
    net = eager.nn.Sequential(eager.nn.Linear(3, 4), eager.nn.LayerNorm(4))
    eager.save(net.state_dict(), tmp_path / "net.kiln")
    other = eager.nn.Sequential(eager.nn.Linear(3, 4), eager.nn.LayerNorm(4))
    other.load_state_dict(eager.load(tmp_path / "net.kiln"))
    x = eager.randn(2, 3)
    np.testing.assert_array_equal(other(x).detach().numpy(), net(x).detach().numpy())


def _load_bytes(data, tmp_path):
    path = tmp_path / "damaged.kiln"
    path.write_bytes(data)
    return eager.load(path)


@pytest.mark.parametrize("keep", [0, 1, 4, 30, 0.25, 0.5, 0.9, -22, -1])
def test_truncated_file_is_rejected(saved, tmp_path, keep):
    _, _, data = saved
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    with pytest.raises(CorruptFileError, match="damaged.kiln"):
        _load_bytes(data[:cut], tmp_path)


def test_every_truncation_of_a_small_file_is_rejected(tmp_path):
    buf = io.BytesIO()
    eager.save({"w": eager.arange(4.0), "n": 3}, buf)
    data = buf.getvalue()
    for cut in range(len(data)):
        with pytest.raises(CorruptFileError):
            eager.load(io.BytesIO(data[:cut]))


def test_flipped_byte_in_tensor_data_is_rejected(tmp_path):
    values = np.linspace(1000, 2000, 64, dtype=np.float32)
    eager.save({"x": eager.tensor(values)}, tmp_path / "x.kiln")
    data = bytearray((tmp_path / "x.kiln").read_bytes())
    start = data.find(values.tobytes())
    assert start > 0
    data[start + 100] ^= 0x01
    with pytest.raises(CorruptFileError, match="corrupted"):
        _load_bytes(bytes(data), tmp_path)


def test_every_single_byte_flip_is_rejected_or_harmless():
    """Flipping any byte of a file either raises CorruptFileError or leaves the loaded
    values exactly as saved (zip timestamps, for instance, are not checked)."""
    obj = {"w": eager.tensor([1.5, -2.0]), "i": eager.tensor([3]), "s": "ok"}
    buf = io.BytesIO()
    eager.save(obj, buf)
    data = buf.getvalue()
    rejected = 0
    for i in range(len(data)):
        damaged = bytearray(data)
        damaged[i] ^= 0xFF
        try:
            loaded = eager.load(io.BytesIO(bytes(damaged)))
        except CorruptFileError:
            rejected += 1
            continue
        assert_same(loaded, obj, f"byte {i} flipped")
    assert rejected > len(data) * 0.7


def _rewrite(data: bytes, edit) -> bytes:
    """The zip with `edit(name, content)` applied to each entry and fresh CRCs, so that
    only kiln's own checks stand between the edit and the caller."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, edit(name, src.read(name)))
    return out.getvalue()


def _npy(array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


VALUES = np.array([1.0, 2.0, 3.0], np.float32)

REWRITES = {  # id: edit(name, content) -> new content
    "changed-number": lambda n, c: _npy(VALUES + [0, 1, 0]) if n == "0.npy" else c,
    "same-bytes-other-dtype": lambda n, c: _npy(VALUES.view(np.int32)) if n == "0.npy" else c,
    "same-bytes-big-endian": lambda n, c: _npy(VALUES.view(">u4").view(">f4"))
    if n == "0.npy" else c,
    "same-bytes-other-shape": lambda n, c: _npy(VALUES.view(np.float16)[:6].reshape(2, 3))
    if n == "0.npy" else c,
    "manifest-not-json": lambda n, c: b"{" if n == "manifest.json" else c,
    "manifest-a-list": lambda n, c: b"[]" if n == "manifest.json" else c,
    "manifest-other-format": lambda n, c: c.replace(b"kiln-save-1", b"kiln-save-9"),
    "manifest-unknown-dtype": lambda n, c: c.replace(b'"float32"', b'"complex64"'),
    "manifest-bad-node": lambda n, c: c.replace(b'{"tensor": 0', b'{"tensr": 0'),
    "manifest-root-a-number": lambda n, c: json.dumps({"format": "kiln-save-1", "root": 5})
    .encode() if n == "manifest.json" else c,
    "missing-array": lambda n, c: c.replace(b'"tensor": 0', b'"tensor": 3'),
}


@pytest.mark.parametrize("edit", REWRITES.values(), ids=REWRITES.keys())
def test_consistent_but_wrong_contents_are_rejected(edit):
    buf = io.BytesIO()
    eager.save({"x": eager.tensor(VALUES)}, buf)
    with pytest.raises(CorruptFileError):
        eager.load(io.BytesIO(_rewrite(buf.getvalue(), edit)))


def _with_entry(x, edit) -> bytes:
    """A save file of {"x": x} whose manifest entry for x is replaced by `edit(entry)`."""
    buf = io.BytesIO()
    eager.save({"x": x}, buf)

    def manifest(name, content):
        if name != "manifest.json":
            return content
        saved = json.loads(content)
        saved["root"]["dict"][0][1] = edit(saved["root"]["dict"][0][1])
        return json.dumps(saved).encode()
    return _rewrite(buf.getvalue(), manifest)


FLOATS, INTS = eager.tensor(VALUES), eager.tensor([1, 2, 3])

BAD_ENTRIES = {  # id: (what is saved as root['x'], edit(its entry), what the error says)
    "index-infinity": (FLOATS, lambda e: e | {"tensor": math.inf}, "tensor index inf"),
    "index-nan": (FLOATS, lambda e: e | {"tensor": math.nan}, "tensor index nan"),
    "index-negative": (FLOATS, lambda e: e | {"tensor": -1}, "tensor index -1"),
    "index-a-float": (FLOATS, lambda e: e | {"tensor": 0.0}, "tensor index 0.0"),
    "index-a-bool": (FLOATS, lambda e: e | {"tensor": False}, "tensor index False"),
    "index-a-string": (FLOATS, lambda e: e | {"tensor": "0"}, "tensor index '0'"),
    "index-huge": (FLOATS, lambda e: e | {"tensor": 10**40},
                   f"member {10**40}.npy, which the file does not hold"),
    "requires-grad-on-int64": (INTS, lambda e: e | {"requires_grad": True},
                               "a tensor of int64 cannot require grad"),
    "requires-grad-a-string": (FLOATS, lambda e: e | {"requires_grad": "no"},
                               "requires_grad 'no'"),
    "requires-grad-a-number": (FLOATS, lambda e: e | {"requires_grad": 1}, "requires_grad 1"),
    "dtype-a-number": (FLOATS, lambda e: e | {"dtype": 5}, "dtype 5"),
    "dtype-unknown": (FLOATS, lambda e: e | {"dtype": "complex64"}, "dtype 'complex64'"),
    "shape-a-number": (FLOATS, lambda e: e | {"shape": 3}, "shape 3"),
    "shape-infinite": (FLOATS, lambda e: e | {"shape": [math.inf]}, "shape [inf]"),
    "shape-negative": (FLOATS, lambda e: e | {"shape": [-3]}, "shape [-3]"),
    "shape-huge": (FLOATS, lambda e: e | {"shape": [10**40]}, f"shape [{10**40}]"),
    "sha256-a-number": (FLOATS, lambda e: e | {"sha256": 5}, "sha256 5"),
    "entry-a-number": (FLOATS, lambda e: 5, "is 5, not an entry"),
    "entry-of-no-kind": (FLOATS, lambda e: {"tensr": 0}, "has none of the fields"),
    "value-a-list": (1, lambda e: {"value": [1]}, "value [1]"),
    "value-an-object": (1, lambda e: {"value": {"a": 1}}, "value {'a': 1}"),
    "list-a-number": ([1], lambda e: {"list": 5}, "list 5"),
    "tuple-a-string": ((1,), lambda e: {"tuple": "ab"}, "tuple 'ab'"),
    "dict-a-number": ({}, lambda e: {"dict": 5, "ordered": False}, "dict 5"),
    "dict-item-not-a-pair": ({}, lambda e: {"dict": [["k"]], "ordered": False},
                             "dict item ['k']"),
    "dict-key-a-list": ({}, lambda e: {"dict": [[["k"], {"value": 1}]], "ordered": False},
                        "dict key ['k']"),
    "dict-key-a-float": ({}, lambda e: {"dict": [[1.5, {"value": 1}]], "ordered": False},
                         "dict key 1.5"),
    "dict-ordered-a-string": ({}, lambda e: {"dict": [], "ordered": "yes"}, "ordered 'yes'"),
}


@pytest.mark.parametrize("saved_x, edit, says", BAD_ENTRIES.values(), ids=BAD_ENTRIES.keys())
def test_a_malformed_manifest_entry_is_corruption_naming_the_entry(saved_x, edit, says):
    with pytest.raises(CorruptFileError) as caught:
        eager.load(io.BytesIO(_with_entry(saved_x, edit)))
    assert "root['x']" in str(caught.value) and says in str(caught.value)


def test_an_entry_inside_containers_is_named_by_its_path():
    def second_layer_requires_grad(entry):
        entry["dict"][0][1]["list"][1]["requires_grad"] = True
        return entry
    data = _with_entry({"layers": [eager.tensor(VALUES), INTS]}, second_layer_requires_grad)
    entry = "root['x']['layers'][1]: a tensor of int64"
    with pytest.raises(CorruptFileError, match=re.escape(entry)):
        eager.load(io.BytesIO(data))


def test_every_entry_kind_with_edits_that_change_nothing_still_loads():
    x = {"t": eager.tensor(VALUES, requires_grad=True), 3: [None, (1.5, "s")], "b": True}
    loaded = eager.load(io.BytesIO(_with_entry(x, lambda e: e)))
    assert_same(loaded["x"], x)


def test_rewrite_without_edits_still_loads():
    buf = io.BytesIO()
    eager.save({"x": eager.tensor(VALUES)}, buf)
    loaded = eager.load(io.BytesIO(_rewrite(buf.getvalue(), lambda n, c: c)))
    np.testing.assert_array_equal(loaded["x"].numpy(), VALUES)


def _foreign_zip():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/weights.pickle", pickle.dumps({"w": [1.0]}))
    return buf.getvalue()


FOREIGN = {
    "empty": b"",
    "garbage": np.random.default_rng(0).bytes(2000),
    "pickle": pickle.dumps({"w": np.ones(3)}),
    "text": b"PK but not really a zip file\n" * 10,
    "other-zip": _foreign_zip(),
}


@pytest.mark.parametrize("name", FOREIGN)
def test_foreign_files_are_rejected(name, tmp_path):
    with pytest.raises(CorruptFileError, match="damaged.kiln"):
        _load_bytes(FOREIGN[name], tmp_path)


def test_other_zip_is_named_as_not_a_kiln_or_pytorch_file(tmp_path):
    with pytest.raises(CorruptFileError, match="not a kiln or PyTorch save file"):
        _load_bytes(FOREIGN["other-zip"], tmp_path)


def test_missing_file_and_directory_raise_os_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        eager.load(tmp_path / "nothing-here.kiln")
    with pytest.raises(IsADirectoryError):
        eager.load(tmp_path)


@pytest.mark.parametrize("obj, type_name", [
    ({1, 2}, "set"), (np.ones(3), "ndarray"), ({"a": [object()]}, "object"),
    ({(1, 2): 3}, "tuple"), (b"bytes", "bytes"), (eager.nn.Linear(1, 1), "Linear"),
])
def test_unsupported_objects_raise_type_error_naming_the_type(obj, type_name, tmp_path):
    with pytest.raises(TypeError, match=rf"\b{type_name}\b"):
        eager.save(obj, tmp_path / "x.kiln")
    assert list(tmp_path.iterdir()) == []


def test_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.kiln"
    eager.save({"v": 1}, path)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        eager.save({"v": {1, 2}}, path)

    def write_half_then_fail(fh, manifest, arrays):
        fh.write(b"PK\x03\x04 partial")
        raise OSError("No space left on device")

    monkeypatch.setattr(serialization, "_write", write_half_then_fail)
    with pytest.raises(OSError, match="No space"):
        eager.save({"v": 2}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.kiln"]
    assert path.read_bytes() == before
    monkeypatch.undo()
    assert eager.load(path) == {"v": 1}


def test_map_location_places_tensors_and_its_errors_are_not_corruption(saved):
    path, obj, _ = saved
    loaded = eager.load(path, map_location="meta")
    assert loaded["weights"]["w"].device.type == "meta"
    assert loaded["weights"]["w"].shape == obj["weights"]["w"].shape
    with pytest.raises(Exception) as info:
        eager.load(path, map_location="no-such-device")
    assert not isinstance(info.value, CorruptFileError)
