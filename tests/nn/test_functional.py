"""nn.functional against torch.nn.functional through one table: the same random float32
inputs on both sides, then the outputs and the gradients of sum(out * w) with respect to
every floating input (w random, so each output element's gradient counts)."""
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

import eager

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

N, C = 6, 5


@dataclass
class Fixed:
    """An input that takes no gradient: targets, indices, class weights, masks."""
    array: np.ndarray


@dataclass
class Case:
    id: str
    fn: Callable  # fn(F, *inputs), F being eager's or torch's nn.functional
    make: Callable[[np.random.Generator], list]


def _x(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _targets(rng, *shape, ignore=None):
    t = rng.integers(0, C, shape)
    if ignore is not None:
        t.flat[::3] = ignore  # every third target ignored, never all of them
    return Fixed(t.astype(np.int64))


def _probs(rng, *shape):
    p = rng.random(shape).astype(np.float32)
    return Fixed(p / p.sum(axis=1 if len(shape) > 1 else 0, keepdims=True))


def _weights(rng):
    return Fixed(rng.uniform(0.5, 2.0, C).astype(np.float32))


def _loss_cases(name, fn, make_target):
    return [Case(f"{name}-{reduction}", lambda F, x, t, r=reduction: fn(F, x, t, r),
                 lambda rng: [_x(rng, N, C), make_target(rng)])
            for reduction in ("none", "sum", "mean")]


CASES = [
    Case("linear", lambda F, x, w, b: F.linear(x, w, b),
         lambda rng: [_x(rng, 4, 3), _x(rng, 5, 3), _x(rng, 5)]),
    Case("linear-no-bias-3d", lambda F, x, w: F.linear(x, w),
         lambda rng: [_x(rng, 2, 4, 3), _x(rng, 5, 3)]),
    Case("relu", lambda F, x: F.relu(x), lambda rng: [_x(rng, 3, 4)]),
    Case("tanh", lambda F, x: F.tanh(x), lambda rng: [_x(rng, 3, 4)]),
    Case("sigmoid", lambda F, x: F.sigmoid(x), lambda rng: [_x(rng, 3, 4)]),
    Case("gelu", lambda F, x: F.gelu(x), lambda rng: [_x(rng, 3, 4)]),
    Case("gelu-tanh", lambda F, x: F.gelu(x, approximate="tanh"), lambda rng: [_x(rng, 3, 4)]),
    Case("silu", lambda F, x: F.silu(x), lambda rng: [_x(rng, 3, 4)]),
    Case("softmax-last", lambda F, x: F.softmax(x, -1), lambda rng: [_x(rng, 3, 4)]),
    Case("softmax-dim0", lambda F, x: F.softmax(x, 0), lambda rng: [_x(rng, 3, 4)]),
    Case("softmax-3d-dim1", lambda F, x: F.softmax(x, dim=1), lambda rng: [_x(rng, 2, 3, 4)]),
    Case("log-softmax-last", lambda F, x: F.log_softmax(x, -1), lambda rng: [_x(rng, 3, 4)]),
    Case("log-softmax-3d-dim1", lambda F, x: F.log_softmax(x, 1), lambda rng: [_x(rng, 2, 3, 4)]),
    Case("layer-norm-affine", lambda F, x, w, b: F.layer_norm(x, (4,), w, b),
         lambda rng: [_x(rng, 3, 4), _x(rng, 4), _x(rng, 4)]),
    Case("layer-norm-plain", lambda F, x: F.layer_norm(x, (4,)), lambda rng: [_x(rng, 3, 4)]),
    Case("layer-norm-2d-shape", lambda F, x, w, b: F.layer_norm(x, [3, 4], w, b, eps=1e-3),
         lambda rng: [_x(rng, 2, 3, 4), _x(rng, 3, 4), _x(rng, 3, 4)]),
    Case("layer-norm-weight-only", lambda F, x, w: F.layer_norm(x, (4,), w),
         lambda rng: [_x(rng, 3, 4), _x(rng, 4)]),
    Case("embedding", lambda F, w, i: F.embedding(i, w),
         lambda rng: [_x(rng, 7, 3), Fixed(np.array([[0, 2, 2], [6, 1, 0]]))]),
    Case("embedding-padding", lambda F, w, i: F.embedding(i, w, padding_idx=2),
         lambda rng: [_x(rng, 7, 3), Fixed(np.array([[0, 2, 2], [6, 1, 2]]))]),
    Case("embedding-negative-padding", lambda F, w, i: F.embedding(i, w, padding_idx=-1),
         lambda rng: [_x(rng, 7, 3), Fixed(np.array([6, 1, 6, 3]))]),
    *_loss_cases("nll", lambda F, x, t, r: F.nll_loss(x, t, reduction=r),
                 lambda rng: _targets(rng, N)),
    *_loss_cases("nll-weighted-ignore",
                 lambda F, x, t, r: F.nll_loss(x, t, torch_or_eager(F, WEIGHTS), reduction=r,
                                               ignore_index=-1),
                 lambda rng: _targets(rng, N, ignore=-1)),
    Case("nll-1d", lambda F, x, t: F.nll_loss(x, t), lambda rng: [_x(rng, C), Fixed(np.array(3))]),
    Case("nll-kdim", lambda F, x, t: F.nll_loss(x, t, ignore_index=0),
         lambda rng: [_x(rng, 2, C, 3, 2), _targets(rng, 2, 3, 2)]),
    *_loss_cases("ce", lambda F, x, t, r: F.cross_entropy(x, t, reduction=r),
                 lambda rng: _targets(rng, N)),
    *_loss_cases("ce-ignore", lambda F, x, t, r: F.cross_entropy(x, t, reduction=r),
                 lambda rng: _targets(rng, N, ignore=-100)),
    *_loss_cases("ce-ignore-in-range",
                 lambda F, x, t, r: F.cross_entropy(x, t, ignore_index=2, reduction=r),
                 lambda rng: _targets(rng, N, ignore=2)),
    *_loss_cases("ce-weighted",
                 lambda F, x, t, r: F.cross_entropy(x, t, torch_or_eager(F, WEIGHTS), reduction=r),
                 lambda rng: _targets(rng, N)),
    *_loss_cases("ce-smoothing",
                 lambda F, x, t, r: F.cross_entropy(x, t, reduction=r, label_smoothing=0.2),
                 lambda rng: _targets(rng, N)),
    *_loss_cases("ce-all-options",
                 lambda F, x, t, r: F.cross_entropy(x, t, torch_or_eager(F, WEIGHTS),
                                                    ignore_index=-7, reduction=r,
                                                    label_smoothing=0.3),
                 lambda rng: _targets(rng, N, ignore=-7)),
    Case("ce-1d", lambda F, x, t: F.cross_entropy(x, t, label_smoothing=0.1),
         lambda rng: [_x(rng, C), Fixed(np.array(4))]),
    Case("ce-kdim-all-options",
         lambda F, x, t: F.cross_entropy(x, t, torch_or_eager(F, WEIGHTS), ignore_index=1,
                                         label_smoothing=0.25),
         lambda rng: [_x(rng, 2, C, 3, 2), _targets(rng, 2, 3, 2, ignore=1)]),
    Case("ce-kdim-none", lambda F, x, t: F.cross_entropy(x, t, reduction="none"),
         lambda rng: [_x(rng, 2, C, 4), _targets(rng, 2, 4)]),
    *_loss_cases("ce-probs", lambda F, x, t, r: F.cross_entropy(x, t, reduction=r),
                 lambda rng: _probs(rng, N, C)),
    *_loss_cases("ce-probs-weighted-smoothing",
                 lambda F, x, t, r: F.cross_entropy(x, t, torch_or_eager(F, WEIGHTS),
                                                    reduction=r, label_smoothing=0.1),
                 lambda rng: _probs(rng, N, C)),
    Case("ce-probs-1d", lambda F, x, t: F.cross_entropy(x, t, torch_or_eager(F, WEIGHTS)),
         lambda rng: [_x(rng, C), _probs(rng, C)]),
    Case("ce-probs-kdim", lambda F, x, t: F.cross_entropy(x, t, label_smoothing=0.2),
         lambda rng: [_x(rng, 2, C, 3), _probs(rng, 2, C, 3)]),
    *[Case(f"mse-{r}", lambda F, x, y, r=r: F.mse_loss(x, y, reduction=r),
           lambda rng: [_x(rng, 3, 4), _x(rng, 3, 4)]) for r in ("none", "sum", "mean")],
    *[Case(f"l1-{r}", lambda F, x, y, r=r: F.l1_loss(x, y, reduction=r),
           lambda rng: [_x(rng, 3, 4), _x(rng, 3, 4)]) for r in ("none", "sum", "mean")],
    Case("sdpa", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v),
         lambda rng: [_x(rng, 2, 3, 4, 8), _x(rng, 2, 3, 5, 8), _x(rng, 2, 3, 5, 6)]),
    Case("sdpa-3d-scale", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
         lambda rng: [_x(rng, 3, 4, 8), _x(rng, 3, 4, 8), _x(rng, 3, 4, 8)]),
    Case("sdpa-causal", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda rng: [_x(rng, 2, 5, 8), _x(rng, 2, 5, 8), _x(rng, 2, 5, 8)]),
    Case("sdpa-causal-rectangular",
         lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
         lambda rng: [_x(rng, 2, 3, 8), _x(rng, 2, 6, 8), _x(rng, 2, 6, 4)]),
    Case("sdpa-bool-mask", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
         lambda rng: [_x(rng, 2, 4, 8), _x(rng, 2, 5, 8), _x(rng, 2, 5, 8),
                      Fixed(np.concatenate([np.ones((4, 1), bool), rng.random((4, 4)) < 0.5], 1))]),
    Case("sdpa-bool-mask-blind-query",
         lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
         lambda rng: [_x(rng, 2, 3, 8), _x(rng, 2, 4, 8), _x(rng, 2, 4, 8),
                      Fixed(np.array([[1, 0, 1, 1], [0, 0, 0, 0], [0, 1, 0, 0]], bool))]),
    Case("sdpa-float-mask-blind-query",
         lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
         lambda rng: [_x(rng, 2, 3, 8), _x(rng, 2, 4, 8), _x(rng, 2, 4, 8),
                      Fixed(np.array([[0, -np.inf, 1, -np.inf], [-np.inf] * 4, [0.5, 0, 0, 0]],
                                     np.float32))]),
    Case("sdpa-float-mask", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
         lambda rng: [_x(rng, 2, 4, 8), _x(rng, 2, 5, 8), _x(rng, 2, 5, 8),
                      Fixed(_x(rng, 2, 4, 5))]),
]

WEIGHTS = np.random.default_rng(99).uniform(0.5, 2.0, C).astype(np.float32)


def torch_or_eager(F, array):
    """`array` as a tensor of the library that `F` belongs to."""
    return torch.from_numpy(array) if F is torch.nn.functional else eager.tensor(array)


def _run(lib, case: Case, arrays, w_seed):
    leaves = [lib.tensor(a.array) if isinstance(a, Fixed) else lib.tensor(a, requires_grad=True)
              for a in arrays]
    out = case.fn(lib.nn.functional, *leaves)
    w = np.random.default_rng(w_seed).standard_normal(tuple(out.shape)).astype(np.float32)
    (out * lib.tensor(w)).sum().backward()
    grads = [t.grad.numpy() for t, a in zip(leaves, arrays) if not isinstance(a, Fixed)]
    return out.detach().numpy(), grads


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_torch(case):
    arrays = case.make(np.random.default_rng(len(case.id)))
    ours, our_grads = _run(eager, case, arrays, 1)
    theirs, their_grads = _run(torch, case, arrays, 1)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg="output")
    for i, (g, ref) in enumerate(zip(our_grads, their_grads)):
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6, err_msg=f"grad of input {i}")


@pytest.mark.parametrize("num_classes", [-1, 7])
def test_one_hot_matches_torch(num_classes):
    t = np.array([[0, 3], [2, 3]])
    ours = eager.nn.functional.one_hot(eager.tensor(t), num_classes)
    theirs = torch.nn.functional.one_hot(torch.from_numpy(t), num_classes)
    assert ours.dtype is eager.int64
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("ndim", [0, 1, 2, 3, 4])
def test_softmax_default_dim_matches_torch(ndim):
    x = np.random.default_rng(ndim).standard_normal((2, 3, 4, 5)[:ndim]).astype(np.float32)
    ours = eager.nn.functional.softmax(eager.tensor(x))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        theirs = torch.nn.functional.softmax(torch.from_numpy(x))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
