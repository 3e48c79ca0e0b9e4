"""Layers: default initialisation against PyTorch's documented distributions (checked
statistically, fixed seeds), forward against numpy and nn.functional, Embedding's
padding row, the containers' indexing, and reprs against PyTorch's."""
import math
from collections import OrderedDict

import numpy as np
import pytest

import eager
from eager import nn
from eager.nn import functional as F
from nn_stats import ks_limit, ks_statistic, normal_cdf, uniform_cdf


@pytest.mark.parametrize("fan_in, fan_out", [(64, 300), (300, 40), (7, 2000)])
def test_linear_default_init_is_uniform_with_bound_one_over_sqrt_fan_in(fan_in, fan_out):
    eager.manual_seed(fan_in)
    layer = nn.Linear(fan_in, fan_out)
    bound = 1 / math.sqrt(fan_in)
    for p in (layer.weight, layer.bias):
        values = p.detach().numpy()
        assert np.abs(values).max() <= bound * (1 + 1e-7)  # float32 rounding
        assert ks_statistic(values, uniform_cdf(bound)) < ks_limit(values.size)
    assert layer.weight.shape == (fan_out, fan_in) and layer.weight.dtype is eager.float32


def test_linear_init_rejects_a_wrong_bound():
    """The statistical check has power: a bound off by 10% is caught."""
    eager.manual_seed(0)
    values = nn.Linear(64, 300).weight.detach().numpy()
    assert ks_statistic(values, uniform_cdf(1.1 / 8)) > ks_limit(values.size)
    assert ks_statistic(values, uniform_cdf(0.9 / 8)) > ks_limit(values.size)


def test_linear_init_follows_the_seed():
    eager.manual_seed(3)
    a = nn.Linear(4, 5).weight.detach().numpy()
    eager.manual_seed(3)
    np.testing.assert_array_equal(nn.Linear(4, 5).weight.detach().numpy(), a)
    assert not np.array_equal(nn.Linear(4, 5).weight.detach().numpy(), a)


def test_embedding_default_init_is_standard_normal():
    eager.manual_seed(0)
    values = nn.Embedding(1000, 20).weight.detach().numpy()
    assert ks_statistic(values, normal_cdf(1.0)) < ks_limit(values.size)
    assert ks_statistic(values, normal_cdf(1.05)) > ks_limit(values.size)


def test_layer_norm_default_init_is_ones_and_zeros():
    ln = nn.LayerNorm((3, 4))
    assert ln.weight.shape == (3, 4) and ln.weight.numpy(force=True).tolist() == [[1.0] * 4] * 3
    assert ln.bias.numpy(force=True).tolist() == [[0.0] * 4] * 3
    assert [n for n, _ in nn.LayerNorm(4, elementwise_affine=False).named_parameters()] == []
    assert [n for n, _ in nn.LayerNorm(4, bias=False).named_parameters()] == ["weight"]


def test_linear_forward_matches_numpy():
    layer = nn.Linear(3, 2)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    w, b = layer.weight.detach().numpy(), layer.bias.detach().numpy()
    np.testing.assert_allclose(layer(eager.tensor(x)).detach().numpy(), x @ w.T + b, rtol=1e-6)
    assert nn.Linear(3, 2, bias=False).bias is None


def test_linear_with_no_inputs_outputs_its_bias():
    with pytest.warns(UserWarning, match="zero-element"):
        layer = nn.Linear(0, 3)
    assert not layer.bias.detach().numpy().any()  # PyTorch's bound 0 for fan_in 0
    assert layer(eager.ones(2, 0)).shape == (2, 3)


@pytest.mark.parametrize("padding_idx, row", [(2, 2), (-1, 5)])
def test_embedding_padding_row_is_zero_and_gets_no_gradient(padding_idx, row):
    emb = nn.Embedding(6, 3, padding_idx=padding_idx)
    assert emb.padding_idx == row
    assert not emb.weight.detach().numpy()[row].any()
    assert emb.weight.detach().numpy()[np.arange(6) != row].all()
    idx = eager.tensor([[row, 0, row], [1, row, 1]])
    out = emb(idx)
    (out * eager.randn(2, 3, 3)).sum().backward()
    grad = emb.weight.grad.numpy()
    assert not grad[row].any() and grad[[0, 1]].all()
    assert not out.detach().numpy()[idx.numpy() == row].any()


@pytest.mark.parametrize("padding_idx", [6, -7])
def test_embedding_rejects_padding_idx_out_of_range(padding_idx):
    with pytest.raises(AssertionError, match="Padding_idx"):
        nn.Embedding(6, 3, padding_idx=padding_idx)


ACTIVATIONS = [
    (nn.ReLU(), F.relu), (nn.GELU(), F.gelu), (nn.GELU("tanh"), lambda x: F.gelu(x, "tanh")),
    (nn.SiLU(), F.silu), (nn.Tanh(), F.tanh), (nn.Sigmoid(), F.sigmoid),
    (nn.Softmax(1), lambda x: F.softmax(x, 1)), (nn.LogSoftmax(0), lambda x: F.log_softmax(x, 0)),
    (nn.LayerNorm(4), lambda x: F.layer_norm(x, (4,))), (nn.Identity(3, k=1), lambda x: x),
    (nn.Flatten(0), lambda x: x.reshape(12)),
]


@pytest.mark.parametrize("module, fn", ACTIVATIONS, ids=lambda m: type(m).__name__)
def test_module_forward_matches_functional(module, fn):
    x = eager.randn(3, 4)
    np.testing.assert_array_equal(module(x).detach().numpy(), fn(x).detach().numpy())


def test_sequential_indexing_slicing_and_names():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert seq[0] is a and seq[-1] is c and list(seq) == [a, b, c]
    assert list(seq[1:]) == [b, c] and isinstance(seq[1:], nn.Sequential)
    with pytest.raises(IndexError):
        seq[3]
    named = nn.Sequential(OrderedDict([("enc", a), ("act", b)]))
    assert [n for n, _ in named.named_children()] == ["enc", "act"]
    x = eager.randn(4, 2)
    np.testing.assert_array_equal(seq(x).detach().numpy(), c(b(a(x))).detach().numpy())
    assert len(seq.append(nn.Tanh())) == 4


def test_module_list_and_dict_editing():
    layers = nn.ModuleList([nn.ReLU()]).extend([nn.Tanh(), nn.SiLU()])
    layers[-1] = nn.GELU()
    assert [type(m).__name__ for m in layers] == ["ReLU", "Tanh", "GELU"]
    assert isinstance(layers[:2], nn.ModuleList) and len(layers[:2]) == 2
    with pytest.raises(IndexError):
        layers[-4] = nn.ReLU()
    d = nn.ModuleDict({"a": nn.Linear(1, 1)})
    d["b"] = nn.Linear(1, 1)
    del d["a"]
    assert "b" in d and "a" not in d and len(list(d.parameters())) == 2


REPRS = [
    lambda nn: nn.Linear(3, 4, bias=False), lambda nn: nn.Embedding(10, 3, padding_idx=0),
    lambda nn: nn.Embedding(10, 3), lambda nn: nn.LayerNorm((3, 4), elementwise_affine=False),
    lambda nn: nn.LayerNorm(4, eps=1e-6, bias=False), lambda nn: nn.GELU(approximate="tanh"),
    lambda nn: nn.Softmax(dim=1), lambda nn: nn.LogSoftmax(dim=-1), lambda nn: nn.Flatten(),
    lambda nn: nn.SiLU(), lambda nn: nn.ReLU(inplace=True), lambda nn: nn.Identity(),
    lambda nn: nn.Dropout(0.25), lambda nn: nn.CrossEntropyLoss(), lambda nn: nn.MSELoss(),
]


@pytest.mark.parametrize("make", REPRS, ids=lambda f: repr(f(nn)))
def test_repr_matches_pytorch(make):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    assert repr(make(nn)) == repr(make(torch.nn))
