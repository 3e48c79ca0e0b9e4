"""eager.utils.checkpoint: gradients equal to running without checkpointing (and to
finite differences), the function run again in backward, activations not kept, dropout's
random draws repeated, both the reentrant and the non-reentrant forms; and the
saved-tensor hooks (eager.autograd.graph) the non-reentrant form is built on."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import eager
from eager.autograd import gradcheck
from eager.autograd.graph import saved_tensors_hooks
from eager.utils.checkpoint import checkpoint, checkpoint_sequential

torch = pytest.importorskip("torch", reason="torch is not installed: no reference to compare")
FORMS = pytest.mark.parametrize("use_reentrant", [False, True])


def _f64(m, a, requires_grad=True):
    return m.tensor(np.asarray(a, dtype=np.float64), dtype=m.float64,
                    requires_grad=requires_grad)


class Block:
    """Two linear layers with tanh and dropout between; counts its calls and keeps a weak
    reference to its last hidden activation."""

    def __init__(self, m, seed: int, p: float = 0.0):
        rng = np.random.default_rng(seed)
        self.m, self.p = m, p
        self.w1 = _f64(m, rng.standard_normal((4, 6)))
        self.w2 = _f64(m, rng.standard_normal((6, 2)))
        self.calls = 0
        self.hidden = None

    def __call__(self, x, scale=1.0):
        self.calls += 1
        h = (x @ self.w1).tanh() * scale
        h = self.m.nn.functional.dropout(h, self.p, training=self.p > 0)
        self.hidden = weakref.ref(h)
        return (h @ self.w2).sigmoid()

    def params(self):
        return [self.w1, self.w2]


def _grads(m, block, x, run):
    out = run(block, x)
    (out * out).sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in [x] + block.params()]


@FORMS
def test_checkpoint_gives_the_gradients_of_no_checkpoint_and_of_torch(use_reentrant):
    x = np.random.default_rng(3).standard_normal((5, 4))
    plain = _grads(eager, Block(eager, 0), _f64(eager, x), lambda b, v: b(v))
    block = Block(eager, 0)
    ours = _grads(eager, block, _f64(eager, x),
                  lambda b, v: checkpoint(b, v, use_reentrant=use_reentrant))
    theirs = _grads(torch, Block(torch, 0), _f64(torch, x),
                    lambda b, v: torch.utils.checkpoint.checkpoint(
                        b, v, use_reentrant=use_reentrant))
    for a, b, c in zip(ours, plain, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-12)
        np.testing.assert_allclose(a, c, rtol=1e-10)
    assert block.calls == 2  # forward, and again in backward


@FORMS
def test_checkpointed_gradients_match_finite_differences(use_reentrant):
    block = Block(eager, 1)
    x = _f64(eager, np.random.default_rng(4).standard_normal((3, 4)))
    # the weights are read from the closure; autograd.grad reaches them only without
    # reentry (PyTorch's reentrant checkpoint refuses autograd.grad altogether)
    wrt = (x,) if use_reentrant else (x, block.w1)
    assert gradcheck(lambda *_: checkpoint(block, x, use_reentrant=use_reentrant), wrt)


def test_the_non_reentrant_form_keeps_no_activation_until_backward():
    x = _f64(eager, np.ones((2, 4)))
    block = Block(eager, 0)
    kept = block(x)
    gc.collect()
    assert block.hidden() is not None  # saved by tanh's and mm's nodes
    out = checkpoint(block, x, use_reentrant=False)
    gc.collect()
    assert block.hidden() is None and block.calls == 2
    out.sum().backward()
    assert block.calls == 3
    del kept


def test_the_non_reentrant_form_serves_autograd_grad_and_keyword_arguments():
    block = Block(eager, 2)
    x = _f64(eager, np.random.default_rng(5).standard_normal((3, 4)))
    expected = eager.autograd.grad(block(x, scale=0.5).sum(), block.params())
    got = eager.autograd.grad(checkpoint(block, x, scale=0.5, use_reentrant=False).sum(),
                              block.params())
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        checkpoint(block, x, scale=0.5, use_reentrant=True)


@FORMS
def test_dropout_draws_the_same_mask_when_run_again(use_reentrant):
    x = np.random.default_rng(6).standard_normal((8, 4))
    eager.manual_seed(7)
    plain = _grads(eager, Block(eager, 0, p=0.5), _f64(eager, x), lambda b, v: b(v))
    eager.manual_seed(7)
    ours = _grads(eager, Block(eager, 0, p=0.5), _f64(eager, x),
                  lambda b, v: checkpoint(b, v, use_reentrant=use_reentrant))
    for a, b in zip(ours, plain):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_checkpoint_without_use_reentrant_warns_and_takes_the_reentrant_form():
    block = Block(eager, 0)
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed"):
        out = checkpoint(block, _f64(eager, np.ones((1, 4))))
    assert type(out.grad_fn).__name__ == "CheckpointFunctionBackward"


def test_checkpoint_sequential_matches_the_sequential_run():
    rng = np.random.default_rng(8)
    layers = []
    for _ in range(4):
        lin = eager.nn.Linear(3, 3).double()
        with eager.no_grad():
            lin.weight.copy_(eager.tensor(rng.standard_normal((3, 3))))
        layers += [lin, eager.nn.Tanh()]
    model = eager.nn.Sequential(*layers)
    x = _f64(eager, rng.standard_normal((2, 3)))
    model(x).sum().backward()
    expected = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    checkpoint_sequential(model, 2, x, use_reentrant=False).sum().backward()
    for a, b in zip([p.grad for p in model.parameters()] + [x.grad], expected):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_under_compile_a_checkpoint_is_a_named_graph_break_with_eager_results():
    block = Block(eager, 0)
    x = _f64(eager, np.random.default_rng(9).standard_normal((3, 4)), requires_grad=False)

    def f(v):
        return checkpoint(block, v * 2, use_reentrant=False).sum()

    expected = f(x)
    expected.backward()
    grads = [p.grad for p in block.params()]
    for p in block.params():
        p.grad = None
    compiled = eager.compile(f)
    out = compiled(x)
    out.backward()
    assert out.item() == pytest.approx(expected.item(), rel=1e-12)
    for p, g in zip(block.params(), grads):
        np.testing.assert_allclose(p.grad.numpy(), g.numpy(), rtol=1e-12)
    assert "torch.utils.checkpoint runs eagerly at" in compiled.explain()


def test_saved_tensor_hooks_see_every_saved_tensor_and_give_backward_what_unpack_returns():
    packed, unpacked = [], []

    def pack(t):
        packed.append(t)
        return len(packed) - 1

    def unpack(i):
        unpacked.append(i)
        return packed[i]

    x = _f64(eager, [0.5, 1.5])
    with saved_tensors_hooks(pack, unpack):
        y = (x * x).exp()  # mul saves x twice, exp its result
    assert len(packed) == 3
    y.sum().backward()
    assert sorted(unpacked) == [0, 1, 2]
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.detach().numpy() ** 2) * 2 *
                               x.detach().numpy())
    z = x * x  # hooks are off again
    assert len(packed) == 3 and z.grad_fn is not None


def test_save_on_cpu_packs_each_saved_tensor_with_its_device_and_gives_torchs_gradients():
    from eager.autograd.graph import save_on_cpu
    hooks = save_on_cpu()
    assert isinstance(hooks, saved_tensors_hooks)
    x = eager.tensor([0.5, -1.0, 2.0])
    device, kept = hooks.pack_hook(x)
    assert device == x.device and kept.device.type == "cpu"
    assert hooks.unpack_hook((device, kept)).tolist() == x.tolist()
    grads = []
    for m, graph in ((eager, save_on_cpu), (torch, torch.autograd.graph.save_on_cpu)):
        a = m.tensor([0.5, -1.0, 2.0], requires_grad=True)
        with graph():
            y = (a * a).exp().sum()
        y.backward()
        grads.append(a.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)
