"""nn.functional behaviour that public programs rely on, compared with PyTorch in float64:
grouped-query attention (Llama's sdpa path), pixel shuffle, channel dropout's ranks."""
import warnings

import numpy as np
import pytest

import eager
import eager.nn.functional as F

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

RNG = np.random.default_rng(30)
TOL = dict(rtol=1e-10, atol=1e-12)


def _pairs(*shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    return ([eager.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def _same_values_and_gradients(ours, theirs, out, tout):
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), **TOL)
    w = RNG.standard_normal(tuple(tout.shape))
    out.backward(eager.tensor(w))
    tout.backward(torch.tensor(w))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **TOL)


# grouped-query attention ------------------------------------------------------------------
@pytest.mark.parametrize("q, k, v, kwargs", [
    ((2, 6, 4, 8), (2, 2, 5, 8), (2, 2, 5, 3), {}),
    ((2, 6, 4, 8), (2, 3, 4, 8), (2, 1, 4, 8), {"is_causal": True}),
    ((1, 4, 3, 8), (1, 1, 3, 8), (1, 2, 3, 8), {"scale": 0.3}),
    ((6, 3, 8), (2, 3, 8), (2, 3, 8), {}),
    ((2, 4, 3, 8), (2, 4, 3, 8), (2, 4, 3, 8), {}),  # as many heads: nothing to repeat
], ids=["llama", "causal", "scale-kv-differ", "unbatched", "equal-heads"])
def test_sdpa_with_enable_gqa_repeats_key_and_value_heads_as_pytorch(q, k, v, kwargs):
    ours, theirs = _pairs(q, k, v)
    out = F.scaled_dot_product_attention(*ours, enable_gqa=True, **kwargs)
    tout = torch.nn.functional.scaled_dot_product_attention(*theirs, enable_gqa=True, **kwargs)
    _same_values_and_gradients(ours, theirs, out, tout)


def test_sdpa_with_a_mask_and_enable_gqa_matches_pytorch():
    ours, theirs = _pairs((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 8))
    mask = RNG.random((3, 5)) < 0.7
    mask[:, 0] = True
    out = F.scaled_dot_product_attention(*ours, attn_mask=eager.tensor(mask), enable_gqa=True)
    tout = torch.nn.functional.scaled_dot_product_attention(
        *theirs, attn_mask=torch.tensor(mask), enable_gqa=True)
    _same_values_and_gradients(ours, theirs, out, tout)


def test_sdpa_with_enable_gqa_refuses_heads_that_do_not_divide_the_querys():
    q, k, v = eager.ones(1, 6, 3, 8), eager.ones(1, 4, 3, 8), eager.ones(1, 2, 3, 8)
    with pytest.raises(RuntimeError, match=r"number of heads in key \(4\) and value \(2\) must "
                                           r"divide the number of heads in query \(6\)"):
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


# channel dropout: the ranks each takes, and what it drops whole ----------------------------
def _dropout_outcome(lib, name, rank):
    """(warnings, error or the dims the output is constant along) of lib's `name` on ones:
    the dims a dropped channel spans."""
    lib.manual_seed(0)
    x = lib.ones(*[10] * rank)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = getattr(lib.nn.functional, name)(x, 0.5).numpy()
        except RuntimeError as e:
            return [], str(e)
    shared = [bool((np.diff(out, axis=d) == 0).all()) for d in range(rank)]
    assert set(np.unique(out)) == {0.0, 2.0}
    return [str(w.message) for w in caught], shared


@pytest.mark.parametrize("name", ["dropout1d", "dropout2d", "dropout3d"])
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5, 6])
def test_channel_dropout_takes_the_ranks_pytorch_takes_and_drops_the_same_slices(name, rank):
    assert _dropout_outcome(eager, name, rank) == _dropout_outcome(torch, name, rank)


def test_channel_dropout_out_of_training_or_with_a_bad_p():
    x = eager.ones(2, 3, 4)
    assert F.dropout1d(x, 0.5, training=False).tolist() == x.tolist()
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        F.dropout2d(eager.ones(2), 1.5)
