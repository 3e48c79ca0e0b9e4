"""16-bit floats in the ops that add into an output, with PyTorch's CPU values bit for bit
(PyTorch 2.13, measured):

- index_put(accumulate=True): each add in the 16-bit type, rounded, in the index's C order
  (so embedding's and t[i]'s gradients, PyTorch's embedding_dense_backward adding row
  after row);
- scatter_add: from self, in float32, in the order of the index, rounded once (so
  gather's gradient);
- index_add: scatter_add's sum along the first or last dim of a tensor of two dims or
  more with alpha 1 and int64 indices; otherwise slice after slice, each sum rounded,
  alpha * source in float32 (of one dim or none: the product rounded first too);
- col2im (F.fold, unfold's gradient): kernel offset after kernel offset, each add rounded.

Checked against numpy models of those rules, with sums whose order or rounding shows in
the result, and against PyTorch where it is installed."""
import numpy as np
import pytest

import eager
from ir import dtypes

HALF = [dtypes.float16, dtypes.bfloat16]
HALF_ULP = {dtypes.float16: 2.0 ** -10, dtypes.bfloat16: 2.0 ** -7}  # at 1.0
F32 = np.float32


def _r(a, dt):
    """a rounded to dt, as float32."""
    return dtypes.cast(np.asarray(a, F32), dt).astype(F32)


def _t(a, dt):
    return eager.tensor(np.asarray(a, F32)).to(getattr(eager, dt.name))


def _np(t):
    return t.detach().float().numpy()


def _data(dt, shape, seed):
    return _r(np.random.default_rng(seed).standard_normal(shape), dt)


# numpy models of PyTorch's rules --------------------------------------------------------
def _each_add_rounded(x, key, values, dt):
    """x[key] += values one element at a time in C order, each sum rounded to dt."""
    out = x.copy()
    idx = np.broadcast_arrays(*key)
    values = np.broadcast_to(values, idx[0].shape + x.shape[len(key):])
    for p in np.ndindex(*idx[0].shape):
        k = tuple(int(i[p]) for i in idx)
        out[k] = _r(out[k] + values[p], dt)
    return out


def _once(x, key, values, dt):
    """x[key] += values in float32, rounded once."""
    out = x.copy()
    np.add.at(out, key, values)
    return _r(out, dt)


def _scatter_key(index, dim):
    grid = np.indices(index.shape, sparse=True)
    return tuple(index if k == dim else g for k, g in enumerate(grid))


def _col2im_model(cols, size, kernel, dilation, padding, stride, dt):
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = size, kernel, dilation, padding, stride
    oh, ow = ((n + 2 * p - d * (k - 1) - 1) // s + 1
              for n, k, d, p, s in zip(size, kernel, dilation, padding, stride))
    *outer, ck, _ = cols.shape
    blocks = cols.reshape(*outer, ck // (kh * kw), kh, kw, oh, ow)
    out = np.zeros((*outer, ck // (kh * kw), h + 2 * ph, w + 2 * pw), F32)
    for i in range(kh):
        for j in range(kw):
            at = (..., slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                  slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
            out[at] = _r(out[at] + blocks[..., i, j, :, :], dt)
    return out[..., ph:ph + h, pw:pw + w]


# sums whose order shows: 1 + half an ulp is a tie (rounds to 1.0), a hair more rounds up --
@pytest.mark.parametrize("dt", HALF, ids=str)
def test_scatter_add_sums_from_self_in_float32_in_index_order(dt):
    tie, tiny = HALF_ULP[dt] / 2, 2.0 ** -24
    # index order: 0 + 2**-24 + 2**-24 + tie + 1 is 1 + tie + 2**-23 in float32: up
    got = _t([0], dt).scatter_add(0, eager.tensor([0, 0, 0, 0]), _t([tiny, tiny, tie, 1], dt))
    assert _np(got)[0] == 1 + HALF_ULP[dt]
    # from self: 1 + tie first is the tie, the 2**-24s then vanish in float32: 1.0
    got = _t([1], dt).scatter_add(0, eager.tensor([0, 0, 0]), _t([tie, tiny, tiny], dt))
    assert _np(got)[0] == 1
    # each add rounded to 16 bits would give 1.0 for the first: tiny + tiny + tie rounds to tie
    assert _each_add_rounded(np.zeros(1, F32), (np.zeros(4, int),),
                             np.array([tiny, tiny, tie, 1], F32), dt)[0] == 1


@pytest.mark.parametrize("dt", HALF, ids=str)
def test_index_put_accumulate_rounds_each_add_in_index_order(dt):
    tie, tiny = HALF_ULP[dt] / 2, 2.0 ** -24
    got = _t([0], dt).index_put((eager.tensor([0, 0, 0, 0]),), _t([tiny, tiny, tie, 1], dt),
                                accumulate=True)
    assert _np(got)[0] == 1  # float32 then one rounding would give 1 + ulp


@pytest.mark.parametrize("dt", HALF, ids=str)
def test_index_add_takes_scatter_adds_sum_or_adds_slice_after_slice(dt):
    tie, tiny = HALF_ULP[dt] / 2, 2.0 ** -24
    src = np.array([tiny, tiny, tie, 1], F32)[:, None].repeat(3, 1)
    x, idx = _t(np.zeros((1, 3)), dt), np.zeros(4, np.int64)
    assert (_np(x.index_add(0, eager.tensor(idx), _t(src, dt))) == 1 + HALF_ULP[dt]).all()
    # int32 indices, alpha other than 1, a middle dim, one dim: slice after slice, rounded
    assert (_np(x.index_add(0, eager.tensor(idx.astype(np.int32)), _t(src, dt))) == 1).all()
    assert (_np(x.index_add(0, eager.tensor(idx), _t(src / 2, dt), alpha=2)) == 1).all()
    middle = x.reshape(1, 1, 3).index_add(1, eager.tensor(idx), _t(src[None], dt))
    assert (_np(middle) == 1).all()
    assert _np(_t([0], dt).index_add(0, eager.tensor(idx), _t(src[:, 0], dt)))[0] == 1


@pytest.mark.parametrize("dt", HALF, ids=str)
def test_index_add_of_one_dim_rounds_the_product_before_adding(dt):
    src, alpha = _r([0.1, 0.7, -0.3], dt), 0.3
    a16 = _r(alpha, dt)
    got = _np(_t([0.5], dt).index_add(0, eager.tensor([0, 0, 0]), _t(src, dt), alpha=alpha))
    want = np.array([0.5], F32)
    for s in src:
        want = _r(want + _r(s * a16, dt), dt)
    np.testing.assert_array_equal(got, want)


# the rules on random data with repeated indices -----------------------------------------
@pytest.mark.parametrize("dt", HALF, ids=str)
def test_index_put_accumulate_is_the_each_add_model(dt):
    x, v = _data(dt, (5, 4, 3), 0), _data(dt, (2, 30, 3), 1)
    i, j = np.random.default_rng(2).integers(-5, 5, (2, 30)), np.arange(30) % 4
    got = _np(_t(x, dt).index_put((eager.tensor(i), eager.tensor(j)), _t(v, dt),
                                  accumulate=True))
    want = _each_add_rounded(x, (i, j), v, dt)
    np.testing.assert_array_equal(got, want)
    assert (want != _once(x, (i, j), v, dt)).any()  # the rule shows in these sums


@pytest.mark.parametrize("dt", HALF, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_add_is_the_float32_model(dt, dim):
    x, shape = _data(dt, (4, 5, 6), 3), [4, 5, 6]
    shape[dim] = 17
    src = _data(dt, shape, 4)
    index = np.random.default_rng(5).integers(0, x.shape[dim], shape)
    got = _np(_t(x, dt).scatter_add(dim, eager.tensor(index), _t(src, dt)))
    key = _scatter_key(index, dim % 3)
    want = _once(x, key, src, dt)
    np.testing.assert_array_equal(got, want)
    assert (want != _each_add_rounded(x, np.broadcast_arrays(*key), src, dt)).any()


@pytest.mark.parametrize("dt", HALF, ids=str)
@pytest.mark.parametrize("dim, alpha, index_type, summed_once", [
    (0, 1, np.int64, True), (-1, 1, np.int64, True), (1, 1, np.int64, False),
    (0, 1, np.int32, False), (0, 2, np.int64, False), (1, -0.3, np.int64, False)])
def test_index_add_is_its_paths_model(dt, dim, alpha, index_type, summed_once):
    x = _data(dt, (3, 4, 5), 6)
    shape = [3, 4, 5]
    shape[dim] = 23
    src = _data(dt, shape, 7)
    index = np.random.default_rng(8).integers(0, x.shape[dim], 23)
    got = _np(_t(x, dt).index_add(dim, eager.tensor(index.astype(index_type)), _t(src, dt),
                                  alpha=alpha))
    xs, ss = np.moveaxis(x, dim, 0), np.moveaxis(src, dim, 0) * _r(alpha, dt)
    once, each = _once(xs, (index,), ss, dt), _each_add_rounded(xs, (index,), ss, dt)
    np.testing.assert_array_equal(got, np.moveaxis(once if summed_once else each, 0, dim))
    assert (once != each).any()


@pytest.mark.parametrize("dt", HALF, ids=str)
@pytest.mark.parametrize("args", [
    ((5, 6), (2, 3), (1, 1), (0, 0), (1, 1)), ((5, 6), (3, 2), (1, 2), (1, 0), (2, 1)),
    ((7, 5), (3, 3), (2, 1), (2, 1), (1, 2))])
def test_col2im_adds_offset_after_offset_each_rounded(dt, args):
    size, kernel, dilation, padding, stride = args
    blocks = np.prod([(n + 2 * p - d * (k - 1) - 1) // s + 1
                      for n, k, d, p, s in zip(size, kernel, dilation, padding, stride)])
    cols = _data(dt, (2, 3 * kernel[0] * kernel[1], blocks), 9)
    got = _np(eager.nn.functional.fold(_t(cols, dt), size, kernel, dilation, padding, stride))
    want = _col2im_model(cols, size, kernel, dilation, padding, stride, dt)
    np.testing.assert_array_equal(got, want)
    wide = _col2im_model(cols, size, kernel, dilation, padding, stride, dtypes.float32)
    assert (want != _r(wide, dt)).any()


@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float64, dtypes.int64], ids=str)
def test_wider_types_keep_adding_in_their_own_type(dt):
    x = np.arange(12).reshape(4, 3)
    index = np.array([0, 0, 3, 0, 1])
    src = np.arange(15).reshape(5, 3)
    want = x.copy()
    np.add.at(want, index, src)
    e = lambda a: eager.tensor(a).to(getattr(eager, dt.name))  # noqa: E731
    for got in (e(x).index_add(0, eager.tensor(index), e(src)),
                e(x).index_put((eager.tensor(index),), e(src), accumulate=True),
                e(x).scatter_add(0, eager.tensor(index)[:, None].expand(5, 3), e(src))):
        assert got.dtype is getattr(eager, dt.name)
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dt", HALF, ids=str)
def test_empty_indices_and_empty_tensors_add_nothing(dt):
    x = _data(dt, (4, 3), 10)
    none = eager.tensor(np.zeros(0, np.int64))
    np.testing.assert_array_equal(_np(_t(x, dt).index_add(0, none, _t(np.zeros((0, 3)), dt))), x)
    np.testing.assert_array_equal(
        _np(_t(x, dt).index_put((none,), _t(np.zeros((0, 3)), dt), accumulate=True)), x)
    np.testing.assert_array_equal(
        _np(_t(x, dt).scatter_add(0, eager.tensor(np.zeros((0, 3), np.int64)),
                                  _t(np.zeros((0, 3)), dt))), x)
    assert _t(np.zeros((0, 3)), dt).index_add(1, eager.tensor([2, 2]),
                                              _t(np.zeros((0, 2)), dt)).shape == (0, 3)


# gradients made of these ops --------------------------------------------------------------
@pytest.mark.parametrize("dt", HALF, ids=str)
def test_gradients_take_their_ops_rules(dt):
    rng = np.random.default_rng(11)
    w, index = _data(dt, (4, 9), 12), rng.integers(0, 4, 40)
    g = _data(dt, (40, 9), 13)
    zero = np.zeros_like(w)

    def grad(fn, x, g):
        t = _t(x, dt).requires_grad_()
        fn(t).backward(_t(g, dt))
        return _np(t.grad)
    each = _each_add_rounded(zero, (index,), g, dt)
    e = eager.tensor(index)
    np.testing.assert_array_equal(grad(lambda t: eager.nn.functional.embedding(e, t), w, g),
                                  each)
    np.testing.assert_array_equal(grad(lambda t: t[e], w, g), each)
    np.testing.assert_array_equal(grad(lambda t: t.index_select(0, e), w, g),
                                  _once(zero, (index,), g, dt))
    gi = rng.integers(0, 9, (4, 30))
    gg = _data(dt, (4, 30), 14)
    np.testing.assert_array_equal(grad(lambda t: t.gather(1, eager.tensor(gi)), w, gg),
                                  _once(zero, _scatter_key(gi, 1), gg, dt))


# against PyTorch --------------------------------------------------------------------------
def _torch_pair(dt):
    torch = pytest.importorskip("torch")
    return torch, getattr(torch, dt.name)


def _tt(torch, a, tdt):
    return torch.tensor(np.asarray(a, F32)).to(tdt)


@pytest.mark.parametrize("dt", HALF, ids=str)
def test_scatter_index_add_and_index_put_are_pytorchs_bit_for_bit(dt):
    torch, tdt = _torch_pair(dt)
    rng = np.random.default_rng(15)
    for trial in range(40):
        rank = int(rng.integers(1, 4))
        shape = tuple(int(n) for n in rng.integers(1, 6, rank))
        dim = int(rng.integers(0, rank))
        n = int(rng.integers(0, 13))
        src_shape = shape[:dim] + (n,) + shape[dim + 1:]
        x, src = _data(dt, shape, trial), _data(dt, src_shape, 100 + trial)
        index = rng.integers(0, shape[dim], n)
        alpha = [1, 1, 2, -0.3][trial % 4]
        itype = [np.int64, np.int32][trial % 3 == 2]
        want = _tt(torch, x, tdt).index_add(dim, torch.tensor(index.astype(itype)),
                                            _tt(torch, src, tdt), alpha=alpha)
        got = _t(x, dt).index_add(dim, eager.tensor(index.astype(itype)), _t(src, dt),
                                  alpha=alpha)
        if alpha != -0.3 or rank == 1:  # PyTorch's vector body adds alpha * source in
            np.testing.assert_array_equal(  # float32, its scalar tail rounds it first: not copied
                _np(got), want.float().numpy(), err_msg=str(trial))
        full = rng.integers(0, shape[dim], src_shape)
        want = _tt(torch, x, tdt).scatter_add(dim, torch.tensor(full), _tt(torch, src, tdt))
        got = _t(x, dt).scatter_add(dim, eager.tensor(full), _t(src, dt))
        np.testing.assert_array_equal(_np(got), want.float().numpy(), err_msg=str(trial))
        key = tuple(rng.integers(-shape[k], shape[k], (n, 2)) for k in range(min(rank, 2)))
        values = _data(dt, (n, 2) + shape[len(key):], 200 + trial)
        want = _tt(torch, x, tdt).index_put(tuple(torch.tensor(k) for k in key),
                                            _tt(torch, values, tdt), accumulate=True)
        got = _t(x, dt).index_put(tuple(eager.tensor(k) for k in key), _t(values, dt),
                                  accumulate=True)
        np.testing.assert_array_equal(_np(got), want.float().numpy(), err_msg=str(trial))


@pytest.mark.parametrize("dt", HALF, ids=str)
def test_fold_and_the_index_gradients_are_pytorchs_bit_for_bit(dt):
    torch, tdt = _torch_pair(dt)
    F = torch.nn.functional
    rng = np.random.default_rng(16)
    for size, k, d, p, s in [((7, 9), (3, 2), (1, 2), (1, 0), (2, 1)),
                             ((5, 5), (3, 3), (1, 1), (1, 1), (1, 1)), ((1, 4), (1, 3), 1, 0, 1)]:
        n_blocks = F.unfold(torch.zeros(1, 1, *size), k, d, p, s).shape[-1]
        kk = np.prod(k)
        cols = _data(dt, (2, 3 * kk, n_blocks), int(kk))
        want = F.fold(_tt(torch, cols, tdt), size, k, d, p, s).float().numpy()
        got = _np(eager.nn.functional.fold(_t(cols, dt), size, k, d, p, s))
        np.testing.assert_array_equal(got, want)
    w, index, g = _data(dt, (5, 33), 17), rng.integers(0, 5, 70), _data(dt, (70, 33), 18)
    gi, gg = rng.integers(0, 33, (5, 41)), _data(dt, (5, 41), 19)
    im = _data(dt, (2, 3, 6, 7), 20)
    gu = _data(dt, (2, 27, 42), 21)
    for name, x, grad_out, fn in [
            ("embedding", w, g, lambda lib, t, i: lib.nn.functional.embedding(i(index), t)),
            ("t[i]", w, g, lambda lib, t, i: t[i(index)]),
            ("index_select", w, g, lambda lib, t, i: t.index_select(0, i(index))),
            ("gather", w, gg, lambda lib, t, i: t.gather(1, i(gi))),
            ("unfold", im, gu, lambda lib, t, i: lib.nn.functional.unfold(t, 3, padding=1))]:
        t = _tt(torch, x, tdt).requires_grad_()
        fn(torch, t, torch.tensor).backward(_tt(torch, grad_out, tdt))
        e = _t(x, dt).requires_grad_()
        fn(eager, e, eager.tensor).backward(_t(grad_out, dt))
        np.testing.assert_array_equal(_np(e.grad), t.grad.float().numpy(), err_msg=name)


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_convolution_and_pooling_input_gradients_add_their_windows_as_pytorch(dt):
    """float16's convolution (PyTorch's im2col path) and both types' pooling add each
    window's gradient rounded, as col2im; bfloat16's convolution (oneDNN's in PyTorch)
    adds them in float32 and rounds once: its gradient is within a unit of float64's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 4, 13, 13)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    grads = {}
    for lib in (eager, pytest.importorskip("torch")) if dt == "float16" else (eager,):
        xs = lib.tensor(x).to(getattr(lib, dt)).requires_grad_()
        ws = lib.tensor(w).to(getattr(lib, dt))
        y = lib.nn.functional.conv2d(xs, ws, padding=1)
        y.backward(lib.ones_like(y) * 0.375)
        conv = xs.grad.float().numpy().copy()
        xs.grad = None
        lib.nn.functional.avg_pool2d(xs, 3, 1).sum().backward()
        grads[lib.__name__] = conv, xs.grad.float().numpy()
    if dt == "float16":
        for got, want in zip(grads["eager"], grads["torch"]):
            np.testing.assert_array_equal(got, want)
        return
    # bfloat16: each column's gradient is the product's, 0.375 times w's sum over the
    # output channels, rounded once; the windows' sums of them (exact in float32 here)
    # are rounded once
    bf16 = dtypes.bfloat16
    tap = _r(0.375 * _r(w, bf16).astype(np.float64).sum(0), bf16).astype(np.float64)
    padded = np.zeros((4, 4, 15, 15))
    for i in range(3):
        for j in range(3):
            padded[:, :, i:i + 13, j:j + 13] += tap[None, :, i, j, None, None]
    np.testing.assert_array_equal(grads["eager"][0], _r(padded[:, :, 1:14, 1:14], bf16))
