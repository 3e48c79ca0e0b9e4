"""The activations, losses, normalisations, channel dropout and padding beyond the
first layers (eager/nn/_activations.py, _losses.py, _normalization.py and their modules):
values and gradients against PyTorch in float64, and numpy where the answer is simple."""
import math

import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 6)) * 3
X[0, :3] = [0.0, 25.0, -25.0]  # the kinks, and softplus's threshold
Y = RNG.standard_normal((4, 6))
P = RNG.uniform(0.02, 0.98, (4, 6))
T = RNG.uniform(0, 1, (4, 6))
SIGNS = np.where(RNG.uniform(size=4) > 0.5, 1.0, -1.0)
IMAGES = RNG.standard_normal((3, 4, 5, 6))


def _torch():
    return pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


CASES = {  # id: (fn(lib, F, *inputs), inputs: arrays whose gradients are compared)
    "leaky_relu": (lambda lib, F, x: F.leaky_relu(x, 0.2), [X]),
    "elu": (lambda lib, F, x: F.elu(x, 0.7), [X]),
    "celu": (lambda lib, F, x: F.celu(x, 1.5), [X]),
    "selu": (lambda lib, F, x: F.selu(x), [X]),
    "softplus": (lambda lib, F, x: F.softplus(x), [X]),
    "softplus-beta": (lambda lib, F, x: F.softplus(x, beta=2.0, threshold=5.0), [X]),
    "softsign": (lambda lib, F, x: F.softsign(x), [X]),
    "hardtanh": (lambda lib, F, x: F.hardtanh(x, -2.0, 1.5), [X]),
    "relu6": (lambda lib, F, x: F.relu6(x), [X]),
    "logsigmoid": (lambda lib, F, x: F.logsigmoid(x), [X]),
    "mish": (lambda lib, F, x: F.mish(x), [X]),
    "tanhshrink": (lambda lib, F, x: F.tanhshrink(x), [X]),
    "softshrink": (lambda lib, F, x: F.softshrink(x, 0.7), [X]),
    "hardshrink": (lambda lib, F, x: F.hardshrink(x, 0.7), [X]),
    "threshold": (lambda lib, F, x: F.threshold(x, 0.5, -3.0), [X]),
    "glu": (lambda lib, F, x: F.glu(x, 1), [X]),
    "softmin": (lambda lib, F, x: F.softmin(x, 1), [X]),
    "prelu": (lambda lib, F, x, w: F.prelu(x.reshape(2, 3, 4), w), [X, np.array([0.1, -0.2, 0.3])]),
    "normalize": (lambda lib, F, x: F.normalize(x, dim=1), [X]),
    "normalize-p1": (lambda lib, F, x: F.normalize(x, p=1.0, dim=0), [X]),
    "cosine_similarity": (lambda lib, F, a, b: F.cosine_similarity(a, b), [X, Y]),
    "pairwise_distance": (lambda lib, F, a, b: F.pairwise_distance(a, b, p=3.0), [X, Y]),
    "bce": (lambda lib, F, p, t: F.binary_cross_entropy(p, t), [P, T]),
    "bce-weighted-sum": (lambda lib, F, p, t: F.binary_cross_entropy(
        p, t, lib.tensor(Y[0]), reduction="sum"), [P, T]),
    "bce-logits": (lambda lib, F, x, t: F.binary_cross_entropy_with_logits(x, t), [X, T]),
    "bce-logits-pos-weight": (lambda lib, F, x, t: F.binary_cross_entropy_with_logits(
        x, t, reduction="none", pos_weight=lib.tensor(np.abs(Y[0]) + 0.5)), [X, T]),
    "smooth_l1": (lambda lib, F, a, b: F.smooth_l1_loss(a, b, beta=0.5), [X, Y]),
    "smooth_l1-beta0": (lambda lib, F, a, b: F.smooth_l1_loss(a, b, beta=0.0), [X, Y]),
    "huber": (lambda lib, F, a, b: F.huber_loss(a, b, delta=1.3, reduction="sum"), [X, Y]),
    "kl_div": (lambda lib, F, x, t: F.kl_div(F.log_softmax(x, 1), t, reduction="batchmean"),
               [X, T / T.sum(1, keepdims=True)]),
    "kl_div-log-target": (lambda lib, F, x, t: F.kl_div(x, t, reduction="none", log_target=True),
                          [X * 0.1, Y * 0.1]),
    "margin_ranking": (lambda lib, F, a, b: F.margin_ranking_loss(
        a[:, 0], b[:, 0], lib.tensor(SIGNS), margin=0.3), [X, Y]),
    "cosine_embedding": (lambda lib, F, a, b: F.cosine_embedding_loss(
        a, b, lib.tensor(SIGNS), margin=0.1), [X, Y]),
    "hinge_embedding": (lambda lib, F, x: F.hinge_embedding_loss(
        x, lib.tensor(np.tile(SIGNS, (6, 1)).T.copy()), margin=2.0), [X]),
    "soft_margin": (lambda lib, F, x: F.soft_margin_loss(
        x, lib.tensor(np.tile(SIGNS, (6, 1)).T.copy())), [X]),
    "poisson_nll": (lambda lib, F, x, t: F.poisson_nll_loss(x * 0.3, t * 4, full=True), [X, T]),
    "poisson_nll-rates": (lambda lib, F, p, t: F.poisson_nll_loss(p, t, log_input=False), [P, T]),
    "gaussian_nll": (lambda lib, F, a, b, v: F.gaussian_nll_loss(a, b, v, full=True),
                     [X, Y, np.abs(T) + 0.1]),
    "triplet_margin": (lambda lib, F, a, p, n: F.triplet_margin_loss(a, p, n, margin=2.0,
                                                                     swap=True), [X, Y, T]),
    "multilabel_soft_margin": (lambda lib, F, x, t: F.multilabel_soft_margin_loss(
        x, (t > 0.5).to(x.dtype)), [X, T]),
    "batch_norm-train": (lambda lib, F, x, w, b: F.batch_norm(
        x, None, None, w, b, training=True), [IMAGES, Y[0, :4], Y[1, :4]]),
    "batch_norm-eval": (lambda lib, F, x: F.batch_norm(
        x, lib.tensor(Y[0, :4]), lib.tensor(np.abs(Y[1, :4]) + 0.5)), [IMAGES]),
    "group_norm": (lambda lib, F, x, w, b: F.group_norm(x, 2, w, b), [IMAGES, Y[0, :4], Y[1, :4]]),
    "instance_norm": (lambda lib, F, x: F.instance_norm(x), [IMAGES]),
    "rms_norm": (lambda lib, F, x, w: F.rms_norm(x, (5, 6), w), [IMAGES, Y[:, :5].T[:5, :6]
                                                                  if False else X[:5, :6]
                                                                  if X.shape[0] >= 5 else
                                                                  np.ones((5, 6))]),
    "pad-constant": (lambda lib, F, x: F.pad(x, (1, 2, 0, 3), value=1.5), [IMAGES]),
    "pad-crop": (lambda lib, F, x: F.pad(x, (-1, 2)), [IMAGES]),
    "pad-reflect": (lambda lib, F, x: F.pad(x, (2, 3, 1, 1), mode="reflect"), [IMAGES]),
    "pad-replicate": (lambda lib, F, x: F.pad(x, (2, 3, 1, 4), mode="replicate"), [IMAGES]),
    "pad-circular": (lambda lib, F, x: F.pad(x, (2, 3, 1, 1), mode="circular"), [IMAGES]),
}


def _run(lib, case):
    fn, arrays = CASES[case]
    functional = lib.nn.functional
    inputs = [lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in arrays]
    out = fn(lib, functional, *inputs)
    (out * lib.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(out.shape))).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else None
                                  for t in inputs]


@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients_equal_torchs_in_float64(case):
    torch = _torch()
    (ours, our_grads), (theirs, their_grads) = _run(eager, case), _run(torch, case)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    for i, (g, ref) in enumerate(zip(our_grads, their_grads)):
        assert (g is None) == (ref is None), f"gradient {i}"
        if g is not None:
            np.testing.assert_allclose(g, ref, rtol=1e-9, atol=1e-12, err_msg=f"gradient {i}")


@pytest.mark.parametrize("mode, numpy_mode", [("reflect", "reflect"), ("replicate", "edge"),
                                              ("circular", "wrap"), ("constant", "constant")])
def test_pad_equals_numpys_pad(mode, numpy_mode):
    got = F.pad(eager.tensor(IMAGES), (2, 1, 3, 0), mode=mode).numpy()
    np.testing.assert_array_equal(got, np.pad(IMAGES, [(0, 0), (0, 0), (3, 0), (2, 1)],
                                              mode=numpy_mode))


def test_pad_names_bad_amounts_and_modes():
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(eager.ones(1, 2, 3), (3, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="Padding length should be even"):
        F.pad(eager.ones(2, 3), (1, 2, 3))
    with pytest.raises(NotImplementedError, match="mode 'mirror' is not supported"):
        F.pad(eager.ones(2, 3), (1, 1), mode="mirror")


def test_batch_norm_modules_keep_running_statistics_as_torch_does():
    torch = _torch()
    batches = [RNG.standard_normal((5, 3, 4)) * (i + 1) + i for i in range(3)]
    results = []
    for lib in (eager, torch):
        for momentum in (0.1, None):
            m = lib.nn.BatchNorm1d(3, momentum=momentum).double()
            outs = [m(lib.tensor(b)).detach().numpy() for b in batches]
            m.eval()
            outs.append(m(lib.tensor(batches[0])).detach().numpy())
            results.append(outs + [m.running_mean.numpy(), m.running_var.numpy(),
                                   np.asarray(m.num_batches_tracked.item())])
    for ours, theirs in zip(results[:2], results[2:]):
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert sorted(nn.BatchNorm2d(4).state_dict()) == sorted(torch.nn.BatchNorm2d(4).state_dict())


def test_norm_modules_check_their_input_rank():
    with pytest.raises(ValueError, match="expected 4D input \\(got 3D input\\)"):
        nn.BatchNorm2d(3)(eager.ones(2, 3, 4))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm1d(3)(eager.ones(1, 3))
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(eager.ones(2, 6), 4)


def test_channel_dropout_zeroes_whole_channels_and_scales_the_rest():
    eager.manual_seed(0)
    x = eager.ones(8, 16, 5, 5)
    out = nn.Dropout2d(0.5)(x).numpy()
    per_channel = out.reshape(8, 16, 25)
    assert set(np.unique(per_channel)) == {0.0, 2.0}
    assert (per_channel.min(2) == per_channel.max(2)).all()  # a channel is all kept or all not
    assert 0.3 < (per_channel[:, :, 0] == 0).mean() < 0.7
    m = nn.Dropout1d(0.5)
    m.eval()
    assert m(eager.ones(2, 3, 4)).tolist() == eager.ones(2, 3, 4).tolist()
    with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
        nn.Dropout2d()(eager.ones(2, 3))  # as PyTorch: read as (N, C)


def test_modules_take_their_options_as_torchs_do():
    torch = _torch()
    pairs = [("LeakyReLU", (0.3,)), ("ELU", (), {"alpha": 0.5}), ("Softplus", (2.0, 10.0)),
             ("Hardtanh", (-0.5, 0.5)), ("Threshold", (0.1, 20.0)), ("GLU", ()),
             ("Softmin", (1,)), ("CosineSimilarity", ()), ("PairwiseDistance", (1.0,)),
             ("BCEWithLogitsLoss", ()), ("HuberLoss", ("sum", 0.5)), ("SmoothL1Loss", ()),
             ("KLDivLoss", (), {"reduction": "batchmean"}), ("GroupNorm", (2, 6)),
             ("RMSNorm", (6,)), ("ReflectionPad1d", (2,)), ("ConstantPad2d", ((1, 0, 2, 1), 4.0)),
             ("Unflatten", (1, (2, 3)))]
    x = RNG.standard_normal((4, 6))
    for name, args, *kw in pairs:
        kwargs = kw[0] if kw else {}
        two = name in ("CosineSimilarity", "PairwiseDistance", "BCEWithLogitsLoss", "HuberLoss",
                       "SmoothL1Loss", "KLDivLoss")
        values = []
        for lib in (eager, torch):
            module = getattr(lib.nn, name)(*args, **kwargs)
            module = module.double() if hasattr(module, "double") else module
            inputs = [lib.tensor(x)] + ([lib.tensor(np.abs(x) / 10)] if two else [])
            if name.endswith("Pad1d"):
                inputs = [lib.tensor(x[None])]
            values.append(module(*inputs).detach().numpy())
        np.testing.assert_allclose(values[0], values[1], rtol=1e-10, err_msg=name)


def test_bce_refuses_probabilities_outside_0_1_and_mismatched_sizes():
    with pytest.raises(RuntimeError, match="all elements of input should be between 0 and 1"):
        F.binary_cross_entropy(eager.tensor([0.5, 1.5]), eager.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="Using a target size \\(\\[3\\]\\) that is different"):
        F.binary_cross_entropy(eager.tensor([0.5, 0.5]), eager.tensor([1.0, 0.0, 1.0]))
    assert math.isfinite(F.binary_cross_entropy(eager.tensor([0.0, 1.0]),
                                                eager.tensor([1.0, 0.0])).item())  # -100 cap
