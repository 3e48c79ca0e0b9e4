"""Losses under compile(): captured as one graph (no read of the targets' values on the
host), equal to eager in value and gradient; a model with its loss under fullgraph=True;
and what a graph break says when a loss-like call must read values."""
import numpy as np
import pytest

import compiler
import eager
from eager.nn import functional as F
from eager.testing import assert_close

N, C = 6, 5
TARGETS = np.array([0, 3, 2, 4, 3, 1])
IGNORED = np.array([0, 3, -100, 4, 3, 1])

CASES = {
    "ce": (lambda x, t: F.cross_entropy(x, t), TARGETS),
    "ce-ignore-index": (lambda x, t: F.cross_entropy(x, t, ignore_index=3), TARGETS),
    "ce-ignored-default": (lambda x, t: F.cross_entropy(x, t), IGNORED),
    "ce-smoothing": (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2), IGNORED),
    "ce-smoothing-sum": (lambda x, t: F.cross_entropy(x, t, reduction="sum",
                                                      label_smoothing=0.1), TARGETS),
    "ce-none": (lambda x, t: F.cross_entropy(x, t, reduction="none", ignore_index=4), TARGETS),
    "ce-probabilities": (lambda x, t: F.cross_entropy(x, t.softmax(1), label_smoothing=0.1),
                         None),
    "nll": (lambda x, t: F.nll_loss(x.log_softmax(1), t, ignore_index=0), TARGETS),
    "mse": (lambda x, t: F.mse_loss(x, t), None),
    "l1-sum": (lambda x, t: F.l1_loss(x, t, reduction="sum"), None),
}


def _inputs(targets, dtype):
    rng = np.random.default_rng(7)
    x = eager.tensor(rng.standard_normal((N, C)), dtype=dtype, requires_grad=True)
    t = eager.tensor(targets) if targets is not None else \
        eager.tensor(rng.standard_normal((N, C)), dtype=dtype)
    return x, t


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(CASES))
def test_compiled_loss_and_its_gradient_equal_eager(name, dtype):
    loss, targets = CASES[name]
    x, t = _inputs(targets, dtype)
    expected = loss(x, t)
    expected.sum().backward()
    want_grad, x.grad = x.grad, None
    cf = compiler.compile(loss, fullgraph=True)
    got = cf(x, t)
    got.sum().backward()
    tol = dict(rtol=1e-5, atol=1e-6) if dtype is eager.float32 else dict(rtol=1e-12, atol=1e-13)
    assert_close(got, expected, **tol)
    assert_close(x.grad, want_grad, **tol)
    entry = next(iter(cf.entries.values()))
    assert not entry.breaks and len(entry.regions) == 1


def test_compiled_cross_entropy_replays_without_python_and_reads_new_targets():
    cf = compiler.compile(lambda x, t: F.cross_entropy(x, t, ignore_index=1), fullgraph=True)
    x = eager.randn(N, C)
    for targets in (TARGETS, np.array([1, 1, 0, 2, 1, 4]), np.array([2, 0, 0, 0, 0, 4])):
        t = eager.tensor(targets)
        assert_close(cf(x, t), F.cross_entropy(x, t, ignore_index=1), rtol=1e-5, atol=1e-6)
    entry = next(iter(cf.entries.values()))
    assert entry.mode == "replay" and entry.calls == 3
    assert np.isnan(cf(x, eager.ones(N, dtype=eager.int64)).item())  # every target ignored


def test_compiled_cross_entropy_checks_its_targets_when_it_runs():
    cf = compiler.compile(lambda x, t: F.cross_entropy(x, t), fullgraph=True)
    x = eager.randn(3, C)
    cf(x, eager.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match=f"index 7 is out of bounds for dimension 1 with "
                                           f"size {C}"):
        cf(x, eager.tensor([0, 7, 2]))


def test_char_transformer_and_its_loss_compile_as_one_graph():
    from examples.char_transformer import CharTransformer

    class WithLoss(eager.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = CharTransformer(11, d_model=16, heads=2, layers=2, context=8)

        def forward(self, idx, targets):
            logits = self.model(idx)
            return F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1),
                                   ignore_index=0, label_smoothing=0.1)

    eager.manual_seed(3)
    m = WithLoss()
    rng = np.random.default_rng(3)
    idx, targets = (eager.tensor(rng.integers(0, 11, (2, 8))) for _ in range(2))
    cf = compiler.compile(m, fullgraph=True)
    got = cf(idx, targets)
    got.backward()
    grads = [p.grad for p in m.parameters()]
    m.zero_grad()
    expected = m(idx, targets)
    expected.backward()
    assert_close(got, expected, rtol=1e-5, atol=1e-6)
    for g, p in zip(grads, m.parameters()):
        assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    entry = next(iter(cf._compiled.entries.values()))
    assert not entry.breaks and len(entry.regions) == 1


def test_a_break_names_the_user_call_the_value_and_why():
    def f(x, t):
        return F.one_hot(t * 1) + x  # num_classes from the data: a value must be read
    cf = compiler.compile(f, backend="eager")
    cf(eager.zeros(4, 3), eager.tensor([0, 2, 1, 0]))
    reason = next(iter(cf.entries.values())).breaks[0].reason
    assert reason == ("F.one_hot() needs a concrete value: it reads the values of a captured "
                      "(4,) int64 tensor (its output size, num_classes, is the largest class "
                      "value + 1)")
    assert "F.one_hot() needs a concrete value" in cf.explain()
    with pytest.raises(RuntimeError, match=r"fullgraph=True.*F.one_hot\(\) needs"):
        compiler.compile(f, backend="eager", fullgraph=True)(eager.zeros(4, 3),
                                                             eager.tensor([0, 2, 1, 0]))
