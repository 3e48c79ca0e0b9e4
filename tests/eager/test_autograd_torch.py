"""Autograd against real PyTorch: backward node names and graph structure, and gradient
values (float64) of small models and of the awkward points (ties, kinks, boundaries)."""
from __future__ import annotations

import numpy as np
import pytest

import eager

torch = pytest.importorskip("torch", reason="torch is not installed: no reference to compare")


def functional(m):
    """The module holding linear/gelu/silu/softmax: eager itself, or torch.nn.functional."""
    return torch.nn.functional if m is torch else eager


def _leaves(m, arrays):
    return [m.tensor(a, dtype=m.float64, requires_grad=True) for a in arrays]


def _arrays(seed, *shapes, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(low, high, s) for s in shapes]


def _structure(fn, depth=3):
    """The names of the backward graph from fn's grad_fn, `depth` levels down."""
    if fn is None:
        return None
    if depth == 0:
        return type(fn).__name__
    return (type(fn).__name__, tuple((_structure(n, depth - 1), nr)
                                     for n, nr in fn.next_functions))


# backward node names ------------------------------------------------------------------------
GRAPHS = {
    "neg": lambda m, x, y: -x,
    "exp-log-sqrt": lambda m, x, y: x.exp().log().sqrt(),
    "rsqrt-abs-sign": lambda m, x, y: x.rsqrt().abs() * x.sign(),
    "tanh-sigmoid-relu": lambda m, x, y: x.tanh().sigmoid().relu(),
    "silu-gelu-erf": lambda m, x, y: functional(m).gelu(functional(m).silu(x)).erf(),
    "gelu-tanh": lambda m, x, y: functional(m).gelu(x, approximate="tanh"),
    "clamp": lambda m, x, y: m.clamp(x, 0.6, 0.9) + m.clamp(x, min=0.7) + m.clamp(x, max=0.8),
    "add-sub-scalar": lambda m, x, y: (x + y - 1) + (2 + x) - y,
    "add-alpha": lambda m, x, y: m.add(x, y, alpha=2),
    "mul-div": lambda m, x, y: x * y / (y * 2) / 3,
    "pow": lambda m, x, y: x ** y,
    "maximum-minimum-where": lambda m, x, y: m.where(x > y, m.maximum(x, y), m.minimum(x, y)),
    "where-scalar": lambda m, x, y: m.where(x > 0.7, x, 0.0) + m.where(x > 0.6, 1.0, y),
    "sum": lambda m, x, y: x.sum() + x.sum(0).sum() + x.sum([0, 1], keepdim=True),
    "mean": lambda m, x, y: x.mean() + x.mean(1).mean(),
    "amax-amin": lambda m, x, y: m.amax(x, 1) + m.amin(x, [0]),
    "max-min-dim": lambda m, x, y: x.max(1)[0] + x.min(0, keepdim=True)[0],
    "var": lambda m, x, y: x.var() + x.var(1).sum() + x.var(0, correction=0).sum(),
    "softmax": lambda m, x, y: m.softmax(x, 1) + m.log_softmax(x, 0),
    "matmul": lambda m, x, y: m.dot(x[0], y[0]) + m.mv(x, y[1]).sum() + (x @ y.t()).sum(),
    "bmm-addmm": lambda m, x, y: m.bmm(x[None], y.t()[None]).sum() + m.addmm(y[0], x, y.t()),
    "linear": lambda m, x, y: functional(m).linear(x, y, y[0]) + functional(m).linear(x, y),
    "views": lambda m, x, y: x.view(9).reshape(3, 3).t().transpose(0, 1).permute(1, 0).T.mT,
    "expand-squeeze": lambda m, x, y: x[None].squeeze() + x[:, None].squeeze(1)
    + x[0].expand(3, 3) + x.unsqueeze(0).squeeze([0]),
    "index": lambda m, x, y: x[0, 1:] + x[:, ::2][1] + x[..., 2][1:],
    "flatten-clone": lambda m, x, y: x.flatten().clone() + x.t().contiguous().flatten(),
    "to-copy": lambda m, x, y: x.float().double(),
    "cat": lambda m, x, y: m.cat([x, y, x], 1),
    "index-select-add": lambda m, x, y: m.index_add(m.index_select(x, 0, m.tensor([2, 0])), 1,
                                                    m.tensor([0, 0, 1]), y[1:]),
    "advanced-index": lambda m, x, y: x[m.tensor([2, 0, 1])]
    + x[:, m.tensor([[1], [0], [1]])][..., 0] + x[m.tensor([True, False, True])].sum(0),
    "gather-scatter": lambda m, x, y: m.gather(x, 1, m.tensor([[0, 0, 1]] * 3))
    + x.scatter_add(0, m.tensor([[1, 2, 0]]), y[:1]) + x.scatter(1, m.tensor([[2], [0], [1]]), y)
    + x.index_put((m.tensor([0, 2]),), y[1]) + x.index_put((m.tensor([1, 1]),), y[0], True),
    "in-place": lambda m, x, y: (x * 1).add_(y).sub_(1).mul_(y).div_(2).clamp_(0, 1),
    "in-place-fill": lambda m, x, y: (x * 1).zero_() + (x * 1).fill_(2) + (x * 1).copy_(y),
    "trigonometric": lambda m, x, y: x.sin().cos().tan() + x.asin() + x.acos() + x.atan()
    + m.atan2(x, y),
    "hyperbolic": lambda m, x, y: x.sinh() + x.cosh() + x.asinh() + (x + 1).acosh() + x.atanh(),
    "rounding": lambda m, x, y: x.floor() + x.ceil() + x.round() + m.round(x, decimals=1)
    + x.trunc() + x.frac() + x.sgn() + m.fix(x),
    "exp2-sinc-degrees": lambda m, x, y: m.exp2(x) + m.sinc(x) + m.deg2rad(x) + m.rad2deg(x),
    "hypot-logaddexp": lambda m, x, y: m.hypot(x, y) + m.logaddexp(x, y) + m.logaddexp2(x, y),
    "xlogy-fmod-remainder": lambda m, x, y: m.xlogy(x, y) + m.fmod(x, y) + m.remainder(x, y)
    + m.copysign(x, y) + m.nextafter(x, y),
    "aliases": lambda m, x, y: m.arcsin(x) + m.arctan2(x, y) + m.negative(x) + m.absolute(x),
    "in-place-math": lambda m, x, y: (x * 1).sin_().tan_().floor_() + (x * 1).xlogy_(y),
}


@pytest.mark.parametrize("name", GRAPHS)
def test_backward_graph_matches_torch(name):
    a, b = _arrays(0, (3, 3), (3, 3), low=0.5, high=1.0)
    graphs = []
    for m in (eager, torch):
        x, y = _leaves(m, (a, b))
        graphs.append(_structure(GRAPHS[name](m, x, y).grad_fn))
    assert graphs[0] == graphs[1]


@pytest.mark.parametrize("fn", [lambda x: x ** 2, lambda x: 2 ** x], ids=["scalar-exponent",
                                                                          "scalar-base"])
def test_pow_with_a_python_number_is_named_for_torchs_overload(fn):
    """PyTorch's pow.Tensor_Scalar and pow.Scalar take no tensor for the number, so their
    nodes have one edge; kiln's single pow keeps a (None, 0) edge for it."""
    (a,) = _arrays(0, (3,), low=0.5)
    ours = fn(eager.tensor(a, requires_grad=True)).grad_fn
    theirs = fn(torch.tensor(a, requires_grad=True)).grad_fn
    assert type(ours).__name__ == type(theirs).__name__
    assert [e for e in _structure(ours)[1] if e != (None, 0)] == list(_structure(theirs)[1])


@pytest.mark.parametrize("fn", [
    lambda m, x: m.xlogy(x, 3.0), lambda m, x: m.xlogy(2.0, x), lambda m, x: m.fmod(x, 0.3),
    lambda m, x: m.remainder(x, 0.3), lambda m, x: m.copysign(x, -1.0),
    lambda m, x: m.round(x, decimals=2)],
    ids=["xlogy-scalar-other", "xlogy-scalar-self", "fmod-scalar", "remainder-scalar",
         "copysign-scalar", "round-decimals"])
def test_math_ops_with_a_python_number_are_named_for_torchs_overload(fn):
    (a,) = _arrays(0, (3,), low=0.5)
    ours, theirs = (fn(m, m.tensor(a, requires_grad=True)).grad_fn for m in (eager, torch))
    assert type(ours).__name__ == type(theirs).__name__


def test_embedding_node_matches_torch():
    (a,) = _arrays(0, (4, 3))
    k = eager.embedding(eager.tensor(a, requires_grad=True), eager.tensor([1, 3]))
    t = torch.nn.functional.embedding(torch.tensor([1, 3]), torch.tensor(a, requires_grad=True))
    assert _structure(k.grad_fn) == _structure(t.grad_fn)


# gradient values ----------------------------------------------------------------------------
def _compare_gradients(loss_fn, arrays, atol=1e-6):
    results = []
    for m in (eager, torch):
        leaves = _leaves(m, arrays)
        loss = loss_fn(m, *leaves)
        loss.backward()
        results.append([loss.detach().numpy()] + [t.grad.numpy() for t in leaves])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol)


def _mlp(m, x, w1, b1, w2, b2, target):
    f = functional(m)
    h = f.linear(x, w1, b1).relu()
    logits = f.linear(h, w2, b2)
    p = m.softmax(logits, 1)
    nll = -(m.log_softmax(logits, 1) * target).sum(1).mean()
    return nll + (p * p).mean() + f.gelu(h).var() + m.tanh(h).mean()


def test_mlp_gradients_match_torch():
    x, w1, b1, w2, b2 = _arrays(1, (5, 4), (8, 4), (8,), (3, 8), (3,))
    target = np.eye(3)[[0, 2, 1, 1, 0]]
    _compare_gradients(lambda m, *p: _mlp(m, *p, m.tensor(target)), [x, w1, b1, w2, b2])


@pytest.mark.parametrize("name, x_shape, product", [
    ("linear", (5, 4), lambda m, x, w: m.nn.functional.linear(x, w)),
    ("mm of a transposed weight", (5, 4), lambda m, x, w: x @ w.t()),
    ("mm of a transposed input", (4, 5), lambda m, x, w: x.t() @ w.t()),
])
def test_gradients_reach_leaves_in_their_layout_as_in_torch(name, x_shape, product):
    """A gradient through a transposed operand is computed transposed (PyTorch's
    mm_mat1_backward and mm_mat2_backward), so it reaches a contiguous leaf contiguous:
    as a hook sees it, before AccumulateGrad."""
    seen = {}
    for m in (eager, torch):
        x, w = _leaves(m, _arrays(7, x_shape, (3, 4)))
        seen[m] = []
        for leaf in (x, w):
            leaf.register_hook(lambda g, s=seen[m]: s.append((tuple(g.shape), g.stride())))
        product(m, x, w).sum().backward()
    assert sorted(seen[eager]) == sorted(seen[torch])
    assert all(stride == (shape[1], 1) for shape, stride in seen[eager])


def test_batched_attention_like_graph_matches_torch():
    def loss(m, q, k, v):
        scores = m.softmax(q @ k.transpose(-2, -1) / 2.0, -1)
        out = scores @ v
        return (out.sum(0) ** 2).mean() + m.cat([out, q], 2).amax(2).sum()
    _compare_gradients(loss, _arrays(2, (2, 3, 4), (2, 5, 4), (2, 5, 4)))


def test_embedding_with_padding_matches_torch():
    (weight,) = _arrays(3, (5, 3))
    indices = [[0, 2, 4], [2, 2, 1]]

    def loss(m, w):
        if m is torch:
            e = torch.nn.functional.embedding(torch.tensor(indices), w, padding_idx=2)
        else:
            e = eager.embedding(w, eager.tensor(indices), padding_idx=2)
        return (e * e.tanh()).sum()
    _compare_gradients(loss, [weight])


@pytest.mark.parametrize("name, fn, values", [
    ("amax-ties", lambda m, x: m.amax(x, [1]).sum(), [[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]]),
    ("amax-all-ties", lambda m, x: m.amax(x), [[1.0, 3.0, 3.0], [3.0, 0.0, 2.0]]),
    ("max-all-ties", lambda m, x: x.max(), [[1.0, 3.0, 3.0], [3.0, 0.0, 2.0]]),
    ("min-dim-ties", lambda m, x: x.min(1)[0].sum(), [[1.0, 1.0, 3.0], [2.0, 0.0, 0.0]]),
    ("maximum-ties", lambda m, x: m.maximum(x, x.detach()[:, :1]).sum(),
     [[1.0, 3.0, 1.0], [2.0, 2.0, 0.0]]),
    ("relu-at-zero", lambda m, x: x.relu().sum(), [[0.0, -1.0, 1.0]]),
    ("abs-at-zero", lambda m, x: x.abs().sum(), [[0.0, -1.0, 1.0]]),
    ("clamp-boundaries", lambda m, x: m.clamp(x, -1.0, 1.0).sum(), [[-1.0, 1.0, 0.0, 2.0]]),
    ("clamp-min-boundary", lambda m, x: m.clamp(x, min=0.0).sum(), [[0.0, -1.0, 1.0]]),
    ("pow-zero-base", lambda m, x: (x ** 2).sum() + (x ** 0.0).sum(), [[0.0, 1.0, -2.0]]),
    ("pow-zero-exponent", lambda m, x: (m.tensor([[0.0, 2.0, 3.0]], dtype=m.float64) ** x).sum(),
     [[0.0, 1.0, 2.0]]),
    ("var-single-element", lambda m, x: x.var(1, correction=0).sum(), [[1.5], [2.0]]),
    ("sqrt-at-zero", lambda m, x: x.sqrt().sum(), [[0.0, 4.0]]),
    ("xlogy-at-zero", lambda m, x: m.xlogy(x, x + 1).sum() + m.xlogy(x, x * 0).sum(),
     [[0.0, 1.0]]),
    ("sinc-at-zero", lambda m, x: m.sinc(x).sum(), [[0.0, 1.0, -0.5]]),
    ("copysign-at-zero", lambda m, x: m.copysign(x, x * 0 - 1).sum(), [[0.0, -0.0, 2.0]]),
    ("rounding-steps", lambda m, x: (m.floor(x) + m.round(x) + m.frac(x)).sum(),
     [[0.5, 1.5, -2.0]]),
    ("fmod-remainder-signs", lambda m, x: (m.fmod(x, x * 0 - 0.7) + m.remainder(x, x * 0 - 0.7)
                                           ).sum(), [[1.0, -1.0, 2.5]]),
    ("scalar-operands", lambda m, x: (m.xlogy(x, 3.0) + m.xlogy(2.0, x) + m.fmod(x, 0.3)
                                      + m.remainder(x, 0.3) + m.copysign(x, -1.0)).sum(),
     [[0.5, 1.5, 2.0]]),
])
def test_gradient_at_awkward_points_matches_torch(name, fn, values):
    results = []
    for m in (eager, torch):
        (x,) = _leaves(m, [np.array(values)])
        fn(m, x).backward()
        results.append(x.grad.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=0, atol=1e-12)


def test_hooks_and_retain_grad_around_in_place_ops_match_torch():
    """A hook registered before an in-place op sees the old value's gradient; retain_grad
    follows the tensor to its new value."""
    results = []
    for m in (eager, torch):
        (x,) = _leaves(m, _arrays(5, (3,)))
        h = x * 2
        seen = []
        h.register_hook(lambda g: seen.append(g.clone()))
        h.retain_grad()
        h.mul_(x)
        h.add_(1)
        (h * 3).sum().backward()
        results.append([seen[0].numpy(), h.grad.numpy(), x.grad.numpy()])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


def test_second_derivatives_match_torch():
    def loss_grad(m, x, w):
        y = (m.tanh(x @ w) ** 2).sum() + m.softmax(x, 1).var()
        (gx,) = m.autograd.grad(y, x, create_graph=True)
        return (gx * gx).sum()
    _compare_gradients(loss_grad, _arrays(4, (3, 4), (4, 2)))
