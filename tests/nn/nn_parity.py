"""Parity with PyTorch's modules: PyTorch's state_dict loaded into kiln's module, the same
float64 inputs on both sides, then results and every gradient compared at 1e-10."""
import contextlib
import warnings

import numpy as np
import pytest

import eager
from eager import nn

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

TOL = dict(rtol=1e-10, atol=1e-10)


def pair(name, *args, **kwargs):
    """PyTorch's module and kiln's, in float64, kiln's loaded from PyTorch's state_dict."""
    torch.manual_seed(0)
    with quietly():
        theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = getattr(nn, name)(*args, **kwargs).double()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: eager.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return theirs, ours


def flat(result):
    """A module's result as a flat list of tensors: output, h_n (and c_n)."""
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in flat(r)]
    return [] if result is None else [result]


def _close(ours, theirs, what):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **TOL,
                               err_msg=what)


@contextlib.contextmanager
def quietly():
    """PyTorch's advice on its fast paths (enable_nested_tensor ...) is not under test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def check_same(theirs, ours, arrays, pack=lambda ts: ts, seed=1, pack_ours=None):
    """Run both modules on `arrays` (float64, each requiring grad; `pack` builds the call's
    arguments from the tensors, `pack_ours` kiln's where they hold masks), compare results,
    then every gradient."""
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    k_in = [eager.tensor(a, requires_grad=True) for a in arrays]
    t_out, k_out = flat(theirs(*pack(t_in))), flat(ours(*(pack_ours or pack)(k_in)))
    assert len(t_out) == len(k_out)
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal(tuple(t.shape)) for t in t_out]
    for i, (k, t) in enumerate(zip(k_out, t_out)):
        assert tuple(k.shape) == tuple(t.shape), f"result {i}: {k.shape} vs {t.shape}"
        _close(k, t, f"result {i}")
    sum((t * torch.tensor(w)).sum() for t, w in zip(t_out, weights)).backward()
    sum((k * eager.tensor(w)).sum() for k, w in zip(k_out, weights)).backward()
    for i, (k, t) in enumerate(zip(k_in, t_in)):
        _close(k.grad, t.grad, f"gradient of input {i}")
    t_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        _close(p.grad, t_params[name].grad, f"gradient of {name}")
