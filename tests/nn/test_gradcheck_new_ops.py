"""Finite differences (eager.autograd.gradcheck, float64) for the ops written in other ops:
derived tensor ops, activations, losses, normalisations, convolutions and pools, and the
recurrent cells. Inputs avoid the kinks (0 for relu-like functions, ties for max)."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(7)
TARGET = eager.tensor(RNG.uniform(0.1, 0.9, (3, 4)))  # a constant: not an input checked


def _t(*shape, low=None):
    values = RNG.standard_normal(shape)
    if low is not None:
        values = RNG.uniform(low, low + 0.9, shape)
    return eager.tensor(values, requires_grad=True)


CASES = {
    "tril": (lambda x: eager.tril(x, -1), [(3, 4)]),
    "roll-flip": (lambda x: eager.roll(eager.flip(x, [0]), 2, 1), [(3, 4)]),
    "topk": (lambda x: x.topk(2, 1).values, [(3, 5)]),
    "sort": (lambda x: eager.sort(x, 0, descending=True).values, [(4, 3)]),
    "kthvalue": (lambda x: x.kthvalue(2, 1).values, [(3, 5)]),
    "repeat-interleave": (lambda x: x.repeat(2, 1).repeat_interleave(2, 1), [(2, 3)]),
    "cumsum": (lambda x: eager.cumsum(x, 1), [(2, 70)]),
    "cumprod": (lambda x: eager.cumprod(x, 1), [(2, 6)]),
    "logsumexp": (lambda x: eager.logsumexp(x, 1), [(3, 4)]),
    "norm-p3": (lambda x: x.norm(3, dim=1), [(3, 4)]),
    "einsum": (lambda a, b: eager.einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 2)]),
    "diag-trace": (lambda x: eager.diag(x, 1) + eager.trace(x), [(3, 3)]),
    "log1p-expm1": (lambda x: eager.log1p(x.abs()) + eager.expm1(x), [(5,)]),
    "elu-softplus-mish": (lambda x: F.elu(x) + F.softplus(x, 2.0) + F.mish(x), [(3, 4)]),
    "glu-softmin": (lambda x: F.glu(x, 1) + F.softmin(x[:, :2], 1), [(3, 4)]),
    "cosine-similarity": (lambda a, b: F.cosine_similarity(a, b), [(3, 4), (3, 4)]),
    "bce-with-logits": (lambda x: F.binary_cross_entropy_with_logits(x, TARGET), [(3, 4)]),
    "bce": (lambda p: F.binary_cross_entropy(p, eager.full((3, 4), 0.3, dtype=eager.float64)),
            [((3, 4), 0.05)]),
    "kl-div": (lambda x: F.kl_div(F.log_softmax(x, 1), TARGET / TARGET.sum(1, keepdim=True),
                                  reduction="batchmean"), [(3, 4)]),
    "huber-smooth-l1": (lambda a, b: F.huber_loss(a, b, delta=0.5) + F.smooth_l1_loss(b, a),
                        [(3, 4), (3, 4)]),
    "gaussian-nll": (lambda a, v: F.gaussian_nll_loss(a, TARGET, v.abs() + 0.1),
                     [(3, 4), (3, 4)]),
    "triplet": (lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=3.0), [(3, 4)] * 3),
    "batch-norm": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                   [(4, 3, 5), (3,), (3,)]),
    "group-norm": (lambda x, w: F.group_norm(x, 2, w), [(2, 4, 3), (4,)]),
    "rms-norm": (lambda x, w: F.rms_norm(x, (4,), w), [(3, 4), (4,)]),
    "pad-reflect": (lambda x: F.pad(x, (2, 1, 1, 1), mode="reflect"), [(1, 2, 3, 4)]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
               [(1, 4, 5, 5), (4, 2, 3, 3), (4,)]),
    "conv-transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1),
                         [(1, 2, 3, 3), (2, 3, 2, 2)]),
    "max-pool2d": (lambda x: F.max_pool2d(x, 2, 1, 1), [(1, 2, 4, 4)]),
    "avg-pool-adaptive": (lambda x: F.avg_pool2d(x, 3, 2, 1) .sum() +
                          F.adaptive_avg_pool2d(x, (2, 3)).sum(), [(1, 2, 5, 6)]),
}


def _inputs(specs):
    out = []
    for spec in specs:
        if isinstance(spec[0], tuple):
            shape, low = spec
            out.append(_t(*shape, low=low))
        else:
            out.append(_t(*spec))
    return out


@pytest.mark.parametrize("case", CASES)
def test_gradients_match_finite_differences(case):
    fn, specs = CASES[case]
    assert gradcheck(fn, _inputs(specs), atol=1e-6, rtol=1e-4)


def test_recurrent_cells_and_attention_match_finite_differences():
    eager.manual_seed(0)
    cell = eager.nn.GRUCell(3, 4).double()
    attention = eager.nn.MultiheadAttention(4, 2, batch_first=True).double()
    assert gradcheck(lambda x, h: cell(x, h), [_t(2, 3), _t(2, 4)], atol=1e-6, rtol=1e-4)
    assert gradcheck(lambda q: attention(q, q, q)[0], [_t(1, 3, 4)], atol=1e-6, rtol=1e-4)
