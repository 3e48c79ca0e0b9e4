"""Eager's col2im (F.fold, and so conv2d's input gradient) as a generated kernel, and
both window kernels on several threads (eager/backends/native/windows.py): the same
values as numpy's strided adds, bit for bit, over every geometry the kernel treats
apart: image rows summed in registers at column stride 1, padding wider than half the
kernel (rows and columns wholly off the image), dilation, row strides, column strides
added through a shuffle (2 to 4) and an element a step (5), odd sizes, 1x1 kernels and
images, rows of several vectors and a masked rest, 2-D and empty batches; on one thread
and with the planes cut between two."""
import numpy as np
import pytest

import eager
import eager.nn.functional as F
from eager.backends.native import windows as eager_windows
from eager.kernels import windows
from runtime import threads


@pytest.fixture(autouse=True)
def every_size_native(monkeypatch):
    monkeypatch.setattr(windows, "_NATIVE_ELEMENTS", 0)
    monkeypatch.setattr(eager_windows, "PARALLEL_ELEMENTS", 0)  # every call split
    monkeypatch.setattr(threads, "_chosen", [None])
    yield
    windows._windows = None


def _native_and_numpy(op, *args):
    """(generated, numpy's) op(*args), checking that the kernel ran."""
    windows._windows = False  # numpy's path
    expected = op(*args)
    windows._windows = None
    before = eager_windows.calls
    got = op(*args)
    assert eager_windows.calls == before + 1, "the generated kernel did not run"
    return got, expected


def _pair(v):
    return tuple(v) if isinstance(v, tuple) else (v, v)


GEOMETRIES = [  # (batch, channels, image, kernel, dilation, padding, stride)
    ((2,), 3, (7, 9), (3, 2), (1, 2), (0, 1), 1),
    ((1,), 2, (5, 5), 5, 1, 4, 1),  # padding = kernel - 1: rows and columns off the image
    ((2,), 1, (6, 4), 3, 1, (5, 6), 1),  # padding past the kernel: rows wholly off it
    ((3,), 2, (11, 13), (2, 3), 1, 1, (2, 3)),
    ((1,), 4, (9, 23), 3, (2, 3), 2, (3, 4)),
    ((2,), 2, (12, 31), (3, 4), 1, (1, 2), (1, 5)),  # column stride 5: an element a step
    ((1,), 3, (8, 40), 3, 1, 1, 1),  # 40 columns: several vectors a row, a masked rest
    ((2,), 3, (9, 41), 3, 1, 1, 2),
    ((1,), 1, (3, 70), (1, 7), (1, 2), (0, 3), (1, 2)),
    ((5,), 3, (1, 1), 3, 1, 1, 1),  # 1x1 images: one column of each window inside
    ((3,), 5, (4, 4), 1, 1, 0, 2),  # a 1x1 kernel striding past columns
    ((2,), 7, (17, 17), 3, 1, 0, 2),  # odd sizes, no padding
    ((3,), 4, (8, 8), 3, 2, 3, 3),  # dilation 2, stride 3, padding past kernel / 2
    ((2,), 3, (10, 9), 3, (2, 1), 2, (3, 1)),  # rows strided, columns adjacent
    ((1,), 2, (5, 37), (2, 5), 1, (0, 4), 1),  # columns of 3 vectors (f32 on AVX2: 5)
    ((), 4, (8, 8), 3, 1, 1, 1),  # 2-D: one image
]


@pytest.mark.parametrize("thread_count", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch, channels, image, kernel, dilation, padding, stride",
                         GEOMETRIES, ids=str)
def test_the_kernels_give_numpy_s_sums_and_windows_bit_for_bit(
        batch, channels, image, kernel, dilation, padding, stride, dtype, thread_count):
    eager.set_num_threads(thread_count)
    kh, kw = _pair(kernel)
    blocks = windows._blocks(image, (kh, kw), _pair(dilation), _pair(padding), _pair(stride))
    rng = np.random.default_rng(0)
    cols = rng.standard_normal((*batch, channels * kh * kw, blocks[0] * blocks[1]))
    got, expected = _native_and_numpy(F.fold, eager.tensor(cols.astype(dtype)), image,
                                      kernel, dilation, padding, stride)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy().view(np.uint8), expected.numpy().view(np.uint8))
    x = eager.tensor(rng.standard_normal((*batch, channels, *image)).astype(dtype))
    got, expected = _native_and_numpy(F.unfold, x, kernel, dilation, padding, stride)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_two_threads_share_a_call_s_planes():
    eager.set_num_threads(2)
    eager_windows._plans.clear()
    F.fold(eager.ones(2, 3 * 9, 64), (8, 8), 3, padding=1)
    (plan,) = eager_windows._plans.values()
    assert plan.records[:, 2:4].tolist() == [[0, 3], [3, 6]]  # planes [first, stop)
    eager_windows._plans.clear()
    eager.set_num_threads(1)
    F.fold(eager.ones(2, 3 * 9, 64), (8, 8), 3, padding=1)
    (plan,) = eager_windows._plans.values()
    assert plan.records[:, 2:4].tolist() == [[0, 6]]


def test_negative_zeros_add_up_as_numpy_s_from_zero():
    cols = eager.full((1, 9, 16), -0.0)
    got, expected = _native_and_numpy(F.fold, cols, (4, 4), 3, 1, 1, 1)
    assert not np.signbit(expected.numpy()).any()
    np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(expected.numpy()))


def test_a_non_contiguous_input_and_an_empty_batch():
    cols = np.random.default_rng(1).standard_normal((2, 12, 18)).astype(np.float32)
    got, expected = _native_and_numpy(F.fold, eager.tensor(cols).transpose(1, 2),
                                      (5, 7), 3, 1, 1, 2)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    # conv2d's input gradient: rows (N, L) apart, each batch's L adjacent, read in place
    cols = np.random.default_rng(2).standard_normal((3 * 9, 2, 20)).astype(np.float32)
    eager_windows._plans.clear()
    got, expected = _native_and_numpy(F.fold, eager.tensor(cols).transpose(0, 1),
                                      (4, 5), 3, 1, 1, 1)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert [key[3] for key in eager_windows._plans] == [(20, 40)]  # (batch, row) strides
    empty = F.fold(eager.zeros(0, 27, 25), (5, 5), 3, padding=1)
    assert empty.shape == (0, 3, 5, 5)


def test_other_dtypes_keep_numpy():
    before = eager_windows.calls
    for dtype in (eager.float16, eager.int64):
        cols = eager.ones(2, 27, 25).to(dtype)
        image = F.fold(cols, (5, 5), 3, padding=1)
        assert image.dtype == dtype and image.shape == (2, 3, 5, 5)
        assert image[0, 0, 2].tolist() == [6, 9, 9, 9, 6]  # windows covering each element
    assert eager_windows.calls == before


def test_fold_and_the_convolution_input_gradient_on_the_kernel():
    rng = np.random.default_rng(2)
    cols = eager.tensor(rng.standard_normal((2, 3 * 4, 12)), requires_grad=True)
    before = eager_windows.calls
    assert eager.autograd.gradcheck(lambda c: F.fold(c, (5, 6), 2, 1, 1, 2), (cols,))
    x = eager.tensor(rng.standard_normal((2, 3, 9, 8)), requires_grad=True)
    w = eager.tensor(rng.standard_normal((4, 3, 3, 3)), requires_grad=True)
    assert eager.autograd.gradcheck(lambda x, w: F.conv2d(x, w, padding=2, dilation=2), (x, w))
    assert eager_windows.calls > before
