"""Convolutions and pools (eager/nn/_convolution.py and nn/modules/conv.py): against a
direct float64 loop in numpy, and values, indices and gradients against PyTorch's."""
import numpy as np
import pytest

import eager
import eager.nn as nn
import eager.nn.functional as F
from eager.tensor import ops

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 4, 9, 8))
X1 = RNG.standard_normal((2, 3, 11))


def _torch():
    return pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


def _direct_conv2d(x, w, b, stride, padding, dilation, groups):
    """The definition, one output element at a time."""
    x = np.pad(x, [(0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2])
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for oc in range(o):
        g = oc // per_group
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg,
                          i * stride[0]:i * stride[0] + dilation[0] * (kh - 1) + 1:dilation[0],
                          j * stride[1]:j * stride[1] + dilation[1] * (kw - 1) + 1:dilation[1]]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out + (0 if b is None else b.reshape(1, -1, 1, 1))


@pytest.mark.parametrize("stride, padding, dilation, groups", [
    ((1, 1), (0, 0), (1, 1), 1), ((2, 1), (1, 2), (1, 1), 1), ((1, 2), (2, 0), (2, 1), 2),
    ((3, 3), (1, 1), (1, 2), 4)])
def test_conv2d_is_the_definition(stride, padding, dilation, groups):
    w = RNG.standard_normal((8, 4 // groups, 3, 2))
    b = RNG.standard_normal(8)
    got = F.conv2d(eager.tensor(X), eager.tensor(w), eager.tensor(b), stride, padding,
                   dilation, groups).numpy()
    np.testing.assert_allclose(got, _direct_conv2d(X, w, b, stride, padding, dilation, groups),
                               rtol=1e-12, atol=1e-12)


CASES = {  # id: (fn(F, *inputs), arrays)
    "conv2d": (lambda F, x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(2, 1),
                                           groups=2),
               [X, RNG.standard_normal((6, 2, 3, 2)), RNG.standard_normal(6)]),
    "conv2d-same-even": (lambda F, x, w: F.conv2d(x, w, padding="same"),
                         [X, RNG.standard_normal((5, 4, 4, 3))]),
    "conv2d-valid-unbatched": (lambda F, x, w: F.conv2d(x[0], w, padding="valid"),
                               [X, RNG.standard_normal((5, 4, 2, 2))]),
    "conv1d": (lambda F, x, w, b: F.conv1d(x, w, b, stride=2, padding=2, dilation=2),
               [X1, RNG.standard_normal((4, 3, 3)), RNG.standard_normal(4)]),
    "conv_transpose2d": (lambda F, x, w, b: F.conv_transpose2d(
        x, w, b, stride=2, padding=1, output_padding=1, groups=2),
        [X, RNG.standard_normal((4, 3, 3, 2)), RNG.standard_normal(6)]),
    "conv_transpose2d-dilated": (lambda F, x, w: F.conv_transpose2d(
        x, w, stride=(1, 3), dilation=2), [X, RNG.standard_normal((4, 2, 2, 3))]),
    "conv_transpose1d": (lambda F, x, w: F.conv_transpose1d(x, w, stride=3, padding=1),
                         [X1, RNG.standard_normal((3, 2, 4))]),
    "unfold": (lambda F, x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=2), [X]),
    "unfold-unbatched": (lambda F, x: F.unfold(x[0], 3, padding=(0, 2)), [X]),
    "fold": (lambda F, c: F.fold(c, (9, 8), (2, 3), dilation=(1, 2), padding=1, stride=2),
             [RNG.standard_normal((2, 24, 15))]),
    "fold-unbatched-overlapping": (lambda F, c: F.fold(c, 5, 3), [RNG.standard_normal((18, 9))]),
    "fold-of-unfold": (lambda F, x: F.fold(F.unfold(x, 3, padding=1), (9, 8), 3, padding=1),
                       [X]),
    "max_pool2d": (lambda F, x: F.max_pool2d(x, 3, 2, 1), [X]),
    "max_pool2d-ceil-dilated": (lambda F, x: F.max_pool2d(x, (2, 3), 2, (1, 0), (1, 2),
                                                          ceil_mode=True), [X]),
    "max_pool1d": (lambda F, x: F.max_pool1d(x, 3, 2, 1), [X1]),
    "avg_pool2d": (lambda F, x: F.avg_pool2d(x, 3, 2, 1), [X]),
    "avg_pool2d-ceil-no-pad-count": (lambda F, x: F.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [X]),
    "avg_pool2d-divisor": (lambda F, x: F.avg_pool2d(x, 2, divisor_override=3), [X]),
    "avg_pool1d": (lambda F, x: F.avg_pool1d(x, 4, 3, 2), [X1]),
    "adaptive_avg_pool2d-global": (lambda F, x: F.adaptive_avg_pool2d(x, 1), [X]),
    "adaptive_avg_pool2d-uneven": (lambda F, x: F.adaptive_avg_pool2d(x, (4, 3)), [X]),
    "adaptive_avg_pool2d-none": (lambda F, x: F.adaptive_avg_pool2d(x, (None, 4)), [X]),
    "adaptive_max_pool2d": (lambda F, x: F.adaptive_max_pool2d(x, (4, 3)), [X]),
    "adaptive_avg_pool1d": (lambda F, x: F.adaptive_avg_pool1d(x, 4), [X1]),
}


def _run(lib, case):
    fn, arrays = CASES[case]
    inputs = [lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in arrays]
    out = fn(lib.nn.functional, *inputs)
    weights = np.random.default_rng(1).standard_normal(tuple(out.shape))
    (out * lib.tensor(weights)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in inputs]


@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients_equal_torchs(case):
    torch = _torch()
    (ours, our_grads), (theirs, their_grads) = _run(eager, case), _run(torch, case)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    for i, (g, ref) in enumerate(zip(our_grads, their_grads)):
        np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-12, err_msg=f"gradient {i}")


def test_max_pool_indices_equal_torchs():
    torch = _torch()
    for ours, theirs in (
            (F.max_pool2d(eager.tensor(X), 3, 2, 1, return_indices=True),
             torch.nn.functional.max_pool2d(torch.tensor(X), 3, 2, 1, return_indices=True)),
            (F.max_pool1d(eager.tensor(X1), 2, 1, 1, dilation=2, return_indices=True),
             torch.nn.functional.max_pool1d(torch.tensor(X1), 2, 1, 1, dilation=2,
                                            return_indices=True))):
        assert ours[1].tolist() == theirs[1].tolist()


@pytest.mark.parametrize("args, kwargs", [
    ((3, 2, 1), {}),                                      # sliced: 9 offsets
    ((2,), {}),
    ((1, 2), {}),                                         # one offset: a copy of a slice
    (((2, 3), 2, (1, 0), (1, 2)), {"ceil_mode": True}),
    ((4, 3, 2), {}),                                      # 16 offsets: im2col and amax
])
def test_max_pool_without_grad_gives_the_values_of_the_pool_with_grad(args, kwargs):
    x = X.copy()
    x[0, 0, 0, 0] = x[0, 0, 1, 1] = np.nan  # NaN wins its window, as in PyTorch
    x[1, 2, :4, :4] = 0.0   # ties
    with_grad = F.max_pool2d(eager.tensor(x, requires_grad=True), *args, **kwargs)
    without = F.max_pool2d(eager.tensor(x), *args, **kwargs)
    with eager.no_grad():
        in_no_grad = F.max_pool2d(eager.tensor(x, requires_grad=True), *args, **kwargs)
    for got in (without, in_no_grad):
        np.testing.assert_array_equal(got.numpy(), with_grad.detach().numpy())
        assert got.grad_fn is None
    assert np.isnan(without.numpy()).any()
    torch = _torch()
    np.testing.assert_array_equal(
        without.numpy(),
        torch.nn.functional.max_pool2d(torch.tensor(x), *args, **kwargs).numpy())


def test_a_pool_of_one_offset_is_not_a_view_of_its_input():
    x = eager.tensor(X)
    pooled = F.max_pool2d(x, 1, 2)
    pooled.zero_()
    np.testing.assert_array_equal(x.numpy(), X)


def test_conv_modules_have_torchs_parameters_and_give_its_results_with_its_weights():
    torch = _torch()
    pairs = [(nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
              torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)),
             (nn.Conv2d(4, 3, (2, 3), padding=1, padding_mode="reflect", bias=False),
              torch.nn.Conv2d(4, 3, (2, 3), padding=1, padding_mode="reflect", bias=False)),
             (nn.Conv2d(4, 2, 3, padding=2, padding_mode="circular"),
              torch.nn.Conv2d(4, 2, 3, padding=2, padding_mode="circular")),
             (nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1),
              torch.nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1))]
    for ours, theirs in pairs:
        state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
        assert sorted(state) == sorted(ours.state_dict())
        assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == \
            {k: v.shape for k, v in state.items()}
        ours.load_state_dict({k: eager.tensor(v) for k, v in state.items()})
        got = ours(eager.tensor(X, dtype=eager.float32)).detach().numpy()
        want = theirs(torch.tensor(X, dtype=torch.float32)).detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert repr(ours) == repr(theirs)


def test_fold_and_unfold_modules_are_the_functions():
    x = eager.tensor(X)
    unfold, fold = nn.Unfold(3, padding=1), nn.Fold((9, 8), 3, padding=1)
    cols = unfold(x)
    np.testing.assert_array_equal(cols.numpy(), F.unfold(x, 3, padding=1).numpy())
    np.testing.assert_array_equal(fold(cols).numpy(),
                                  F.fold(cols, (9, 8), 3, padding=1).numpy())
    assert repr(fold) == "Fold(output_size=(9, 8), kernel_size=3, dilation=1, padding=1, " \
                         "stride=1)"
    torch = _torch()
    assert repr(unfold) == repr(torch.nn.Unfold(3, padding=1))
    assert repr(fold) == repr(torch.nn.Fold((9, 8), 3, padding=1))


@pytest.mark.parametrize("call, error, message", [
    (lambda: F.unfold(eager.ones(1, 2, 3, 3), 4), RuntimeError,
     r"im2col: Given input with spatial size \(3, 3\), kernel_size=\(4, 4\), dilation=\(1, "
     r"1\), padding=\(0, 0\), calculated shape of the array of sliding blocks as \(0, 0\)"),
    (lambda: F.unfold(eager.ones(1, 2, 3, 3), 2, stride=0), RuntimeError,
     "stride should be greater than zero, but got dH: 0 dW: 0"),
    (lambda: F.unfold(eager.ones(1, 2, 3, 3), 2, padding=-1), RuntimeError,
     "padding should be non-negative"),
    (lambda: F.unfold(eager.ones(1, 2, 3, 3), (0, 2)), RuntimeError,
     "kernel size should be greater than zero, but got kernel_height: 0 kernel_width: 2"),
    (lambda: F.fold(eager.ones(1, 8, 4), 3, 2, dilation=0), RuntimeError,
     "dilation should be greater than zero"),
    (lambda: ops.im2col(eager.ones(1, 2, 3, 3), [2, 2, 2], [1, 1], [0, 0], [1, 1]),
     TypeError, r"im2col\(\): argument 'kernel_size' must be tuple of ints of length 2"),
    (lambda: F.unfold(eager.ones(1, 0, 3, 3), 2), RuntimeError,
     r"Expected 3D or 4D \(batch mode\) tensor with possibly 0 batch size"),
    (lambda: F.unfold(eager.ones(3, 3), 2), NotImplementedError,
     r"Only 3D or 4D input Tensors are supported \(got 2D\)"),
    (lambda: F.fold(eager.ones(1, 10, 4), 3, 2), RuntimeError,
     r"input.size\(1\)=10 and kernel_size=\(2, 2\)"),
    (lambda: F.fold(eager.ones(1, 8, 5), 3, 2), RuntimeError,
     r"calculated number of sliding blocks 2 \* 2 = 4, but got input.size\(2\)=5"),
    (lambda: F.fold(eager.ones(1, 8, 4), (3, 3, 3), 2), ValueError,
     "output_size must be an int or a tuple of 2 ints"),
])
def test_bad_windows_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_windows_of_an_empty_batch_are_empty():
    cols = F.unfold(eager.ones(0, 2, 4, 4), 2)
    assert tuple(cols.shape) == (0, 8, 9)
    assert tuple(F.fold(cols, 4, 2).shape) == (0, 2, 4, 4)


def test_conv_weights_start_in_pytorchs_range():
    m = nn.Conv2d(8, 16, 3, groups=2)
    bound = 1 / np.sqrt(4 * 9)  # fan_in = in_channels / groups * kernel
    assert np.abs(m.weight.detach().numpy()).max() <= bound
    assert np.abs(m.bias.detach().numpy()).max() <= bound
    assert np.abs(m.weight.detach().numpy()).max() > 0.8 * bound


def test_bad_shapes_are_named():
    with pytest.raises(RuntimeError, match="expected input\\[2, 4, 9, 8\\] to have 6 channels, "
                                           "but got 4 channels instead"):
        F.conv2d(eager.tensor(X), eager.ones(2, 3, 3, 3), groups=2)
    with pytest.raises(RuntimeError, match="Expected 3D \\(unbatched\\) or 4D \\(batched\\)"):
        F.conv2d(eager.ones(3, 3), eager.ones(1, 1, 1, 1))
    with pytest.raises(RuntimeError, match="does not fit the padded input"):
        F.conv2d(eager.ones(1, 1, 2, 2), eager.ones(1, 1, 3, 3))
    with pytest.raises(ValueError, match="padding='same' is not supported for strided"):
        nn.Conv2d(1, 1, 3, stride=2, padding="same")
    with pytest.raises(RuntimeError, match="pad should be at most half of effective kernel"):
        F.max_pool2d(eager.ones(1, 1, 5, 5), 2, padding=2)


def test_a_compiled_convnet_step_equals_eager():
    def make():
        eager.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(4, 6, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(6, 3)).double()
    images = eager.tensor(RNG.standard_normal((5, 1, 10, 10)))
    labels = eager.tensor([0, 2, 1, 1, 0])
    results = []
    for compiled in (False, True):
        model = make()
        run = eager.compile(model) if compiled else model
        loss = F.cross_entropy(run(images), labels)
        loss.backward()
        results.append([loss.item()] + [p.grad.numpy() for p in model.parameters()])
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-12)
    for got, want in zip(results[1][1:], results[0][1:]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


HALF_CONVS = {  # name: (n, c, h, w, o, k, groups, stride)
    "folded batch": (2, 3, 8, 8, 4, 3, 1, 1),
    "one image": (1, 3, 20, 20, 4, 3, 1, 1),
    "wide images": (3, 4, 20, 20, 6, 3, 1, 1),  # 400 positions: folded in 16 bits only
    "depthwise strided": (2, 4, 9, 9, 4, 3, 4, 2),
    "grouped 1x1": (2, 4, 7, 7, 8, 1, 2, 1),
}


@pytest.mark.parametrize("name", HALF_CONVS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_16_bit_convolution_adds_its_bias_before_rounding_once_as_pytorch(dtype, name):
    """The product and the bias summed in float32 and rounded once (a product rounded,
    then the bias added, rounded twice: 158 of 512 bfloat16 outputs differed from
    PyTorch's). PyTorch's values within a unit, and all but one in 500 bit for bit (a
    float32 sum in another order can round the other way); the gradients within 16-bit
    rounding."""
    torch = _torch()
    from tests.eager.native.narrow_cases import assert_same
    n, c, h, w, o, k, groups, stride = HALF_CONVS[name]
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s).astype(np.float32)
              for s in ((n, c, h, w), (o, c // groups, k, k), (o,))]
    ours = [eager.tensor(a).to(getattr(eager, dtype)).requires_grad_() for a in arrays]
    theirs = [torch.tensor(a).to(getattr(torch, dtype)).requires_grad_() for a in arrays]
    y = F.conv2d(*ours, stride=stride, padding=1, groups=groups)
    want = torch.nn.functional.conv2d(*theirs, stride=stride, padding=1, groups=groups)
    expected = eager.tensor(want.detach().float().numpy()).to(y.dtype)
    assert_same(y.detach(), expected, ulps=1)
    differ = int((y.detach().float().numpy() != expected.float().numpy()).sum())
    assert differ <= max(1, y.numel() // 500), f"{differ} of {y.numel()} differ"
    g = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    y.backward(eager.tensor(g).to(y.dtype))
    want.backward(torch.tensor(g).to(want.dtype))
    for mine, theirs_ in zip(ours, theirs):
        expected = theirs_.grad.float().numpy()
        np.testing.assert_allclose(mine.grad.float().numpy(), expected, rtol=0,
                                   atol=2 ** -6 * np.abs(expected).max())
