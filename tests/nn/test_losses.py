"""The losses against a float64 numpy reference written from their definitions, their
gradients against finite differences, and their errors. Needs no PyTorch."""
import numpy as np
import pytest

import eager
from eager.autograd import gradcheck
from eager.nn import functional as F

C = 4
TOLERANCE = {eager.float32: dict(rtol=1e-5, atol=1e-6), eager.float64: dict(rtol=1e-12, atol=1e-13)}


def _log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def ref_cross_entropy(x, target, weight=None, ignore_index=-100, reduction="mean",
                      label_smoothing=0.0):
    """cross_entropy in float64 from its definition, one row of classes at a time."""
    axis = 0 if x.ndim == 1 else 1
    logp = _log_softmax(x.astype(np.float64), axis)
    w = np.ones(C) if weight is None else weight.astype(np.float64)
    if target.dtype.kind == "f":
        shape = [1] * x.ndim
        shape[axis] = C
        t = target * (1 - label_smoothing) + label_smoothing / C
        per = -(logp * t * w.reshape(shape)).sum(axis)
        return {"none": per, "sum": per.sum(), "mean": per.mean()}[reduction]
    rows = np.moveaxis(logp, axis, -1).reshape(-1, C)
    t = target.reshape(-1)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    row_w = w[safe] * valid
    nll = -rows[np.arange(len(t)), safe] * row_w
    smooth = -(rows * w).sum(1) / C * valid
    per = (1 - label_smoothing) * nll + label_smoothing * smooth
    return {"none": per.reshape(target.shape), "sum": per.sum(),
            "mean": per.sum() / row_w.sum()}[reduction]


WEIGHT = np.array([0.5, 2.0, 1.0, 1.5])

CASES = {  # id: (input shape, target kind, keyword arguments)
    "plain": ((6, C), "index", {}),
    "ignore": ((6, C), "index-ignore", {}),
    "ignore-in-range": ((6, C), "index-ignore-2", {"ignore_index": 2}),
    "weighted": ((6, C), "index", {"weight": WEIGHT}),
    "smoothing": ((6, C), "index", {"label_smoothing": 0.2}),
    "all-options": ((6, C), "index-ignore", {"weight": WEIGHT, "label_smoothing": 0.3}),
    "1d": ((C,), "index", {"label_smoothing": 0.1, "weight": WEIGHT}),
    "kdim": ((2, C, 3, 2), "index-ignore", {"weight": WEIGHT, "label_smoothing": 0.1}),
    "probs": ((6, C), "probs", {}),
    "probs-options": ((6, C), "probs", {"weight": WEIGHT, "label_smoothing": 0.2}),
    "probs-kdim": ((2, C, 3), "probs", {"weight": WEIGHT}),
}


def _inputs(shape, kind, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    if kind == "probs":
        p = rng.random(shape)
        return x, p / p.sum(axis=1 if len(shape) > 1 else 0, keepdims=True)
    t = np.asarray(rng.integers(0, C, target_shape))
    if kind.startswith("index-ignore") and t.ndim:
        t.flat[::2] = 2 if kind.endswith("-2") else -100
    return x, t


def _eager_kwargs(kwargs, dtype):
    return {k: eager.tensor(v, dtype=dtype) if isinstance(v, np.ndarray) else v
            for k, v in kwargs.items()}


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64], ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_cross_entropy_matches_numpy_reference(case, reduction, dtype):
    shape, kind, kwargs = CASES[case]
    x, t = _inputs(shape, kind)
    target = eager.tensor(t, dtype=dtype if kind == "probs" else eager.int64)
    ours = F.cross_entropy(eager.tensor(x, dtype=dtype), target, reduction=reduction,
                           **_eager_kwargs(kwargs, dtype))
    expected = ref_cross_entropy(x, t, reduction=reduction, **kwargs)
    assert ours.dtype is dtype
    np.testing.assert_allclose(ours.numpy(), expected, **TOLERANCE[dtype])


@pytest.mark.parametrize("case", ["plain", "ignore", "all-options", "kdim", "probs-options"])
def test_cross_entropy_gradient_matches_finite_differences(case):
    shape, kind, kwargs = CASES[case]
    x, t = _inputs(shape, kind, seed=1)
    target = eager.tensor(t, dtype=eager.float64 if kind == "probs" else eager.int64)
    kwargs = _eager_kwargs(kwargs, eager.float64)
    assert gradcheck(lambda x: F.cross_entropy(x, target, **kwargs),
                     (eager.tensor(x, requires_grad=True),))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss_matches_numpy_reference(reduction):
    x, t = _inputs((5, C), "index-ignore")
    ours = F.nll_loss(eager.tensor(x, dtype=eager.float64), eager.tensor(t),
                      eager.tensor(WEIGHT), reduction=reduction)
    picked = -x[np.arange(5), np.where(t < 0, 0, t)] * WEIGHT[np.where(t < 0, 0, t)] * (t >= 0)
    expected = {"none": picked, "sum": picked.sum(),
                "mean": picked.sum() / (WEIGHT[t[t >= 0]]).sum()}[reduction]
    np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_mse_loss_matches_numpy_reference(reduction):
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    ours = F.mse_loss(eager.tensor(a), eager.tensor(b), reduction=reduction)
    sq = (a - b) ** 2
    np.testing.assert_allclose(ours.numpy(), {"none": sq, "sum": sq.sum(), "mean": sq.mean()}
                               [reduction], rtol=1e-12)


def test_every_target_ignored_gives_nan_mean_and_zero_sum():
    x = eager.randn(3, C, dtype=eager.float64)
    t = eager.tensor([-100, -100, -100])
    assert np.isnan(F.cross_entropy(x, t).item())
    assert F.cross_entropy(x, t, reduction="sum").item() == 0.0


def test_loss_modules_match_functional():
    x, t = _inputs((6, C), "index-ignore")
    x, t, w = eager.tensor(x), eager.tensor(t), eager.tensor(WEIGHT)
    module = eager.nn.CrossEntropyLoss(w, reduction="sum", label_smoothing=0.1)
    assert module(x, t).item() == F.cross_entropy(x, t, w, reduction="sum",
                                                  label_smoothing=0.1).item()
    weighted = eager.nn.CrossEntropyLoss(eager.ones(C))
    assert list(weighted.state_dict()) == ["weight"]  # a buffer, as in PyTorch
    assert weighted.double().weight.dtype is eager.float64
    y = eager.randn(6, C, dtype=eager.float64)
    assert eager.nn.MSELoss("sum")(x, y).item() == F.mse_loss(x, y, reduction="sum").item()


@pytest.mark.parametrize("call, error, match", [
    (lambda x, t: F.cross_entropy(x, eager.tensor([0, 1, 4])), IndexError, "Target 4"),
    (lambda x, t: F.cross_entropy(x, eager.tensor([0, -3, 1])), IndexError, "Target -3"),
    (lambda x, t: F.cross_entropy(x, eager.tensor([0, 1])), ValueError, "batch_size"),
    (lambda x, t: F.cross_entropy(x, t, reduction="avg"), ValueError, "avg"),
    (lambda x, t: F.cross_entropy(x, eager.rand(3, C + 1)), RuntimeError, "shape"),
    (lambda x, t: F.nll_loss(x, t.float()), RuntimeError, "Long"),
    (lambda x, t: F.mse_loss(x, x, reduction="mean "), ValueError, "reduction"),
], ids=["target-too-big", "target-negative", "batch-mismatch", "bad-reduction",
        "probs-shape", "float-target", "mse-bad-reduction"])
def test_loss_errors(call, error, match):
    with pytest.raises(error, match=match):
        call(eager.randn(3, C), eager.tensor([0, 1, 2]))


@pytest.mark.parametrize("fn", [F.nll_loss, F.cross_entropy])
def test_ignored_rows_give_no_nan_and_no_gradient(fn):
    """An ignored row counts 0 whatever its input (a log-probability of -inf too), and a
    mean over no target is NaN with a zero gradient, as PyTorch's."""
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    x[1, 0] = -np.inf
    xs = eager.tensor(x).requires_grad_()
    loss = fn(xs, eager.tensor([1, -100, 2]))
    loss.backward()
    assert np.isfinite(loss.item())
    assert np.isfinite(xs.grad.numpy()).all() and (xs.grad.numpy()[1] == 0).all()
    xs = eager.tensor(np.nan_to_num(x, neginf=-3.0)).requires_grad_()
    loss = fn(xs, eager.tensor([-100, -100, -100]))
    loss.backward()
    assert np.isnan(loss.item())
    assert (xs.grad.numpy() == 0).all()
