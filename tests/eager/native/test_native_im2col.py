"""Eager's im2col (F.unfold, and so conv2d and the pools) as a generated kernel
(eager/backends/native/windows.py): the same values as numpy's strided copy,
bit for bit, over every geometry the kernel treats apart: padding wider than the kernel
(rows and columns wholly off the image), dilation, strides loaded as a vector and a
shuffle (1 to 4) and the one loaded an element a step (5), rows of several vectors and a
masked rest, 3-D and empty batches, non-contiguous input; other dtypes keep numpy."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager.backends.native import windows as eager_windows
from eager.kernels import windows


def _both(x, kernel, dilation=1, padding=0, stride=1):
    """(generated, numpy's) unfold of `x`, checking that the kernel ran."""
    windows._windows = False  # numpy's path
    expected = F.unfold(x, kernel, dilation, padding, stride)
    windows._windows = None
    before = eager_windows.calls
    got = F.unfold(x, kernel, dilation, padding, stride)
    assert eager_windows.calls == before + 1, "the generated kernel did not run"
    return got, expected


@pytest.fixture(autouse=True)
def every_size_native(monkeypatch):
    monkeypatch.setattr(windows, "_NATIVE_ELEMENTS", 0)
    yield
    windows._windows = None


GEOMETRIES = [  # (input shape, kernel, dilation, padding, stride)
    ((2, 3, 7, 9), (3, 2), (1, 2), (0, 1), (1, 1)),
    ((1, 2, 5, 5), 5, 1, 4, 1),  # padding = kernel - 1: rows and columns off the image
    ((2, 1, 6, 4), 3, 1, (5, 6), 1),  # padding past the kernel: rows of zeros only
    ((3, 2, 11, 13), (2, 3), 1, 1, (2, 3)),
    ((1, 4, 9, 23), 3, (2, 3), 2, (3, 4)),
    ((2, 2, 12, 31), (3, 4), 1, (1, 2), (1, 5)),  # column stride 5: a lane a step
    ((1, 3, 8, 40), 3, 1, 1, 1),  # 40 columns: several vectors a row, a masked rest
    ((1, 1, 3, 70), (1, 7), (1, 2), (0, 3), (1, 2)),
    ((4, 8, 8), 3, 1, 1, 1),  # 3-D: one image
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, kernel, dilation, padding, stride", GEOMETRIES, ids=str)
def test_the_kernel_gives_numpy_s_windows_bit_for_bit(shape, kernel, dilation, padding,
                                                      stride, dtype):
    a = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    got, expected = _both(eager.tensor(a), kernel, dilation, padding, stride)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_a_non_contiguous_input_and_an_empty_batch():
    a = np.random.default_rng(1).standard_normal((2, 3, 9, 7)).astype(np.float32)
    got, expected = _both(eager.tensor(a).transpose(2, 3), 3, 1, 1, 1)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    windows._windows = None
    empty = F.unfold(eager.zeros(0, 3, 5, 5), 3, padding=1)
    assert empty.shape == (0, 27, 25)


def test_other_dtypes_keep_numpy():
    before = eager_windows.calls
    for dtype in (eager.float16, eager.int64):
        x = eager.arange(2 * 3 * 5 * 5).reshape(2, 3, 5, 5).to(dtype)
        cols = F.unfold(x, 3, padding=1)
        assert cols.dtype == dtype and cols.shape == (2, 27, 25)
        assert cols[0, 4].tolist() == x[0, 0].reshape(-1).tolist()  # the centre offset
    assert eager_windows.calls == before


def test_conv2d_and_its_gradient_on_the_kernel():
    rng = np.random.default_rng(2)
    x = eager.tensor(rng.standard_normal((2, 3, 9, 8)), requires_grad=True)
    w = eager.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    before = eager_windows.calls
    assert eager.autograd.gradcheck(lambda x, w: F.conv2d(x, w, padding=1, stride=2),
                                    (x, w))
    assert eager_windows.calls > before
