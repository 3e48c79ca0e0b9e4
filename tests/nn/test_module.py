"""nn.Module behaviour: registration, traversal, modes, state dicts, hooks, repr."""
import numpy as np
import pytest

import eager
from eager import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(4, 2, bias=False)
        self.register_buffer("steps", eager.zeros(1))
        self.register_buffer("scratch", eager.zeros(2), persistent=False)
        self.scale = 2.0

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_attributes_register_parameters_buffers_and_modules():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight"]
    assert [n for n, _ in net.named_buffers()] == ["steps", "scratch"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert net.fc2.bias is None
    assert net.scale == 2.0 and "scale" not in net._parameters
    assert all(p.requires_grad and p.is_leaf for p in net.parameters())


def test_shared_parameter_listed_once():
    a = nn.Linear(2, 2)
    seq = nn.Sequential(a, a)
    assert len(list(seq.parameters())) == 2


def test_train_eval_propagates():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())


def test_zero_grad_sets_none_or_zero():
    net = Net()
    net(eager.randn(5, 3)).sum().backward()
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and float(p.grad.abs().sum()) == 0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_state_dict_round_trip_and_persistence():
    a, b = Net(), Net()
    sd = a.state_dict()
    assert list(sd) == ["steps", "fc1.weight", "fc1.bias", "fc2.weight"]  # own state first
    assert not sd["fc1.weight"].requires_grad
    b.load_state_dict(sd)
    x = eager.randn(4, 3)
    eager.testing.assert_close(a(x), b(x))


def test_load_state_dict_errors_name_the_keys():
    net = Net()
    sd = net.state_dict()
    del sd["fc1.bias"]
    sd["extra"] = eager.zeros(1)
    with pytest.raises(RuntimeError) as e:
        net.load_state_dict(sd)
    assert 'Missing key(s) in state_dict: "fc1.bias"' in str(e.value)
    assert 'Unexpected key(s) in state_dict: "extra"' in str(e.value)
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc1.bias"] and result.unexpected_keys == ["extra"]


def test_load_state_dict_shape_mismatch():
    net = nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match=r"size mismatch for weight: copying a param with "
                                           r"shape eager.Size\(\[2, 2\]\)"):
        net.load_state_dict({"weight": eager.zeros(2, 2), "bias": eager.zeros(2)})


def test_to_dtype_converts_floating_tensors_only():
    net = Net()
    net.register_buffer("counts", eager.zeros(3, dtype=eager.int64))
    net.to(eager.float64)
    assert all(p.dtype is eager.float64 for p in net.parameters())
    assert net.counts.dtype is eager.int64
    assert isinstance(net.fc1.weight, nn.Parameter)
    assert net(eager.randn(2, 3, dtype=eager.float64)).dtype is eager.float64


def test_to_cuda_raises_clearly():
    with pytest.raises(RuntimeError, match="CUDA backend is not available"):
        nn.Linear(2, 2).to("cuda")


def test_forward_hooks_and_removal():
    net = nn.Linear(2, 2)
    seen = []
    handle = net.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    pre = net.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    out = net(eager.ones(1, 2))
    eager.testing.assert_close(out, net.bias.detach().unsqueeze(0))
    assert seen == [eager.Size([1, 2])]
    handle.remove()
    pre.remove()
    net(eager.ones(1, 2))
    assert len(seen) == 1


def test_repr_matches_pytorch_layout():
    net = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.LayerNorm(4), nn.Dropout(0.1))
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Linear(in_features=3, out_features=4, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)\n"
        "  (3): Dropout(p=0.1, inplace=False)\n"
        ")")


def test_containers():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3 and len(list(layers.parameters())) == 6
    d = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()})
    assert list(d.keys()) == ["a", "b"] and isinstance(d["b"], nn.Tanh)
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    assert isinstance(seq[-1], nn.ReLU) and len(seq[:1]) == 1


def test_assigning_non_parameter_to_parameter_slot_errors():
    net = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign"):
        net.weight = eager.zeros(2, 2)


def test_parameter_shares_memory_with_data():
    data = eager.zeros(3)
    p = nn.Parameter(data)
    with eager.no_grad():
        p.add_(1.0)
    assert data.tolist() == [1.0, 1.0, 1.0]
    assert repr(p).startswith("Parameter containing:\ntensor(")


def test_wrong_input_shape_names_the_layer_and_both_shapes():
    layer = nn.Linear(4, 3)
    with pytest.raises(RuntimeError, match=r"Linear\(in_features=4, out_features=3, bias=True\)"
                                           r": expected input with last dimension 4, got shape "
                                           r"\[2, 5\]"):
        layer(eager.ones(2, 5))


def test_to_keeps_the_parameter_objects_an_optimizer_holds():
    net = nn.Linear(3, 2)
    opt = eager.optim.SGD(net.parameters(), lr=0.1)
    before = [id(p) for p in net.parameters()]
    net.double()
    assert [id(p) for p in net.parameters()] == before
    loss = net(eager.ones(4, 3, dtype=eager.float64)).sum()
    loss.backward()
    weight = net.weight.detach().clone()
    opt.step()
    assert net.weight.dtype is eager.float64
    assert not np.allclose(net.weight.detach().numpy(), weight.numpy())  # the step landed
