"""In-place writes of tensors outside the graph under compile (compiler/capture.py,
Trace._defers): a module's buffers (BatchNorm's running statistics and its batch count),
an argument or a global written in place with autograd recording nothing wait until
their region has run, then run eagerly, and a replay runs them after its graph. Ops run
with grad mode off inside a differentiable region are cut from the gradient (detach),
so the region keeps its compiled backward. Before, each such write broke the graph and
the entry re-ran its Python at every call (a CNN training step: a break per BatchNorm)."""
import numpy as np
import pytest

import compiler
import eager
from eager import nn
from eager.nn import functional as F
from eager.testing import assert_close


def _cnn():
    eager.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def _train(compiled: bool, backend: str = "eager", steps: int = 4):
    model = _cnn()
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    run = compiler.compile(step, backend=backend) if compiled else step
    losses = []
    for _ in range(steps):
        x = eager.tensor(rng.standard_normal((5, 3, 6, 6)), dtype=eager.float32)
        y = eager.tensor(rng.integers(0, 3, 5))
        losses.append(run(x, y).item())
    return model, losses, run


@pytest.mark.parametrize("backend", ["eager", "native"])
def test_a_cnn_training_step_with_batch_norm_is_one_graph_that_replays(backend):
    model, losses, run = _train(True, backend)
    model_e, losses_e, _ = _train(False)
    np.testing.assert_allclose(losses, losses_e, rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(model.state_dict().items(), model_e.state_dict().items()):
        assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)  # running stats and counts too
    (entry,) = run.entries.values()
    assert entry.mode == "replay" and not entry.breaks, entry.why_python
    assert len(entry.regions) == 1 and entry.calls == 4
    writes = [s.what for s in entry.steps if s.write]
    assert len(writes) == 2 * 5 and writes[0].startswith("aten::add_")  # count, 2 stats x 2
    assert "in-place writes, run eagerly between graphs" in run.explain()


def test_a_write_to_an_argument_is_replayed_on_each_calls_argument():
    def f(x, total):
        y = x * 2
        with eager.no_grad():
            total.add_(y.sum())
        return y + 1
    cf = eager.compile(f)
    for value in (1.0, 2.0, 3.0):
        total = eager.zeros(())
        out = cf(eager.full((3,), value), total)
        assert out.tolist() == [2 * value + 1] * 3 and total.item() == 6 * value
    (entry,) = cf.entries.values()
    assert entry.mode == "replay", entry.why_python


def test_a_read_after_a_write_sees_it():
    """The written tensor read again in the same call: the region runs first, then the
    write, then the read (in a new region)."""
    buffer = eager.ones(3)

    def f(x):
        with eager.no_grad():
            buffer.mul_(x.sum())
        return buffer + x
    cf = compiler.compile(f, backend="eager")
    for value in (1.0, 2.0):
        before = buffer.clone()
        out = cf(eager.full((3,), value))
        assert_close(buffer, before * 3 * value)
        assert_close(out, buffer + value)


def test_a_python_read_of_a_written_tensor_sees_the_write():
    counter = eager.zeros((), dtype=eager.int64)

    def f(x):
        counter.add_(1)
        return x * float(counter.item())
    cf = compiler.compile(f, backend="eager")
    assert cf(eager.ones(2)).tolist() == [1.0, 1.0]
    assert cf(eager.ones(2)).tolist() == [2.0, 2.0]  # (Python re-runs: it read a value)
    assert counter.item() == 2


def test_a_write_of_a_tensor_that_needs_a_gradient_still_breaks_and_raises_as_eagerly():
    w = eager.ones(3, requires_grad=True)
    cf = compiler.compile(lambda x: w.add_(x), backend="eager")
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        cf(eager.ones(3))


def test_ops_with_grad_mode_off_inside_a_region_get_no_gradient():
    """A value computed with grad mode off is a constant for backward, in the compiled
    backward as eagerly."""
    def f(x, w):
        y = x * w
        with eager.no_grad():
            scale = y.mean() * 2
        return (y * scale).sum()
    x, w = eager.randn(4), eager.randn(4, requires_grad=True)
    cf = compiler.compile(f, backend="eager")
    for _ in range(2):
        w.grad = None
        cf(x, w).backward()
        got = w.grad.clone()
        w.grad = None
        f(x, w).backward()
        assert_close(got, w.grad)
    (entry,) = cf.entries.values()
    assert entry.mode == "replay" and entry.needs_grad is not None


def test_a_break_after_a_differentiable_region_with_statistics_updates_runs():
    """A residual block's `x += shortcut` (an in-place op on a graph value, a break)
    after a BatchNorm in training: the region before it flushes with its compiled
    backward (its eager autograd records dropped), then the write runs."""
    eager.manual_seed(0)
    conv, norm = nn.Conv2d(2, 2, 3, padding=1), nn.BatchNorm2d(2)

    def block(x):
        out = norm(conv(x)).relu()
        out += x
        return out.sum()
    x = eager.randn(3, 2, 4, 4)
    cf = compiler.compile(block, backend="eager")
    got = cf(x)
    got.backward()
    grad = conv.weight.grad.clone()
    conv.weight.grad = None
    eager.manual_seed(0)
    conv_e, norm_e = nn.Conv2d(2, 2, 3, padding=1), nn.BatchNorm2d(2)
    expected = (norm_e(conv_e(x)).relu() + x).sum()
    expected.backward()
    assert_close(got, expected)
    assert_close(grad, conv_e.weight.grad)


@pytest.mark.parametrize("backend", ["eager", "native"])
def test_an_in_place_op_on_a_graph_value_is_its_out_of_place_twin(backend):
    """`out += x` (a residual block), `mul_`, `clamp_` on values of the graph: no
    break, the tensor stands for the result, gradients as eagerly."""
    def f(x, w):
        out = x * w
        out += x
        out.mul_(2).clamp_(-1.0, 3.0)
        return out.sum()
    x, w = eager.randn(3, 4), eager.randn(3, 4, requires_grad=True)
    cf = compiler.compile(f, backend=backend)
    for _ in range(2):
        w.grad = None
        got = cf(x, w)
        got.backward()
        grad = w.grad.clone()
        w.grad = None
        expected = f(x, w)
        expected.backward()
        assert_close(got, expected)
        assert_close(grad, w.grad)
    (entry,) = cf.entries.values()
    assert entry.mode == "replay" and not entry.breaks, entry.why_python


def test_an_in_place_op_on_a_value_with_views_still_breaks_and_the_views_see_it():
    def f(x):
        y = x * 2
        first = y[0]
        y += 1  # the view `first` sees this eagerly
        return first * 1
    cf = compiler.compile(f, backend="eager")
    x = eager.ones(2, 3)
    assert cf(x).tolist() == [3.0, 3.0, 3.0]
    assert cf(x).tolist() == [3.0, 3.0, 3.0]


def test_an_in_place_op_whose_result_type_differs_breaks_and_raises_as_eagerly():
    cf = compiler.compile(lambda x: (x * 2).add_(0.5), backend="eager")
    with pytest.raises(RuntimeError):
        cf(eager.ones(3, dtype=eager.int64))
