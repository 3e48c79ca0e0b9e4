"""Module lookups and state as PyTorch has them: nn.Buffer, get_submodule / get_parameter /
get_buffer, and load_state_dict's (missing_keys, unexpected_keys) named tuple (safetensors'
load_model unpacks it)."""
import pytest

import eager
from eager import nn

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


def _model(lib):
    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = lib.nn.Sequential(lib.nn.Linear(2, 3), lib.nn.ReLU())
            self.scale = lib.nn.Buffer(lib.ones(3))
            self.cache = lib.nn.Buffer(lib.zeros(1, requires_grad=True), persistent=False)
            self.note = lib.zeros(1)  # a plain tensor attribute: no buffer
    return Net()


def test_a_buffer_assigned_to_a_module_is_registered_with_its_persistence():
    ours, theirs = _model(eager), _model(torch)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert isinstance(ours.scale, nn.Buffer) and not isinstance(eager.ones(1), nn.Buffer)
    assert type(ours.scale) is eager.Tensor  # as PyTorch's: a Tensor, marked
    assert ours.cache.requires_grad == theirs.cache.requires_grad
    ours.scale = eager.full((3,), 2.0)  # a plain tensor replaces a buffer: still one
    theirs.scale = torch.full((3,), 2.0)
    assert ours.state_dict()["scale"].tolist() == theirs.state_dict()["scale"].tolist()
    with pytest.raises(TypeError, match="cannot assign 'int' as buffer 'scale'"):
        ours.scale = 3


@pytest.mark.parametrize("kind, target", [
    ("submodule", ""), ("submodule", "body"), ("submodule", "body.0"),
    ("submodule", "body.1.weight"), ("submodule", "body.7"), ("submodule", "scale"),
    ("parameter", "body.0.weight"), ("parameter", "body.0.nothing"), ("parameter", "scale"),
    ("buffer", "scale"), ("buffer", "cache"), ("buffer", "body.0.bias"), ("buffer", "note")])
def test_get_submodule_parameter_and_buffer_find_what_pytorch_finds(kind, target):
    ours, theirs = _model(eager), _model(torch)

    def look(model):
        try:
            found = getattr(model, f"get_{kind}")(target)
        except AttributeError as e:
            return "AttributeError", str(e)
        return type(found).__name__, tuple(found.shape) if hasattr(found, "shape") else None
    assert look(ours) == look(theirs)


def test_load_state_dict_returns_the_missing_and_unexpected_keys_as_a_named_tuple():
    ours, theirs = _model(eager), _model(torch)
    state = {"body.0.weight": [[1.0, 2.0]] * 3, "extra": [1.0]}
    got = ours.load_state_dict({k: eager.tensor(v) for k, v in state.items()}, strict=False)
    want = theirs.load_state_dict({k: torch.tensor(v) for k, v in state.items()}, strict=False)
    missing, unexpected = got  # safetensors' load_model unpacks it
    assert (missing, unexpected) == tuple(want)
    assert got.missing_keys == want.missing_keys and repr(got) == repr(want)
    assert repr(ours.load_state_dict(ours.state_dict())) == "<All keys matched successfully>"
