"""nn.init: each initialiser's distribution (bound or std from gain and fan) checked with a
Kolmogorov-Smirnov test at fixed seeds; PyTorch's own samples pass the same check, so
the formulas are PyTorch's; gains, fan rules and errors."""
import math

import numpy as np
import pytest

import eager
from eager.nn import init
from nn_stats import ks_limit, ks_statistic, normal_cdf, uniform_cdf

SHAPE = (60, 40, 3, 3)  # a conv weight: fan_in 40*9 = 360, fan_out 60*9 = 540
FAN_IN, FAN_OUT = 360, 540

CASES = {  # id: (call, the CDF it must follow)
    "uniform": (lambda i, t: i.uniform_(t, -0.5, 2.0), uniform_cdf(2.0, low=-0.5)),
    "normal": (lambda i, t: i.normal_(t, 1.5, 0.3), normal_cdf(0.3, mean=1.5)),
    "kaiming-uniform-default": (lambda i, t: i.kaiming_uniform_(t),
                                uniform_cdf(math.sqrt(3 * 2 / (1 + 0.01 ** 2) / FAN_IN))),
    "kaiming-uniform-linear-default": (lambda i, t: i.kaiming_uniform_(t, a=math.sqrt(5)),
                                       uniform_cdf(1 / math.sqrt(FAN_IN))),
    "kaiming-uniform-relu-fan-out": (
        lambda i, t: i.kaiming_uniform_(t, mode="fan_out", nonlinearity="relu"),
        uniform_cdf(math.sqrt(6 / FAN_OUT))),
    "kaiming-normal-tanh": (lambda i, t: i.kaiming_normal_(t, nonlinearity="tanh"),
                            normal_cdf(5 / 3 / math.sqrt(FAN_IN))),
    "kaiming-normal-leaky-fan-out": (
        lambda i, t: i.kaiming_normal_(t, a=0.2, mode="fan_out"),
        normal_cdf(math.sqrt(2 / 1.04) / math.sqrt(FAN_OUT))),
    "xavier-uniform": (lambda i, t: i.xavier_uniform_(t, gain=2.0),
                       uniform_cdf(2.0 * math.sqrt(6 / (FAN_IN + FAN_OUT)))),
    "xavier-normal": (lambda i, t: i.xavier_normal_(t),
                      normal_cdf(math.sqrt(2 / (FAN_IN + FAN_OUT)))),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_initialiser_follows_its_distribution(case):
    call, cdf = CASES[case]
    eager.manual_seed(len(case))
    t = eager.nn.Parameter(eager.empty(*SHAPE))
    assert call(init, t) is t
    assert t.is_leaf and t.requires_grad and t.grad_fn is None
    assert ks_statistic(t.detach().numpy(), cdf) < ks_limit(t.numel())


@pytest.mark.parametrize("case", CASES, ids=str)
def test_pytorch_samples_pass_the_same_check(case):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    call, cdf = CASES[case]
    torch.manual_seed(len(case))
    t = call(torch.nn.init, torch.empty(*SHAPE))
    assert ks_statistic(t.numpy(), cdf) < ks_limit(t.numel())


def test_the_check_catches_a_std_off_by_five_percent():
    eager.manual_seed(0)
    t = init.normal_(eager.empty(*SHAPE), 0.0, 1.05)
    assert ks_statistic(t.numpy(), normal_cdf(1.0)) > ks_limit(t.numel())


def test_constant_fills():
    t = eager.nn.Parameter(eager.empty(2, 3))
    assert not init.zeros_(t).detach().numpy().any()
    assert (init.ones_(t).detach().numpy() == 1).all()
    assert (init.constant_(t, -2.5).detach().numpy() == -2.5).all()
    assert t.is_leaf and t.grad_fn is None


def test_generator_makes_draws_repeatable():
    a = init.normal_(eager.empty(5), generator=np.random.default_rng(7)).numpy()
    b = init.normal_(eager.empty(5), generator=np.random.default_rng(7)).numpy()
    np.testing.assert_array_equal(a, b)


GAINS = [("linear", None, 1.0), ("conv2d", None, 1.0), ("conv_transpose3d", None, 1.0),
         ("sigmoid", None, 1.0), ("tanh", None, 5 / 3), ("relu", None, math.sqrt(2)),
         ("leaky_relu", None, math.sqrt(2 / 1.0001)), ("leaky_relu", 0.2, math.sqrt(2 / 1.04)),
         ("leaky_relu", 1, 1.0), ("selu", None, 0.75)]


@pytest.mark.parametrize("nonlinearity, param, gain", GAINS)
def test_calculate_gain(nonlinearity, param, gain):
    assert init.calculate_gain(nonlinearity, param) == pytest.approx(gain, rel=1e-15)


@pytest.mark.parametrize("nonlinearity, param, gain", GAINS)
def test_calculate_gain_matches_pytorch(nonlinearity, param, gain):
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    assert init.calculate_gain(nonlinearity, param) == torch.nn.init.calculate_gain(
        nonlinearity, param)


@pytest.mark.parametrize("shape, fans", [((3, 5), (5, 3)), ((4, 2, 3), (6, 12)),
                                         ((8, 4, 2, 5), (40, 80))])
def test_fan_in_and_fan_out(shape, fans):
    assert init._calculate_fan_in_and_fan_out(eager.empty(*shape)) == fans


@pytest.mark.parametrize("fn", [init.kaiming_uniform_, init.kaiming_normal_,
                                init.xavier_uniform_, init.xavier_normal_])
@pytest.mark.parametrize("shape", [(5,), ()])
def test_fan_needs_two_dimensions(fn, shape):
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        fn(eager.empty(*shape))


@pytest.mark.parametrize("call, match", [
    (lambda t: init.kaiming_uniform_(t, mode="fan_avg"), "Mode fan_avg not supported"),
    (lambda t: init.kaiming_normal_(t, nonlinearity="softplus"), "Unsupported nonlinearity"),
    (lambda t: init.calculate_gain("leaky_relu", "0.1"), "not a valid number"),
    (lambda t: init.calculate_gain("leaky_relu", True), "not a valid number"),
])
def test_bad_arguments_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call(eager.empty(3, 4))


@pytest.mark.parametrize("fn", [init.kaiming_uniform_, init.kaiming_normal_])
def test_zero_element_tensor_is_left_alone_with_a_warning(fn):
    t = eager.empty(3, 0)
    with pytest.warns(UserWarning, match="zero-element"):
        assert fn(t) is t


def test_the_rest_of_nn_init():
    eager.manual_seed(0)
    t = init.trunc_normal_(eager.empty(4000), mean=0.5, std=1.0, a=-0.5, b=1.0).numpy()
    assert t.min() >= -0.5 and t.max() <= 1.0 and 0.2 < t.mean() < 0.5
    for shape in ((3, 5), (6, 2), (4, 2, 3)):
        w = init.orthogonal_(eager.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        small = min(w.shape)
        gram = w @ w.T if w.shape[0] == small else w.T @ w
        np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-5)
    assert init.eye_(eager.empty(2, 3)).tolist() == np.eye(2, 3).tolist()
    conv = init.dirac_(eager.empty(6, 2, 3, 3), groups=2)  # 3 outputs per group of 2 inputs
    x = eager.randn(1, 4, 5, 5)
    out = eager.nn.functional.conv2d(x, conv, padding=1, groups=2)
    np.testing.assert_allclose(out[:, [0, 1, 3, 4]].numpy(), x.numpy(), rtol=1e-6)  # identity
    assert out[:, [2, 5]].abs().sum().item() == 0.0
    s = init.sparse_(eager.empty(10, 4), sparsity=0.3).numpy()
    assert ((s == 0).sum(0) >= 3).all()
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        init.orthogonal_(eager.empty(3))


def test_the_old_names_warn_and_do_the_same():
    with pytest.warns(FutureWarning, match="nn.init.normal is now deprecated in favor of "
                                          "nn.init.normal_"):
        t = init.normal(eager.empty(3), 5.0, 0.0)
    assert t.tolist() == [5.0, 5.0, 5.0]
    with pytest.warns(FutureWarning):
        assert init.constant(eager.empty(2), 1.5).tolist() == [1.5, 1.5]
