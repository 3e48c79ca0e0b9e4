"""A convolution leaves out the kernel rows and columns that read only padding at every
output position (eager/nn/_convolution.py `_read_taps`): a 3x3 kernel padded by 1 over a
1x1 image multiplies its centre alone. Values and gradients are the definition's."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager.nn import _convolution
from tests.nn.test_convolution import _direct_conv2d

RNG = np.random.default_rng(7)

# (image h, w), kernel, stride, padding, dilation, groups; the taps left (rows, columns)
CASES = [
    ((1, 1), (3, 3), (1, 1), (1, 1), (1, 1), 1, (1, 1)),  # ResNet's last stage on CIFAR
    ((2, 2), (3, 3), (2, 2), (1, 1), (1, 1), 1, (2, 2)),  # its strided entry
    ((1, 3), (5, 3), (1, 1), (2, 1), (1, 1), 2, (1, 3)),  # rows only
    ((3, 1), (3, 5), (2, 1), (1, 2), (1, 1), 1, (3, 1)),  # columns only, strided rows
    ((1, 1), (3, 3), (1, 1), (2, 2), (2, 2), 1, (1, 1)),  # dilated
    ((2, 5), (3, 3), (3, 1), (1, 1), (1, 1), 1, (2, 3)),  # the last row reads padding
    ((5, 5), (3, 3), (1, 1), (1, 1), (1, 1), 1, (3, 3)),  # every tap reads the image
]


def _taps_left(monkeypatch):
    seen = []
    chosen = _convolution._read_taps

    def spy(*args):
        weight, kernel, padding = chosen(*args)
        seen.append(tuple(kernel))
        return weight, kernel, padding
    monkeypatch.setattr(_convolution, "_read_taps", spy)
    return seen


@pytest.mark.parametrize("image, kernel, stride, padding, dilation, groups, left", CASES)
def test_values_and_gradients_are_the_definitions(monkeypatch, image, kernel, stride, padding,
                                                  dilation, groups, left):
    seen = _taps_left(monkeypatch)
    x = RNG.standard_normal((3, 4, *image))
    w = RNG.standard_normal((6, 4 // groups, *kernel))
    b = RNG.standard_normal(6)
    tx, tw, tb = (eager.tensor(a).requires_grad_() for a in (x, w, b))
    got = F.conv2d(tx, tw, tb, stride, padding, dilation, groups)
    assert seen == [left]
    want = _direct_conv2d(x, w, b, stride, padding, dilation, groups)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-12, atol=1e-12)
    g = RNG.standard_normal(want.shape)
    got.backward(eager.tensor(g))
    # the definition's gradients: of a sum of products, each factor times the others
    eps = 1e-6
    for tensor, array in ((tw, w), (tx, x)):
        grad = tensor.grad.numpy()
        for index in list(np.ndindex(array.shape))[::max(1, array.size // 40)]:
            bumped = array.copy()
            bumped[index] += eps
            args = (bumped, w) if array is x else (x, bumped)
            slope = ((_direct_conv2d(*args, b, stride, padding, dilation, groups) - want)
                     * g).sum() / eps
            assert abs(grad[index] - slope) < 1e-5 * max(1.0, abs(slope)), index
    # the weights of the taps left out get a gradient of zero
    rows, columns = _convolution._taps_read(image[0], kernel[0], stride[0], padding[0],
                                            dilation[0], want.shape[2]), \
        _convolution._taps_read(image[1], kernel[1], stride[1], padding[1], dilation[1],
                                want.shape[3])
    outside = np.ones(kernel, bool)
    outside[rows[0]:rows[1], columns[0]:columns[1]] = False
    assert np.all(tw.grad.numpy()[:, :, outside] == 0)


def test_taps_read_only_where_the_image_is():
    assert _convolution._taps_read(1, 3, 1, 1, 1, 1) == (1, 2)
    assert _convolution._taps_read(2, 3, 2, 1, 1, 1) == (1, 3)
    assert _convolution._taps_read(32, 3, 1, 1, 1, 32) == (0, 3)
    assert _convolution._taps_read(1, 5, 2, 2, 1, 1) == (2, 3)


def test_float32_and_compiled(monkeypatch):
    """float32 values as the float64 definition's; a compiled function traces the
    trimmed kernel too."""
    x = RNG.standard_normal((8, 16, 1, 1)).astype(np.float32)
    w = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)
    want = _direct_conv2d(x.astype(np.float64), w.astype(np.float64), None, (1, 1), (1, 1),
                          (1, 1), 1)
    eager_out = F.conv2d(eager.tensor(x), eager.tensor(w), padding=1).numpy()
    compiled = eager.compile(lambda a, k: F.conv2d(a, k, padding=1))
    for got in (eager_out, compiled(eager.tensor(x), eager.tensor(w)).numpy()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
