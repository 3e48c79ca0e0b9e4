"""nn.functional rules that need no reference library: dropout's statistics, attention
masks that must agree with each other, one_hot and layer_norm errors."""
import math

import numpy as np
import pytest

import eager
from eager.nn import functional as F


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_zeroes_a_fraction_p_and_scales_survivors(p):
    eager.manual_seed(0)
    x = eager.ones(200, 500, requires_grad=True)
    out = F.dropout(x, p, training=True)
    out.sum().backward()
    y = out.detach().numpy()
    dropped = y == 0
    assert abs(dropped.mean() - p) < 0.01  # six standard deviations at n = 100_000
    np.testing.assert_allclose(y[~dropped], 1 / (1 - p), rtol=1e-6)
    np.testing.assert_array_equal(x.grad.numpy(), y)  # d out / d x is the scaled mask


def test_dropout_draws_a_new_mask_each_call_and_repeats_under_a_seed():
    x = eager.ones(1000)
    eager.manual_seed(5)
    first, second = F.dropout(x).numpy(), F.dropout(x).numpy()
    eager.manual_seed(5)
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(F.dropout(x).numpy(), first)


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0])
def test_dropout_in_eval_is_the_identity(p):
    x = eager.randn(4, 5)
    np.testing.assert_array_equal(F.dropout(x, p, training=False).numpy(), x.numpy())
    layer = eager.nn.Dropout(p).eval()
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())


def test_dropout_p0_keeps_and_p1_drops_everything_in_training():
    x = eager.randn(4, 5, requires_grad=True)
    np.testing.assert_array_equal(F.dropout(x, 0.0).detach().numpy(), x.detach().numpy())
    out = eager.nn.Dropout(1.0)(x)
    out.sum().backward()
    assert not out.detach().numpy().any() and not x.grad.numpy().any()


@pytest.mark.parametrize("p", [-0.1, 1.5, math.nan])
def test_dropout_rejects_bad_p(p):
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(eager.ones(3), p)
    with pytest.raises(ValueError, match="between 0 and 1"):
        eager.nn.Dropout(p)


def _attend(mask_kind, q, k, v):
    L, S = q.shape[-2], k.shape[-2]
    keep = np.tril(np.ones((L, S), bool))
    if mask_kind == "causal":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if mask_kind == "bool":
        return F.scaled_dot_product_attention(q, k, v, eager.tensor(keep))
    float_mask = np.where(keep, 0.0, -np.inf).astype(np.float32)
    return F.scaled_dot_product_attention(q, k, v, eager.tensor(float_mask))


@pytest.mark.parametrize("shape", [(2, 5, 4), (1, 2, 3, 6)])
def test_causal_attention_equals_explicit_bool_and_float_masks(shape):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    results = {}
    for kind in ["causal", "bool", "float"]:
        leaves = [eager.tensor(a, requires_grad=True) for a in arrays]
        out = _attend(kind, *leaves)
        (out * out).sum().backward()
        results[kind] = [out.detach().numpy()] + [t.grad.numpy() for t in leaves]
    for kind in ["bool", "float"]:
        for ours, ref in zip(results[kind], results["causal"]):
            np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-7)
    first_row = results["causal"][0][..., 0, :]
    np.testing.assert_allclose(first_row, arrays[2][..., 0, :], rtol=1e-6)  # sees only key 0


def test_attention_rejects_mask_with_is_causal():
    q = eager.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, q, q, eager.ones(3, 3, dtype=eager.bool),
                                       is_causal=True)


def test_one_hot_values_and_dtype():
    out = F.one_hot(eager.tensor([2, 0, 1]), 4)
    assert out.dtype is eager.int64
    np.testing.assert_array_equal(out.numpy(), np.eye(4, dtype=np.int64)[[2, 0, 1]])
    assert F.one_hot(eager.tensor([1, 3])).shape == (2, 4)


@pytest.mark.parametrize("values, num_classes, match", [
    ([0, -1], 3, "non-negative"),
    ([0, 3], 3, "smaller than num_classes"),
    ([], -1, "empty tensor"),
])
def test_one_hot_rejects_out_of_range_classes(values, num_classes, match):
    with pytest.raises(RuntimeError, match=match):
        F.one_hot(eager.tensor(values, dtype=eager.int64), num_classes)


def test_layer_norm_rejects_mismatched_shape():
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(eager.randn(2, 3), (4,))
