"""Hostile PyTorch files: each is refused with a CorruptFileError (or the WeightsOnlyError
subclass) naming the problem, never a crash, a hang, a MemoryError or a wrong tensor.
Pickles are assembled opcode by opcode below, so each test states the bytes it feeds."""
import io
import pickle
import struct
import time
import tracemalloc
import zipfile

import numpy as np
import pytest

import eager
from eager import serialization_torch
from eager.serialization import CorruptFileError, WeightsOnlyError

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


# a pickle assembler --------------------------------------------------------------------------
def g(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()


def s(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def i(v: int) -> bytes:
    if -2**31 <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    raw = pickle.encode_long(v)
    return b"\x8a" + bytes([len(raw)]) + raw


def tup(*parts: bytes) -> bytes:
    return b"(" + b"".join(parts) + b"t"


def call(function: bytes, *args: bytes) -> bytes:
    return function + tup(*args) + b"R"


def pkl(body: bytes) -> bytes:
    return b"\x80\x02" + body + b"."


EMPTY_HOOKS = call(g("collections", "OrderedDict"))


def storage(kind="FloatStorage", key="0", location="cpu", numel=3, legacy=False) -> bytes:
    """A persistent id; the legacy layout's has a sixth field, None."""
    return tup(s("storage"), g("torch", kind), s(key), s(location), i(numel),
               b"N" if legacy else b"") + b"Q"


def tensor(offset=0, size=(3,), stride=(1,), requires_grad=False, **claim) -> bytes:
    return call(g("torch._utils", "_rebuild_tensor_v2"), storage(**claim), i(offset),
                tup(*map(i, size)), tup(*map(i, stride)), b"\x88" if requires_grad else b"\x89",
                EMPTY_HOOKS)


VALUES = np.array([1.0, 2.0, 3.0], np.float32)


def torch_zip(data_pkl: bytes, storages=None, records=None, deflated=()) -> bytes:
    """A zip laid out as torch.save lays it out (`records` replace or drop, with None,
    the byteorder and version records)."""
    storages = {"0": VALUES.tobytes()} if storages is None else storages
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", data_pkl)
        for name, content in ({"byteorder": b"little", "version": b"3\n"} |
                              (records or {})).items():
            if content is not None:
                z.writestr(f"archive/{name}", content)
        for key, content in storages.items():
            z.writestr(zipfile.ZipInfo(f"archive/data/{key}"), content,
                       zipfile.ZIP_DEFLATED if key in deflated else zipfile.ZIP_STORED)
    return out.getvalue()


def load(data: bytes, **kwargs):
    return eager.load(io.BytesIO(data), **kwargs)


def refused(data: bytes, says: str, error=CorruptFileError) -> CorruptFileError:
    with pytest.raises(error) as caught:
        load(data)
    assert says in str(caught.value), str(caught.value)
    return caught.value


def test_the_assembled_file_loads_in_torch_and_kiln_alike():
    data = torch_zip(pkl(tensor(offset=1, size=(2,), stride=(1,))))
    assert torch.load(io.BytesIO(data), weights_only=True).tolist() == [2.0, 3.0]
    assert load(data).tolist() == [2.0, 3.0]


# sizes, offsets and strides ------------------------------------------------------------------
GEOMETRY = {  # id: (tensor(...) arguments, what the error says)
    "past-the-storage": ({"size": (4,)}, "reaches element 3 of storage 0, which holds 3"),
    "offset-past-the-end": ({"offset": 3, "size": (1,)}, "reaches element 3 of storage 0"),
    "stride-past-the-end": ({"size": (2,), "stride": (3,)}, "reaches element 3"),
    "huge-size": ({"size": (2**62,)}, f"reaches element {2**62 - 1}"),
    "size-past-int64": ({"size": (2**63,)}, "under 2**63"),
    "negative-size": ({"size": (-1,)}, "expected a tuple of at most 64 whole numbers"),
    "negative-offset": ({"offset": -1, "size": (1,)}, "at offset -1"),
    "negative-stride": ({"size": (2,), "stride": (-1,)}, "stride (-1,) is negative"),
    "size-and-stride-differ": ({"size": (3,), "stride": (1, 1)}, "size (3,), stride (1, 1)"),
    "65-dims": ({"size": (1,) * 65, "stride": (1,) * 65}, "at most 64 whole numbers"),
    "requires-grad-on-int64": ({"requires_grad": True, "kind": "LongStorage"},
                               "only Tensors of floating point dtype can require gradients"),
}


@pytest.mark.parametrize("args, says", GEOMETRY.values(), ids=GEOMETRY.keys())
def test_a_tensor_that_does_not_fit_its_storage_is_refused(args, says):
    storages = {"0": np.arange(3, dtype=np.int64).tobytes()} \
        if args.get("kind") == "LongStorage" else None
    refused(torch_zip(pkl(tensor(**args)), storages), says)


def test_an_empty_tensor_may_sit_anywhere_in_its_storage_as_in_torch():
    data = torch_zip(pkl(tensor(offset=100, size=(0, 2**40), stride=(1, 1))))
    ours, theirs = load(data), torch.load(io.BytesIO(data), weights_only=True)
    assert tuple(ours.shape) == tuple(theirs.shape) == (0, 2**40)
    assert ours.storage_offset() == theirs.storage_offset() == 100


def test_a_storage_member_shorter_than_its_claim_is_refused():
    refused(torch_zip(pkl(tensor(numel=4, size=(4,)))),
            "member archive/data/0 holds 12 bytes; its claim, torch.FloatStorage of 16 "
            "bytes, needs 16")


def test_a_huge_claimed_storage_is_refused_before_anything_is_allocated():
    data = torch_zip(pkl(tensor(numel=2**40, size=(2**40,))))
    tracemalloc.start()
    try:
        refused(data, f"storage 0 claims {4 * 2**40} bytes; the file has only {len(data)}")
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def test_one_key_claimed_as_two_storages_is_refused():
    body = b"]" + b"(" + tensor() + tensor(kind="LongStorage") + b"e"
    refused(torch_zip(pkl(body)), "storage 0 is claimed as torch.FloatStorage of 12 bytes "
                                  "on 'cpu' and as torch.LongStorage of 24 bytes")


def test_a_storage_with_no_member_is_refused():
    refused(torch_zip(pkl(tensor(key="1"))), "storage 1 has no member archive/data/1")


def test_a_bare_storage_is_refused():
    says = "storage 0 is no tensor's: kiln loads tensors, not bare storages"
    refused(torch_zip(pkl(storage())), says)
    buf = io.BytesIO()
    torch.save(torch.arange(3.0).untyped_storage(), buf)
    refused(buf.getvalue(), says)


# the zip -------------------------------------------------------------------------------------
def test_a_deflated_storage_bomb_is_refused_by_its_claim_before_it_is_inflated():
    bomb = 64 << 20
    data = torch_zip(pkl(tensor(numel=bomb // 4, size=(bomb // 4,))), {"0": bytes(bomb)},
                     deflated={"0"})
    assert len(data) < bomb // 100
    tracemalloc.start()
    try:
        refused(data, f"storage 0 claims {bomb} bytes; the file has only {len(data)}")
        assert tracemalloc.get_traced_memory()[1] < 4 << 20
    finally:
        tracemalloc.stop()


def test_a_deflated_storage_is_refused_though_its_claim_fits():
    refused(torch_zip(pkl(tensor()), deflated={"0"}), "member archive/data/0 is compressed")


def _directory_entry(data: bytes, name: str, **fields) -> bytes:
    """`data` with the central directory's crc, compress_size or file_size of member
    `name` overwritten."""
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


def test_a_data_pkl_claiming_more_than_the_bound_is_refused_before_reading():
    data = _directory_entry(torch_zip(pkl(tensor())), "archive/data.pkl", file_size=2**31,
                            compress_size=2**31)
    refused(data, f"member archive/data.pkl holds {2**31} bytes; at most "
                  f"{serialization_torch.PICKLE_MAX}")


def test_a_storage_claiming_more_bytes_than_the_file_holds_is_refused():
    data = torch_zip(pkl(tensor(numel=1000, size=(1000,))), {"0": bytes(4000)})
    data = _directory_entry(data, "archive/data/0", compress_size=4000 + 10**6)
    refused(data, "claims 1004000 bytes stored but the file has only")


def test_a_zip_naming_one_member_twice_is_refused():
    data = torch_zip(pkl(tensor()))
    out = io.BytesIO(data)
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(out, "a") as z:
        z.writestr("archive/data/0", (VALUES * 10).tobytes())
    refused(out.getvalue(), "the zip directory names member archive/data/0 twice")


def test_a_bad_crc_on_a_storage_is_noticed():
    data = _directory_entry(torch_zip(pkl(tensor())), "archive/data/0", crc=0)
    refused(data, "Bad CRC-32 for file 'archive/data/0'")


@pytest.mark.parametrize("records, says", [
    ({"version": None}, "its version record is None"),
    ({"version": b"99\n"}, "its version record is b'99\\n'"),
    ({"byteorder": b"middle"}, "its byteorder record is b'middle'"),
])
def test_a_record_torch_load_needs_missing_or_unreadable_is_refused(records, says):
    refused(torch_zip(pkl(tensor()), records=records), says)


def test_a_big_endian_file_loads_its_numbers_swapped_as_torch_does():
    data = torch_zip(pkl(tensor()), {"0": VALUES.astype(">f4").tobytes()},
                     records={"byteorder": b"big"})
    assert torch.load(io.BytesIO(data), weights_only=True).tolist() == [1.0, 2.0, 3.0]
    assert load(data).tolist() == [1.0, 2.0, 3.0]


def test_a_torchscript_archive_is_named():
    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Linear(1, 1)), buf)
    refused(buf.getvalue(), "is a TorchScript archive (torch.jit.save)")


# the pickle ----------------------------------------------------------------------------------
FORBIDDEN = {  # id: (data.pkl body, the error's class, what it says)
    "os.system": (call(g("os", "system"), s("echo pwned")), WeightsOnlyError,
                  "GLOBAL os.system, which kiln does not load: kiln reads weights only"),
    "eval": (call(g("__builtin__", "eval"), s("1")), WeightsOnlyError, "GLOBAL builtins.eval"),
    "getattr": (g("__builtin__", "getattr"), WeightsOnlyError, "GLOBAL builtins.getattr"),
    "reduce-a-string": (s("os") + b")R", WeightsOnlyError, "calls str 'os'"),
    "reduce-a-dtype": (g("torch", "float32") + b")R", WeightsOnlyError, "calls DType"),
    "ordered-dict-of-a-list": (call(g("collections", "OrderedDict"), b"]"), CorruptFileError,
                               "OrderedDict of ([],); pickle makes one of nothing"),
    "inst": (b"(ios\nsystem\n", WeightsOnlyError, "opcode INST"),
    "obj": (b"(" + g("collections", "OrderedDict") + b"o", WeightsOnlyError, "opcode OBJ"),
    "stack-global": (s("os") + s("system") + b"\x93", WeightsOnlyError, "opcode STACK_GLOBAL"),
    "newobj": (g("collections", "OrderedDict") + b")\x81", WeightsOnlyError, "opcode NEWOBJ"),
    "ext1": (b"\x82\x01", WeightsOnlyError, "opcode EXT1"),
    "empty-set": (b"\x8f", WeightsOnlyError, "opcode EMPTY_SET"),
    "build-a-list": (b"]}b", WeightsOnlyError, "BUILD of a list"),
    "append-to-a-dict": (b"}Na", WeightsOnlyError, "APPEND to a dict"),
    "setitem-on-a-list": (b"]NNs", WeightsOnlyError, "SETITEM on a list"),
    "persistent-module": (tup(s("module"), s("x")) + b"Q", WeightsOnlyError,
                          "only storages are loaded"),
    "storage-called": (g("torch", "FloatStorage") + b")R", WeightsOnlyError,
                       "calls StorageKind"),
    "tensor-subclass-type": (call(g("torch._tensor", "_rebuild_from_type_v2"),
                                  g("torch._utils", "_rebuild_tensor_v2"),
                                  g("collections", "OrderedDict"), b")", b"}"),
                             WeightsOnlyError, "rebuilds collections.OrderedDict"),
    "tensor-subclass-of-a-counter": (call(g("torch._tensor", "_rebuild_from_type_v2"),
                                          g("collections", "Counter"), g("torch", "Tensor"),
                                          b")", b"}"),
                                     WeightsOnlyError, "with collections.Counter"),
    "no-opcode": (b"\xff", CorruptFileError, "byte 0xff is no pickle opcode"),
    "string-past-the-end": (b"X\xff\xff\xff\x7f", CorruptFileError,
                            "needs 2147483647 bytes where"),
    "two-objects": (b"NN", CorruptFileError, "STOP leaves 2 objects"),
    "memo-unwritten": (b"h\x05", CorruptFileError, "memo 5 is read before it is written"),
    "tuple-without-mark": (b"Nt", CorruptFileError, "closes a MARK that was never set"),
    "global-without-newline": (b"cos system", CorruptFileError, "does not end in a newline"),
    "sparse": (g("torch._utils", "_rebuild_sparse_tensor"), CorruptFileError,
               "holds sparse tensors, which kiln lacks"),
    "hooks": (call(g("torch._utils", "_rebuild_tensor_v2"), storage(), i(0), tup(i(3)),
                   tup(i(1)), b"\x89", b"}" + s("h") + b"Ns"), CorruptFileError,
              "backward hooks {'h': None}; kiln loads none"),
    "tensor-attributes": (call(g("torch._tensor", "_rebuild_from_type_v2"),
                               g("torch._utils", "_rebuild_tensor_v2"), g("torch", "Tensor"),
                               tup(storage(), i(0), tup(i(3)), tup(i(1)), b"\x89",
                                   EMPTY_HOOKS), b"}" + s("foo") + b"Ns"),
                          CorruptFileError, "a tensor with Python attributes {'foo': None}"),
}


@pytest.mark.parametrize("body, error, says", FORBIDDEN.values(), ids=FORBIDDEN.keys())
def test_a_pickle_outside_the_weights_only_rules_is_refused_naming_the_problem(body, error,
                                                                               says):
    caught = refused(torch_zip(pkl(body)), says, error)
    assert "archive/data.pkl, opcode at byte" in str(caught)


def test_a_pickle_without_its_stop_is_refused():
    refused(torch_zip(b"\x80\x02N"), "needs 1 bytes where 0 remain")


def test_a_python_pickle_in_place_of_data_pkl_is_refused_at_its_frame():
    refused(torch_zip(pickle.dumps({"w": [1.0]}, protocol=4)), "opcode FRAME",
            WeightsOnlyError)


def _copies(n_items: int, copies: int) -> bytes:
    """A pickle of a dict of `n_items` and a list of `copies` Counter copies of it, each
    copy in 6 bytes: (dict, [Counter(dict), Counter(dict), ...])."""
    items = b"(" + b"".join(i(k) + b"N" for k in range(n_items)) + b"u"
    first = g("collections", "Counter") + b"q\x01h\x00\x85R"
    return pkl(b"(}q\x00" + items + b"](" + first + b"h\x01h\x00\x85R" * (copies - 1) +
               b"et")


def test_copying_a_memoised_object_again_and_again_exhausts_the_budget_quickly():
    start = time.perf_counter()
    refused(torch_zip(_copies(20_000, 20_000)), "builds more objects than its length")
    assert time.perf_counter() - start < 2


def test_a_pickle_of_legitimate_shape_stays_far_inside_the_budget(monkeypatch):
    """A state dict of 2,000 tensors loads with no fixed allowance, 64 bytes a pickle byte."""
    sd = {f"layer{k}.weight": torch.ones(2) for k in range(2000)}
    buf = io.BytesIO()
    torch.save(sd, buf)
    monkeypatch.setattr(serialization_torch, "_BUDGET", (0, 64))
    assert len(load(buf.getvalue())) == 2000


def test_colliding_int_keys_are_refused_before_building_the_dict_turns_quadratic():
    collide = [k * (2**61 - 1) for k in range(1, 10)]  # all hash to 0
    assert len({hash(k) for k in collide}) == 1
    body = b"}(" + b"".join(i(k) + b"N" for k in collide) + b"u"
    refused(torch_zip(pkl(body)), "more than 8 distinct keys share the hash 0")
    assert len(load(torch_zip(pkl(b"}(" + b"".join(i(k) + b"N" for k in collide[:8]) +
                                  b"u")))) == 8
    refused(torch_zip(pkl(call(g("__builtin__", "set"), b"](" + b"".join(
        map(i, collide)) + b"e"))), "share the hash 0")


def test_a_deeply_nested_tuple_key_is_refused_before_it_is_hashed():
    """Each level holds the one below twice: hashing the top would take 2**60 steps."""
    nest = b"K\x01" + b"".join(b"q%ch%c\x86" % (k, k) for k in range(60))
    refused(torch_zip(pkl(b"}" + nest + b"Ns")), "a tuple key holds at most 64 items and no "
                                                 "tuple")


def test_a_pickle_nested_a_hundred_thousand_deep_loads_without_recursion():
    loaded = load(torch_zip(pkl(b"N" + b"\x85" * 100_000)))
    for _ in range(100_000):
        loaded = loaded[0]
    assert loaded is None


# the legacy layout ---------------------------------------------------------------------------
def legacy(body: bytes, keys=("0",), storages=None) -> bytes:
    head = b"".join(pickle.dumps(x, protocol=2) for x in (
        serialization_torch._LEGACY_MAGIC, serialization_torch._LEGACY_PROTOCOL,
        {"protocol_version": 1001, "little_endian": True}))
    stored = storages if storages is not None else [(3, VALUES.tobytes())]
    return head + pkl(body) + pickle.dumps(list(keys), protocol=2) + b"".join(
        struct.pack("<q", n) + raw for n, raw in stored)


def legacy_tensor(**args) -> bytes:
    return tensor(legacy=True, **args)


def test_the_assembled_legacy_file_loads_in_torch_and_kiln_alike():
    data = legacy(legacy_tensor())
    assert torch.load(io.BytesIO(data), weights_only=True).tolist() == [1.0, 2.0, 3.0]
    assert load(data).tolist() == [1.0, 2.0, 3.0]


LEGACY = {  # id: (legacy(...) arguments, what the error says)
    "count-differs": ({"storages": [(4, VALUES.tobytes())]},
                      "stored with element count b'\\x04"),
    "truncated": ({"storages": [(3, VALUES.tobytes()[:-1])]}, "runs past the end"),
    "trailing-bytes": ({"storages": [(3, VALUES.tobytes() + b"x")]},
                       "1 bytes follow the last storage"),
    "key-missing": ({"keys": (), "storages": []}, "missing: 0"),
    "key-twice": ({"keys": ("0", "0"), "storages": [(3, VALUES.tobytes())] * 2},
                  "each once"),
    "keys-not-strings": ({"keys": (0,)}, "not a list of strings"),
}


@pytest.mark.parametrize("args, says", LEGACY.values(), ids=LEGACY.keys())
def test_a_legacy_file_whose_storages_do_not_match_its_pickle_is_refused(args, says):
    refused(legacy(legacy_tensor(), **args), says)


def test_a_legacy_file_claiming_a_huge_storage_is_refused_before_allocating():
    data = legacy(legacy_tensor(numel=2**40, size=(2**40,)))
    tracemalloc.start()
    try:
        refused(data, f"storage 0 claims {4 * 2**40} bytes; the file has only")
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def test_a_pickle_that_is_not_pytorchs_is_named():
    refused(pickle.dumps(12345, protocol=2) + b"rest", "not PyTorch's magic number")
    refused(pickle.dumps({"w": [1.0]}, protocol=4), "opcode FRAME", WeightsOnlyError)
