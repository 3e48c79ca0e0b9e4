"""PyTorch's checkpoint files: torch.save -> eager.load (the zip layout and the legacy one)
and eager.save(format="torch") -> torch.load(weights_only=True), for tensors of every
layout and dtype, views sharing storage, Python values, module and optimizer state dicts,
map_location, and pickles asking for more than weights."""
import collections
import io
import math
import pickle
import zipfile

import numpy as np
import pytest
from torch_files import LAYOUTS, kiln_saved, same, torch_saved

import eager
from eager.serialization import CorruptFileError, WeightsOnlyError
from eager.serialization_torch_globals import KILN_DTYPES
from eager.tensor import ALIGN

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

def torch_sample():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "contiguous": torch.linspace(-1, 1, 7),
        "transposed": base.t(), "strided": base[1:, ::2], "row": base[2],
        "expanded": torch.tensor([1.5, 2.5]).expand(3, 2),
        "zero-d": torch.tensor(math.pi, dtype=torch.float64),
        "empty": torch.zeros(0, 3), "empty-view": base[:, 6:],
        "leaf": torch.ones(2, requires_grad=True),
        "parameter": torch.nn.Parameter(torch.full((2, 2), 0.5)),
        "frozen": torch.nn.Parameter(torch.ones(1), requires_grad=False),
        "ints": torch.tensor([1, -2, 2**40]), "int32": torch.tensor([7, -8], dtype=torch.int32),
        "bools": torch.tensor([[True, False]]),
        "halves": torch.tensor([0.5, 65504.0, -0.0], dtype=torch.float16),
        "specials": torch.tensor([math.inf, -math.inf, math.nan, -0.0, 5e-324],
                                 dtype=torch.float64),
        "meta": torch.empty(2, 3, device="meta"),
        "size": torch.Size([2, 3]), "device": torch.device("cpu"), "dtype": torch.float16,
        "values": [None, True, 3, -2**31, 2**70, 2.5, -math.inf, "text", "h\u00e9\U0001F600",
                   b"\x00\xffbytes", 1 + 2j, {1, 2}, (), (1,), (1, 2, 3, 4)],
        7: collections.OrderedDict([("b", 1), ("a", 2)]),
        "nested": {"deep": [(torch.ones(1), {"x": torch.zeros(2, dtype=torch.int64)})]},
    }


@pytest.mark.parametrize("layout", LAYOUTS)
def test_torch_files_load_with_every_value_layout_and_geometry(layout):
    obj = torch_sample()
    if layout == "legacy":
        del obj["meta"]  # (the legacy writer cannot save a meta tensor)
    same(eager.load(torch_saved(obj, layout)), obj)


def test_same_notices_differences():
    obj = torch_sample()
    loaded = eager.load(torch_saved(obj))
    for change in [lambda o: o["row"].add_(1), lambda o: o.__setitem__("values", []),
                   lambda o: o.__setitem__("strided", o["strided"].contiguous()),
                   lambda o: o["leaf"].requires_grad_(False)]:
        other = torch_sample()
        change(other)
        with pytest.raises(AssertionError):
            same(loaded, other)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_views_of_one_torch_storage_are_views_of_one_kiln_storage(layout):
    base = torch.arange(12.0)
    loaded = eager.load(torch_saved({"all": base, "t": base.view(3, 4).t(), "tail": base[8:],
                                     "other": torch.arange(3.0)}, layout))
    storages = {name: t._storage for name, t in loaded.items()}
    assert storages["all"] is storages["t"] is storages["tail"]
    assert storages["other"] is not storages["all"]
    loaded["all"].mul_(10)
    assert loaded["tail"].tolist() == [80.0, 90.0, 100.0, 110.0]
    assert loaded["t"][1].tolist() == [10.0, 50.0, 90.0]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_parameter_shares_memory_with_the_tensor_it_was_saved_beside(layout):
    p = torch.nn.Parameter(torch.ones(3))
    loaded = eager.load(torch_saved([p, p.data[1:]], layout))
    assert isinstance(loaded[0], eager.nn.Parameter) and loaded[0].requires_grad
    assert loaded[0]._storage is loaded[1]._storage


def test_one_tensor_saved_twice_loads_as_one_object():
    t = torch.ones(2)
    loaded = eager.load(torch_saved({"a": t, "b": [t]}))
    assert loaded["a"] is loaded["b"][0]


@pytest.mark.parametrize("name", ["bool", "uint8", "int8", "int16", "int32", "int64",
                                  "float16", "bfloat16", "float32", "float64", "complex64",
                                  "uint16"])
def test_a_dtype_loads_if_kiln_has_it_and_is_named_if_not(name):
    t = torch.tensor([0, 1, 3], dtype=getattr(torch, name))
    buf = torch_saved({"t": t})
    if name not in KILN_DTYPES:
        with pytest.raises(CorruptFileError, match=rf"tensors of {name}\b.*kiln lacks"):
            eager.load(buf)
        return
    loaded = eager.load(buf)["t"]
    assert loaded.dtype.name == name and loaded.tolist() == t.tolist()


def test_storages_land_in_the_tensors_memory_aligned():
    """A storage is read once, into memory its tensors view: no copy per tensor, and
    large ones start on a cache line as kiln's other tensors do."""
    base = torch.arange(10_000.0)
    loaded = eager.load(torch_saved([base, base[5000:]]))
    whole, half = loaded
    assert half.data_ptr() == whole.data_ptr() + 5000 * 4
    assert whole.data_ptr() % ALIGN == 0


def test_a_state_dict_keeps_its_metadata():
    sd = torch.nn.BatchNorm1d(3).state_dict()
    loaded = eager.load(torch_saved(sd))
    assert type(loaded) is collections.OrderedDict and loaded._metadata == sd._metadata
    same(loaded, sd)


class TorchNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.norm = torch.nn.LayerNorm(3 * 4 * 4)
        self.head = torch.nn.Linear(3 * 4 * 4, 5)

    def forward(self, x):
        return self.head(self.norm(torch.relu(self.conv(x)).flatten(1)))


class KilnNet(eager.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = eager.nn.Conv2d(2, 3, 3, padding=1)
        self.norm = eager.nn.LayerNorm(3 * 4 * 4)
        self.head = eager.nn.Linear(3 * 4 * 4, 5)

    def forward(self, x):
        return self.head(self.norm(eager.relu(self.conv(x)).flatten(1)))


def test_a_torch_modules_state_dict_loads_into_kilns_model_of_the_same_architecture():
    torch.manual_seed(0)
    net, x = TorchNet(), torch.randn(2, 2, 4, 4)
    ours = KilnNet()
    ours.load_state_dict(eager.load(torch_saved(net.state_dict())))
    np.testing.assert_allclose(ours(eager.tensor(x.numpy())).detach().numpy(),
                               net(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_kiln_modules_state_dict_loads_into_torchs_model_of_the_same_architecture():
    eager.manual_seed(0)
    ours, net = KilnNet(), TorchNet()
    net.load_state_dict(torch.load(kiln_saved(ours.state_dict()), weights_only=True))
    x = np.random.default_rng(0).standard_normal((2, 2, 4, 4), dtype=np.float32)
    np.testing.assert_allclose(net(torch.from_numpy(x)).detach().numpy(),
                               ours(eager.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def _adam_steps(lib, net, opt, steps, x):
    for _ in range(steps):
        opt.zero_grad()
        (net(x) ** 2).sum().backward()
        opt.step()


def test_a_torch_optimizer_state_dict_loads_as_torch_holds_it():
    torch.manual_seed(0)
    net, x = TorchNet(), torch.randn(2, 2, 4, 4)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    _adam_steps(torch, net, opt, 2, x)
    same(eager.load(torch_saved(opt.state_dict())), opt.state_dict())


@pytest.mark.xfail(strict=True, raises=TypeError, reason=(
    "eager/optim: kiln's Adam keeps `step` as a Python int, and load_state_dict keeps "
    "torch's 0-d step tensor, which the numpy update then multiplies into an ndarray "
    "(eager/optim/adam.py, _numpy_update)"))
def test_a_torch_optimizer_state_dict_continues_training_in_kiln_as_in_torch():
    torch.manual_seed(0)
    net, x = TorchNet(), torch.randn(2, 2, 4, 4)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    _adam_steps(torch, net, opt, 2, x)
    ours = KilnNet()
    ours.load_state_dict(eager.load(torch_saved(net.state_dict())))
    our_opt = eager.optim.Adam(ours.parameters(), lr=0.01)
    our_opt.load_state_dict(eager.load(torch_saved(opt.state_dict())))
    _adam_steps(torch, net, opt, 1, x)
    _adam_steps(eager, ours, our_opt, 1, eager.tensor(x.numpy()))
    for (name, p), q in zip(net.named_parameters(), ours.parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)


def test_a_kiln_optimizer_state_dict_continues_training_in_torch_as_in_kiln():
    eager.manual_seed(0)
    ours, x = KilnNet(), np.random.default_rng(1).standard_normal((2, 2, 4, 4),
                                                                   dtype=np.float32)
    our_opt = eager.optim.Adam(ours.parameters(), lr=0.01)
    _adam_steps(eager, ours, our_opt, 2, eager.tensor(x))
    net = TorchNet()
    net.load_state_dict(torch.load(kiln_saved(ours.state_dict()), weights_only=True))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    opt.load_state_dict(torch.load(kiln_saved(our_opt.state_dict()), weights_only=True))
    _adam_steps(eager, ours, our_opt, 1, eager.tensor(x))
    _adam_steps(torch, net, opt, 1, torch.from_numpy(x))
    for (name, p), q in zip(net.named_parameters(), ours.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)


def kiln_sample():
    base = eager.arange(24.0).reshape(4, 6)
    meta = collections.OrderedDict(w=base)
    meta._metadata = {"": {"version": 1}}
    return {
        "contiguous": eager.linspace(-1, 1, 7), "transposed": base.t(),
        "strided": base[1:, ::2], "row": base[2], "expanded": eager.tensor([1.5]).expand(3, 2),
        "zero-d": eager.tensor(math.pi, dtype=eager.float64), "empty": eager.zeros(0, 3),
        "leaf": eager.ones(2, requires_grad=True),
        "parameter": eager.nn.Parameter(eager.full((2, 2), 0.5)),
        **{f"dtype {d.name}": eager.tensor([0, 1, 1], dtype=d) for d in KILN_DTYPES.values()},
        "meta": eager.empty(2, 3, device="meta"), "size": eager.Size([2, 3]),
        "device": eager.device("cpu"), "dtype": eager.float16, "state dict": meta,
        "values": [None, True, 3, -2**31, 2**70, 2.5, math.nan, "h\u00e9\U0001F600", b"",
                   b"\x00\xff", 1 + 2j, {1, 2}, (), (1,), (1, 2, 3, 4)],
        7: {"nested": [(eager.ones(1), {"x": eager.zeros(2, dtype=eager.int64)})]},
    }


def test_kilns_torch_files_load_in_torch_with_every_value_layout_and_geometry():
    obj = kiln_sample()
    same(obj, torch.load(kiln_saved(obj), weights_only=True))


def test_kilns_torch_files_load_back_in_kiln_as_in_torch():
    buf = kiln_saved(kiln_sample())
    same(eager.load(buf), torch.load(io.BytesIO(buf.getvalue()), weights_only=True))


def test_views_sharing_kiln_memory_share_one_storage_in_torch():
    base = eager.arange(12.0)
    loaded = torch.load(kiln_saved([base, base.reshape(3, 4).t(), base[8:]]),
                        weights_only=True)
    assert len({t.untyped_storage().data_ptr() for t in loaded}) == 1
    loaded[0].mul_(10)
    assert loaded[2].tolist() == [80.0, 90.0, 100.0, 110.0]


def test_kilns_torch_files_map_into_memory_in_torch(tmp_path):
    """torch.load(mmap=True) finds each storage from the zip's own offsets."""
    obj = {"a": eager.arange(100.0), "b": eager.ones(3, dtype=eager.int32)}
    eager.save(obj, tmp_path / "m.pt", format="torch")
    same(obj, torch.load(tmp_path / "m.pt", mmap=True, weights_only=True))


@pytest.mark.parametrize("obj, type_name", [
    (np.ones(3), "ndarray"), ({"a": [object()]}, "object"), (eager.nn.Linear(1, 1), "Linear"),
    (np.float64(1.0), "float64"), (2**2100, "int of 263 bytes"),
])
def test_what_pytorch_cannot_read_is_not_saved_for_it(obj, type_name, tmp_path):
    with pytest.raises(TypeError, match=type_name):
        eager.save(obj, tmp_path / "x.pt", format="torch")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="'kiln' or 'torch', not 'pickle'"):
        eager.save({}, io.BytesIO(), format="pickle")


def test_kilns_own_format_stays_the_default():
    buf = io.BytesIO()
    eager.save({"w": eager.ones(2)}, buf)
    assert b"manifest.json" in buf.getvalue() and b"data.pkl" not in buf.getvalue()


def _rewritten(data: bytes, location: str) -> io.BytesIO:
    """`data`, a torch zip of one tensor, with its storage saved on `location`."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            content = src.read(name)
            if name.endswith("data.pkl"):
                content = content.replace(b"X\x03\x00\x00\x00cpu", b"X" + len(
                    location).to_bytes(4, "little") + location.encode())
            dst.writestr(name, content)
    out.seek(0)
    return out


@pytest.mark.parametrize("where", ["cpu", eager.device("cpu"), {"cuda:0": "cpu"}])
def test_map_location_puts_storages_saved_on_a_gpu_on_the_cpu(where):
    loaded = eager.load(_rewritten(torch_saved({"w": torch.arange(3.0)}).getvalue(),
                                   "cuda:0"), map_location=where)
    assert loaded["w"].device.type == "cpu" and loaded["w"].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("where", ["meta", {"cpu": "meta"}])
def test_map_location_meta_keeps_shapes_and_sharing(where):
    base = torch.arange(6.0)
    loaded = eager.load(torch_saved([base, base[2:]]), map_location=where)
    assert [t.device.type for t in loaded] == ["meta", "meta"]
    assert [tuple(t.shape) for t in loaded] == [(6,), (4,)]
    assert loaded[0]._storage is loaded[1]._storage


def test_a_storage_saved_on_a_gpu_goes_to_the_gpu_without_map_location():
    buf = _rewritten(torch_saved({"w": torch.arange(3.0)}).getvalue(), "cuda:0")
    if eager.cuda.is_available():
        assert eager.load(buf)["w"].device.type == "cuda"
        return
    with pytest.raises(Exception) as caught:
        eager.load(buf)
    assert not isinstance(caught.value, CorruptFileError)


@pytest.fixture
def kiln_gpu():
    if not eager.cuda.is_available():
        pytest.skip("no usable GPU: eager.cuda.is_available() is False")


@pytest.mark.gpu
def test_on_a_gpu_map_location_cuda_moves_each_storage_once_and_keeps_views(kiln_gpu):
    base = torch.arange(12.0)
    loaded = eager.load(torch_saved([base, base.view(3, 4).t(), base[8:]]),
                        map_location="cuda")
    assert [t.device.type for t in loaded] == ["cuda"] * 3
    assert loaded[0]._storage is loaded[1]._storage is loaded[2]._storage
    for t, ref in zip(loaded, [base, base.view(3, 4).t(), base[8:]]):
        assert (tuple(t.shape), t.stride(), t.storage_offset()) == \
            (tuple(ref.shape), ref.stride(), ref.storage_offset())
        np.testing.assert_array_equal(t.cpu().numpy(), ref.numpy())


@pytest.mark.gpu
def test_on_a_gpu_a_cuda_tensor_is_saved_for_torch_as_its_own_elements(kiln_gpu):
    x = eager.arange(12.0).reshape(3, 4).to("cuda").t()
    loaded = torch.load(kiln_saved({"x": x}), weights_only=True, map_location="cpu")
    np.testing.assert_array_equal(loaded["x"].numpy(), x.cpu().numpy())


def test_a_location_kiln_does_not_know_needs_map_location():
    data = torch_saved({"w": torch.arange(3.0)}).getvalue()
    with pytest.raises(CorruptFileError, match="saved on 'xpu:1', not a device kiln knows"):
        eager.load(_rewritten(data, "xpu:1"))
    assert eager.load(_rewritten(data, "xpu:1"), map_location="cpu")["w"].tolist() == \
        [0.0, 1.0, 2.0]


def test_a_map_location_naming_no_device_is_the_callers_error_not_the_files():
    for where in ["no-such-device", {"cpu": "no-such-device"}]:
        with pytest.raises(RuntimeError) as caught:
            eager.load(torch_saved({"w": torch.ones(1)}), map_location=where)
        assert not isinstance(caught.value, CorruptFileError)


def test_map_location_as_a_function_is_refused_as_kiln_takes_none():
    with pytest.raises(TypeError, match="no function"):
        eager.load(torch_saved({"w": torch.ones(1)}), map_location=lambda s, loc: s)


_ran = []


def _side_effect(*args):
    _ran.append(args)
    return "ran"


class Payload:
    def __reduce__(self):
        return _side_effect, ("pwned",)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("obj, global_name", [
    ({"f": Payload()}, f"{__name__}._side_effect"),
    ({"cls": collections.UserDict}, "collections.UserDict"),
    ({"call": print}, "builtins.print"),
])
def test_a_pickle_asking_for_a_global_is_refused_naming_it_and_never_run(layout, obj,
                                                                         global_name):
    with pytest.raises(WeightsOnlyError, match=rf"GLOBAL {global_name}\b.*weights only"):
        eager.load(torch_saved(obj, layout))
    with pytest.raises(pickle.UnpicklingError):  # as PyTorch raises it
        eager.load(torch_saved(obj, layout))
    with pytest.raises(pickle.UnpicklingError):  # PyTorch refuses it too
        torch.load(torch_saved(obj, layout), weights_only=True)
    assert _ran == []


def test_weights_only_false_still_reads_weights_only():
    with pytest.raises(WeightsOnlyError):
        eager.load(torch_saved({"f": Payload()}), weights_only=False)
    assert _ran == []
