"""eager.distributions against torch.distributions on the same parameters: log_prob,
entropy, cdf, mean, variance, shapes, kl_divergence and their gradients; gradients of
log_prob, rsample and kl checked with finite differences; sample statistics; argument
and sample validation with PyTorch's messages."""
from __future__ import annotations

import numpy as np
import pytest

import eager
from eager import distributions as D
from eager.autograd import gradcheck, gradgradcheck
from eager.distributions._linalg import cholesky, solve_triangular

torch = pytest.importorskip("torch", reason="torch is not installed: no reference to compare")
RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3, 3))
COV = A @ A.transpose(0, 2, 1) + 0.5 * np.eye(3)
IND_LOC, IND_SCALE = RNG.standard_normal((4, 3)), np.abs(RNG.standard_normal((4, 3))) + 0.2
IND_VALUE = RNG.standard_normal((2, 4, 3))


def _tril(a):
    t = np.tril(a)
    t[..., range(3), range(3)] = np.abs(t[..., range(3), range(3)]) + 0.3
    return t


def dists(m):
    """name -> (make(params) for module m, the parameters, a value to evaluate at)."""
    d = m.distributions
    return {
        "normal": (lambda p: d.Normal(p["loc"], p["scale"]),
                   {"loc": np.array([0.3, -1.0, 2.0]), "scale": np.array([0.5, 2.0, 1.2])},
                   np.array([[0.1, 0.7, 2.5], [-1.0, 0.0, 1.0]])),
        "uniform": (lambda p: d.Uniform(p["low"], p["high"]),
                    {"low": np.array([-1.0, 0.5]), "high": np.array([1.5, 3.0])},
                    np.array([0.2, 2.9])),
        "bernoulli probs": (lambda p: d.Bernoulli(probs=p["probs"]),
                            {"probs": np.array([0.2, 0.9, 0.5])}, np.array([1.0, 0.0, 1.0])),
        "bernoulli logits": (lambda p: d.Bernoulli(logits=p["logits"]),
                             {"logits": np.array([-1.5, 0.3, 4.0])},
                             np.array([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])),
        "categorical probs": (lambda p: d.Categorical(probs=p["probs"]),
                              {"probs": np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])},
                              np.array([2.0, 0.0])),
        "categorical logits": (lambda p: d.Categorical(logits=p["logits"]),
                               {"logits": np.array([[0.2, -1.3, 2.5], [0.0, 0.4, -0.7]])},
                               np.array([[2.0, 0.0], [1.0, 1.0]])),
        "categorical wide": (lambda p: d.Categorical(logits=p["logits"]),
                             {"logits": np.array([[0.2, -1.3, 2.5, 0.0]])},
                             np.array([[3.0], [1.0]])),
        "mvn covariance": (lambda p: d.MultivariateNormal(p["loc"], covariance_matrix=p["cov"]),
                           {"loc": np.array([0.5, -0.2, 1.0]), "cov": COV},
                           np.array([[0.3, 0.1, -0.4], [1.0, 2.0, 0.0]])),
        "mvn scale_tril": (lambda p: d.MultivariateNormal(p["loc"], scale_tril=p["L"]),
                           {"loc": np.array([[0.5, -0.2, 1.0]]), "L": _tril(A)},
                           np.array([0.3, 0.1, -0.4])),
        "mvn precision": (lambda p: d.MultivariateNormal(p["loc"], precision_matrix=p["P"]),
                          {"loc": np.array([0.5, -0.2, 1.0]), "P": COV[0]},
                          np.array([0.3, 0.1, -0.4])),
        "independent normal": (lambda p: d.Independent(d.Normal(p["loc"], p["scale"]), 1),
                               {"loc": IND_LOC, "scale": IND_SCALE}, IND_VALUE),
    }


NAMES = list(dists(eager))


def _build(m, name, requires_grad=True):
    make, params, value = dists(m)[name]
    tensors = {k: m.tensor(v, dtype=m.float64, requires_grad=requires_grad)
               for k, v in params.items()}
    return make(tensors), tensors, m.tensor(value, dtype=m.float64)


def _np(t):
    return t.detach().numpy()


@pytest.mark.parametrize("name", NAMES)
def test_values_and_shapes_match_torch(name):
    ours, _, value = _build(eager, name)
    theirs, _, their_value = _build(torch, name)
    assert tuple(ours.batch_shape) == tuple(theirs.batch_shape)
    assert tuple(ours.event_shape) == tuple(theirs.event_shape)
    assert ours.has_rsample == theirs.has_rsample
    for what in ("mean", "variance", "stddev"):
        np.testing.assert_allclose(_np(getattr(ours, what)), _np(getattr(theirs, what)),
                                   rtol=1e-12, err_msg=what)
    np.testing.assert_allclose(_np(ours.log_prob(value)), _np(theirs.log_prob(their_value)),
                               rtol=1e-10)
    np.testing.assert_allclose(_np(ours.entropy()), _np(theirs.entropy()), rtol=1e-10)
    sample = ours.sample((5,))
    assert tuple(sample.shape) == tuple(theirs.sample((5,)).shape) and not sample.requires_grad
    assert repr(ours).replace("eager.", "torch.") == repr(theirs)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_of_log_prob_and_entropy_match_torch(name):
    grads = []
    for m in (eager, torch):
        dist, params, value = _build(m, name)
        (dist.log_prob(value).sum() + dist.entropy().sum()).backward()
        grads.append([_np(t.grad) for t in params.values()])
    for ours, theirs in zip(*grads):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


def _structured(key, t):
    """A perturbed matrix parameter made valid again, as finite differences move single
    elements: a covariance or precision symmetric, a Cholesky factor lower triangular."""
    if key in ("cov", "P"):
        return (t + t.mT) / 2
    return t.tril() if key == "L" else t


@pytest.mark.parametrize("name", NAMES)
def test_log_prob_gradients_match_finite_differences(name):
    make, params, value = dists(eager)[name]
    keys = list(params)
    tensors = [eager.tensor(params[k], dtype=eager.float64, requires_grad=True) for k in keys]
    x = eager.tensor(value, dtype=eager.float64)

    def log_prob(*ts):
        ts = [_structured(k, t) for k, t in zip(keys, ts)]
        return make(dict(zip(keys, ts))).log_prob(x)
    assert gradcheck(log_prob, tuple(tensors))


@pytest.mark.parametrize("name", ["normal", "uniform", "mvn scale_tril", "mvn covariance",
                                  "independent normal"])
def test_rsample_is_reparameterised_and_its_gradient_matches_finite_differences(name):
    make, params, _ = dists(eager)[name]
    keys = list(params)
    tensors = [eager.tensor(params[k], dtype=eager.float64, requires_grad=True) for k in keys]

    def draw(*ts):
        eager.manual_seed(11)  # the same draw at every evaluation
        ts = [_structured(k, t) for k, t in zip(keys, ts)]
        return make(dict(zip(keys, ts))).rsample((4,))
    assert draw(*tensors).requires_grad
    assert gradcheck(draw, tuple(tensors))


@pytest.mark.parametrize("name", ["bernoulli probs", "categorical logits"])
def test_discrete_distributions_have_no_rsample(name):
    dist, _, _ = _build(eager, name)
    with pytest.raises(NotImplementedError):
        dist.rsample()


@pytest.mark.parametrize("name", NAMES)
def test_samples_have_the_distributions_mean_and_variance(name):
    eager.manual_seed(3)
    dist, _, _ = _build(eager, name, requires_grad=False)
    samples = _np(dist.sample((40000,)))
    if "categorical" in name:  # mean and variance are NaN: compare frequencies with probs
        counts = [(samples == k).mean(0) for k in range(dist.probs.shape[-1])]
        np.testing.assert_allclose(np.stack(counts, -1), _np(dist.probs), atol=0.01)
        return
    np.testing.assert_allclose(samples.mean(0), _np(dist.mean), atol=0.06)
    np.testing.assert_allclose(samples.var(0), _np(dist.variance), rtol=0.06, atol=0.01)


KL_PAIRS = [("normal", "normal"), ("uniform", "uniform"), ("bernoulli probs", "bernoulli logits"),
            ("categorical probs", "categorical logits"), ("categorical logits", "categorical probs"), ("mvn covariance", "mvn scale_tril"),
            ("mvn precision", "mvn covariance"), ("independent normal", "independent normal")]


def _pair(m, p_name, q_name, shift):
    p, p_params, _ = _build(m, p_name)
    make, params, _ = dists(m)[q_name]
    q_params = {k: m.tensor(v + shift if k in ("loc", "logits") else v, dtype=m.float64,
                            requires_grad=True) for k, v in params.items()}
    return p, make(q_params), list(p_params.values()) + list(q_params.values())


@pytest.mark.parametrize("p_name,q_name", KL_PAIRS)
def test_kl_divergence_and_its_gradients_match_torch(p_name, q_name):
    results = []
    for m in (eager, torch):
        p, q, params = _pair(m, p_name, q_name, 0.4)
        kl = m.distributions.kl_divergence(p, q)
        kl.sum().backward()
        results.append([_np(kl)] + [_np(t.grad) for t in params])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


def test_kl_between_uniform_and_normal_both_ways_and_infinite_cases_match_torch():
    for m in (eager, torch):
        u = m.distributions.Uniform(m.tensor([0.0, 1.0]), m.tensor([2.0, 1.5]))
        n = m.distributions.Normal(m.tensor([0.5, 0.0]), m.tensor([1.0, 3.0]))
        narrow = m.distributions.Uniform(m.tensor([0.5, 0.0]), m.tensor([1.0, 3.0]))
        values = [m.distributions.kl_divergence(u, n), m.distributions.kl_divergence(n, u),
                  m.distributions.kl_divergence(u, narrow)]
        if m is eager:
            ours = np.array([v.tolist() for v in values])
        else:
            np.testing.assert_allclose(ours, np.array([v.tolist() for v in values]), rtol=1e-6)
    assert ours[1].tolist() == [float("inf")] * 2 and ours[2][0] == float("inf")


def test_kl_of_an_unregistered_pair_raises_and_register_kl_prefers_the_subclass():
    p = D.Bernoulli(probs=eager.tensor([0.5]))
    q = D.Normal(eager.tensor([0.0]), eager.tensor([1.0]))
    with pytest.raises(NotImplementedError, match="No KL\\(p \\|\\| q\\) is implemented for p "
                                                  "type Bernoulli and q type Normal"):
        D.kl_divergence(p, q)

    class Wide(D.Normal):
        pass

    @D.register_kl(Wide, D.Normal)
    def _kl_wide(p, q):
        return eager.zeros(1)
    try:
        assert D.kl_divergence(Wide(0.0, 2.0), q).tolist() == [0.0]
        assert D.kl_divergence(q, Wide(0.0, 2.0)).item() > 0  # still Normal's
    finally:
        D.kl._KL_REGISTRY.pop((Wide, D.Normal))
        D.kl._KL_MEMOIZE.clear()


def _message(m, make):
    """The ValueError `make` raises with `m`'s distributions validating their arguments
    (their default; torch.compile turns torch's off for the whole process)."""
    validating = m.distributions.Distribution._validate_args
    m.distributions.Distribution.set_default_validate_args(True)
    try:
        with pytest.raises(ValueError) as info:
            make(m)
    finally:
        m.distributions.Distribution.set_default_validate_args(validating)
    return str(info.value).replace("eager.", "torch.")


@pytest.mark.parametrize("make", [
    lambda m: m.distributions.Normal(m.tensor([0.0, 1.0]), m.tensor([1.0, -0.5])),
    lambda m: m.distributions.Uniform(m.tensor([1.0]), m.tensor([0.5])),
    lambda m: m.distributions.Bernoulli(probs=m.tensor([1.5])),
    lambda m: m.distributions.Bernoulli(probs=m.tensor([0.5]), logits=m.tensor([0.0])),
    lambda m: m.distributions.Categorical(probs=m.tensor([[0.7, -0.2]])),
    lambda m: m.distributions.Categorical(logits=m.tensor(0.0)),
    lambda m: m.distributions.MultivariateNormal(m.tensor([0.0, 0.0]),
                                                 covariance_matrix=m.tensor([[1.0, 2.0],
                                                                             [2.0, 1.0]])),
    lambda m: m.distributions.MultivariateNormal(m.tensor([0.0, 0.0]),
                                                 scale_tril=m.tensor([[1.0, 0.0], [0.5, -1.0]])),
    lambda m: m.distributions.MultivariateNormal(m.tensor(0.0), scale_tril=m.eye(1)),
    lambda m: m.distributions.MultivariateNormal(m.tensor([0.0])),
    lambda m: m.distributions.Independent(m.distributions.Normal(m.zeros(3), m.ones(3)), 2),
    lambda m: m.distributions.Bernoulli(probs=m.tensor([0.3])).log_prob(m.tensor([0.5])),
    lambda m: m.distributions.Normal(m.zeros(3), m.ones(3)).log_prob(m.zeros(2)),
    lambda m: m.distributions.Categorical(logits=m.zeros(2, 3)).log_prob(m.tensor([3.0, 0.0])),
    lambda m: m.distributions.MultivariateNormal(m.zeros(2), m.eye(2)).log_prob(m.zeros(3)),
], ids=["negative scale", "low above high", "probs above one", "probs and logits",
        "probs off the simplex", "zero-dim logits", "covariance not positive definite",
        "scale_tril with a negative diagonal", "zero-dim loc", "no matrix",
        "independent too many dims", "value outside the support", "value of a wrong shape",
        "category out of range", "event shape mismatch"])
def test_invalid_arguments_and_values_raise_torchs_errors(make):
    assert _message(eager, make) == _message(torch, make)


def test_validation_can_be_turned_off():
    dist = D.Normal(eager.tensor([0.0]), eager.tensor([-1.0]), validate_args=False)
    assert dist.scale.tolist() == [-1.0]
    D.Distribution.set_default_validate_args(False)
    try:
        D.Bernoulli(probs=eager.tensor([2.0])).log_prob(eager.tensor([0.5]))
    finally:
        D.Distribution.set_default_validate_args(True)


def test_cholesky_and_triangular_solve_have_first_and_second_derivatives():
    x = eager.tensor(A[0], dtype=eager.float64, requires_grad=True)
    b = eager.tensor(RNG.standard_normal((3, 2)), dtype=eager.float64, requires_grad=True)

    def chol(t):  # a symmetric positive-definite argument: X X^T + I
        return cholesky(t @ t.mT + eager.eye(3, dtype=eager.float64))
    assert gradcheck(chol, (x,)) and gradgradcheck(chol, (x,))
    assert gradcheck(lambda t, v: solve_triangular(t, v, upper=False), (x, b))
    assert gradgradcheck(lambda t, v: solve_triangular(t, v, upper=True), (x, b))
    np.testing.assert_allclose(_np(chol(x)), _np(torch.linalg.cholesky(
        torch.tensor(A[0] @ A[0].T + np.eye(3)))), rtol=1e-12)
