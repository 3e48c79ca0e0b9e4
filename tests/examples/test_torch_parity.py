"""Training parity with PyTorch: the same initial weights and batches, 20 optimiser steps
of the MLP (Adam) and of the character transformer (AdamW): losses and parameters agree
to 1e-4 relative in float32 at every step.

Parameters are compared tensor by tensor, relative to the tensor's norm: Adam's update
g / (|g| + eps) turns last-bit differences of a gradient near eps into visible
differences of single elements, so an elementwise bound would test float rounding."""
import numpy as np
import pytest

import eager
from examples import char_transformer, mlp_classifier

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

RTOL = 1e-4


def _copy_weights(kiln_model, torch_model):
    state = {k: torch.from_numpy(v.numpy().copy()) for k, v in kiln_model.state_dict().items()}
    torch_model.load_state_dict(state)


def _assert_params_close(kiln_model, torch_model, step):
    theirs = dict(torch_model.named_parameters())
    for name, p in kiln_model.named_parameters():
        ours, ref = p.detach().numpy(), theirs[name].detach().numpy()
        error = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
        assert error < RTOL, f"parameter {name} at step {step}: relative error {error:.2e}"


def _run(kiln_model, torch_model, kiln_opt, torch_opt, batches, loss_fn):
    torch.manual_seed(0)
    for step, (x, y) in enumerate(batches):
        ours = loss_fn(eager, kiln_model, eager.tensor(x), eager.tensor(y))
        kiln_opt.zero_grad()
        ours.backward()
        kiln_opt.step()
        theirs = loss_fn(torch, torch_model, torch.from_numpy(x), torch.from_numpy(y))
        torch_opt.zero_grad()
        theirs.backward()
        torch_opt.step()
        np.testing.assert_allclose(ours.item(), theirs.item(), rtol=RTOL,
                                   err_msg=f"loss at step {step}")
        _assert_params_close(kiln_model, torch_model, step)


def _mlp_loss(lib, model, x, y):
    return lib.nn.functional.cross_entropy(model(x), y)


def test_mlp_adam_matches_pytorch_for_20_steps():
    eager.manual_seed(1)
    ours = mlp_classifier.make_model(hidden=256, classes=10, inputs=784)
    theirs = mlp_classifier.make_model(hidden=256, classes=10, inputs=784, torch=torch)
    _copy_weights(ours, theirs)
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((32, 784)).astype(np.float32),
                rng.integers(0, 10, 32).astype(np.int64)) for _ in range(20)]
    _run(ours, theirs, eager.optim.Adam(ours.parameters(), lr=1e-3),
         torch.optim.Adam(theirs.parameters(), lr=1e-3), batches, _mlp_loss)


def _lm_loss(lib, model, x, y):
    logits = model(x)
    return lib.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


@pytest.mark.slow
def test_char_transformer_adamw_matches_pytorch_for_20_steps():
    _, chars, data = char_transformer.load_text()
    eager.manual_seed(2)
    ours = char_transformer.CharTransformer(len(chars))
    theirs = char_transformer.define(torch)(len(chars))
    _copy_weights(ours, theirs)
    stream = char_transformer.batches(data, 8, 32, np.random.default_rng(0))
    batches = [tuple(t.numpy() for t in next(stream)) for _ in range(20)]
    _run(ours, theirs, eager.optim.AdamW(ours.parameters(), lr=3e-3),
         torch.optim.AdamW(theirs.parameters(), lr=3e-3), batches, _lm_loss)
