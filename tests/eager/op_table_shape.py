"""The op table, continued: views, copies, indexing and in-place ops."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ir.ops import Op
from op_cases import ALL, FLOATS, NUMBERS, S, OpCase, aten

CONTIGUOUS_ONLY = ("contiguous",)


def on(shape_and_args):
    """Samples `(make(shape), *args)` from `[(shape, *args), ...]`."""
    return lambda make: (S(make(shape), *args) for shape, *args in shape_and_args)


# views ----------------------------------------------------------------------------------
VIEW_SHAPES = [((3, 4), (4, 3)), ((3, 4), (12,)), ((3, 4), (-1, 6)), ((3, 4), (2, -1, 2)),
               ((2, 3, 4), (6, -1)), ((), (1,)), ((1,), ()), ((0, 3), (-1,)), ((0, 3), (3, 0)),
               ((13,), (1, 13, 1))]


def _expand_ref(x, size):
    lead = len(size) - x.ndim
    return np.broadcast_to(x, [x.shape[i - lead] if s == -1 else s for i, s in enumerate(size)])


def _squeeze_ref(x, dim=None):
    dims = range(x.ndim) if dim is None else [dim] if isinstance(dim, int) else dim
    return np.squeeze(x, tuple(d for d in dims if x.ndim and x.shape[d] == 1))


def _flatten_ref(x, start=0, end=-1):
    if x.ndim == 0:
        return x.reshape(1)
    start, end = start % x.ndim, end % x.ndim
    return x.reshape(x.shape[:start] + (-1,) + x.shape[end + 1:]) if x.size else \
        x.reshape(x.shape[:start] + (0,) + x.shape[end + 1:])


def _split_ref(x, size, dim):
    if isinstance(size, list):
        return np.split(x, np.cumsum(size)[:-1], axis=dim)
    return np.split(x, range(size, x.shape[dim], size), axis=dim)


BASIC_KEYS = [np.s_[1:, ::2], np.s_[..., None], np.s_[None, 1], np.s_[-1], np.s_[:, 1:-1],
              np.s_[2:100], np.s_[..., 0], np.s_[1, ..., None, ::3], np.s_[()], np.s_[:, -3:, 1],
              np.s_[True], np.s_[0, True], np.s_[..., False, 1]]  # a bool adds a dim of 1 or 0


def basic_index_samples(make):
    for key in BASIC_KEYS:
        yield S(make((5, 7, 4)), key)
    yield S(make((0, 3)), np.s_[..., 1:])


def advanced_index_samples(make):
    x = make((5, 7, 3))
    yield S(x, make.index((4,), 5))
    yield S(x, np.array([3, 0, 0, -1]))  # negative and repeated
    yield S(x, (slice(None), make.index((2, 3), 7)))
    yield S(x, (make.index((2, 1), 5), make.index((4,), 7)))  # rows, cols broadcast
    yield S(x, make.mask((5, 7, 3)))
    yield S(x, make.mask((5, 7)))
    yield S(x, (make.index((3,), 5), slice(1, None)))
    yield S(x, [0, 2])
    yield S(x, (np.array(True), 1))  # a 0-d mask adds a dim, like a Python bool
    yield S(x, (1, np.array(False)))
    yield S(make((4,)), make.mask((4,)) & False)  # selects nothing


VIEWS = [
    OpCase("view", (Op.VIEW,), lambda lib, x, shape: x.view(shape),
           lambda x, shape: x.reshape(shape), on(VIEW_SHAPES), ALL, CONTIGUOUS_ONLY),
    OpCase("reshape", (Op.RESHAPE,), lambda lib, x, shape: x.reshape(shape),
           lambda x, shape: x.reshape(shape), on(VIEW_SHAPES), ALL),
    OpCase("transpose", (Op.TRANSPOSE,), lambda lib, x, a, b: x.transpose(a, b), np.swapaxes,
           on([((2, 3, 4), 0, 2), ((2, 3, 4), -1, -2), ((3, 4), 0, 1), ((5,), 0, 0),
               ((0, 3), 0, 1)]), ALL),
    OpCase("t", (Op.T,), lambda lib, x: x.t(), np.transpose, on([((3, 4),), ((5,),), ((),)]),
           ALL),
    OpCase("permute", (Op.PERMUTE,), lambda lib, x, dims: x.permute(dims), np.transpose,
           on([((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 0, 1)), ((3,), (0,)),
               ((1, 0, 2), (2, 1, 0))]), ALL),
    OpCase("expand", (Op.EXPAND,), lambda lib, x, size: x.expand(*size), _expand_ref,
           on([((3, 1), (3, 4)), ((1,), (2, 3, 5)), ((), (2, 2)), ((3, 1), (-1, 4)),
               ((0, 1), (0, 3)), ((2, 1, 1), (3, 2, 4, 5))]), ALL),
    OpCase("unsqueeze", (Op.UNSQUEEZE,), lambda lib, x, d: x.unsqueeze(d), np.expand_dims,
           on([((3, 4), 0), ((3, 4), -1), ((3, 4), 1), ((), 0), ((), -1), ((0,), 1)]), ALL),
    OpCase("squeeze", (Op.SQUEEZE,), lambda lib, x, *d: x.squeeze(*d), _squeeze_ref,
           on([((1, 3, 1, 2),), ((1, 3, 1, 2), 2), ((1, 3, 1, 2), (0, 2)), ((3,), 0),
               ((),), ((1,), 0), ((1, 3, 1, 2), -2), ((2, 1, 0), (1, 2))]), ALL),
    OpCase("select", (Op.SELECT,), lambda lib, x, d, i: x.select(d, i),
           lambda x, d, i: np.take(x, i, axis=d),
           on([((3, 4), 1, -1), ((3, 4), 0, 2), ((2, 3, 4), -2, 0), ((1,), 0, 0)]), ALL),
    OpCase("getitem_basic", (Op.SLICE, Op.SELECT, Op.UNSQUEEZE),
           lambda lib, x, key: x[key], lambda x, key: x[key], basic_index_samples, ALL),
    OpCase("getitem_advanced", (Op.INDEX, Op.NONZERO), lambda lib, x, key: x[key],
           lambda x, key: x[key], advanced_index_samples, ALL, meta=False),
    OpCase("flatten", (Op.FLATTEN,), lambda lib, x, *a: x.flatten(*a), _flatten_ref,
           on([((2, 3, 4),), ((2, 3, 4), 1), ((2, 3, 4), 0, 1), ((2, 3, 4), -2, -1), ((),),
               ((0, 3),), ((5,), 0, 0)]), ALL),
    OpCase("split", (Op.SPLIT,), lambda lib, x, size, dim: x.split(size, dim), _split_ref,
           on([((5, 4), 2, 0), ((5, 4), 3, 1), ((5, 4), [1, 4], 0), ((5, 4), [0, 3, 1], 1),
               ((0, 3), 2, 0), ((5,), 5, 0), ((5,), 7, -1)]), ALL),
    OpCase("chunk", (Op.SPLIT,), lambda lib, x, n, dim: x.chunk(n, dim),
           lambda x, n, dim: _split_ref(x, -(-x.shape[dim] // n), dim),
           on([((5, 4), 2, 0), ((5, 4), 3, 1), ((6,), 4, 0)]), ALL),
    OpCase("detach", (Op.DETACH,), lambda lib, x: x.detach(), np.copy,
           on([((3, 4),), ((),), ((0, 2),)]), ALL),
]


# copies and data movement ---------------------------------------------------------------
def to_samples(make):
    for target in ALL:
        yield S(make((3, 4)), dtype=target)
    yield S(make((0, 2)), dtype="float64")


def cat_samples(make):
    yield S(make((2, 3)), make((4, 3)), dim=0)
    yield S(make((2, 3)), make((2, 5)), make((2, 1)), dim=1)
    yield S(make((2, 3)), make((2, 2)), dim=-1)
    yield S(make((0, 3)), make((2, 3)), dim=0)
    yield S(make((2, 3)), make((0,)), dim=0)  # PyTorch skips legacy empty 1-D tensors
    yield S(make((7,)), dim=0)


def _cat_ref(*arrays, dim=0):
    kept = [a for a in arrays if not (a.ndim == 1 and a.size == 0)] or arrays
    return np.concatenate(kept, axis=dim)


def stack_samples(make):
    for dim in (0, -1, 2, 1):
        yield S(make((2, 3)), make((2, 3)), make((2, 3)), dim=dim)
    yield S(make(()), make(()), dim=0)
    yield S(make((0, 2)), make((0, 2)), dim=1)


def index_add_samples(make):
    yield S(make((5, 3)), 0, make.index((4,), 5), make((4, 3)))
    yield S(make((5, 3)), 1, np.array([2, 2, 0]), make((5, 3)), alpha=2)
    yield S(make((5, 3)), -1, np.zeros(0, np.int64), make((5, 0)))
    yield S(make((4, 2, 3)), 1, np.array([1]), make((4, 1, 3)))


def _index_add_ref(x, dim, index, source, alpha=1):
    out = x.copy()
    np.add.at(np.moveaxis(out, dim, 0), index, np.moveaxis(source * alpha, dim, 0))
    return out


def _select_backward_ref(grad, sizes, dim, index):
    out = np.zeros(sizes)
    np.moveaxis(out, dim, 0)[index] = grad
    return out


def _slice_backward_ref(grad, sizes, dim, start, end, step):
    out = np.zeros(sizes)
    np.moveaxis(out, dim, 0)[start:end:step] = np.moveaxis(grad, dim, 0)
    return out


COPIES = [
    OpCase("contiguous", (Op.CONTIGUOUS,), lambda lib, x: x.contiguous(), np.copy,
           on([((3, 4),), ((),), ((2, 0, 3),)]), ALL),
    OpCase("clone", (Op.CLONE,), lambda lib, x: x.clone(), np.copy,
           on([((3, 4),), ((),), ((2, 0, 3),), ((2, 3, 5),)]), ALL),
    OpCase("to", (Op.TO_COPY,), lambda lib, x, dtype: x.to(dtype=dtype),
           lambda x, dtype: x.astype(dtype), to_samples, ALL),
    OpCase("cat", (Op.CAT,), lambda lib, *ts, dim: lib.cat(ts, dim), _cat_ref, cat_samples,
           ALL),
    OpCase("stack", (Op.STACK,), lambda lib, *ts, dim: lib.stack(ts, dim),
           lambda *arrays, dim: np.stack(arrays, axis=dim), stack_samples, ALL),
    OpCase("index_select", (Op.INDEX_SELECT,), lambda lib, x, d, i: x.index_select(d, i),
           lambda x, d, i: np.take(x, i, axis=d),
           lambda make: [S(make((5, 3)), 0, make.index((4,), 5)),
                         S(make((5, 3)), -1, make.index((6,), 3)),
                         S(make((5, 3)), 1, np.zeros(0, np.int64)),
                         S(make((0, 3)), 1, make.index((2,), 3))], ALL),
    OpCase("index_add", (Op.INDEX_ADD,), lambda lib, x, *a, **k: x.index_add(*a, **k),
           _index_add_ref, index_add_samples, NUMBERS),
    OpCase("embedding", (Op.EMBEDDING,), lambda lib, w, i: lib.embedding(w, i),
           lambda w, i: w[i],
           lambda make: [S(make((10, 4)), make.index((2, 3), 10)),
                         S(make((10, 4)), np.array(7)), S(make((3, 2)), np.zeros(0, np.int64))],
           NUMBERS),
    OpCase("select_backward", (Op.SELECT_BACKWARD,),
           lambda lib, g, *a: aten(lib).select_backward(g, *a), _select_backward_ref,
           lambda make: [S(make((3,)), [3, 4], 1, 2), S(make((2, 4)), [2, 3, 4], 1, -1)]),
    OpCase("slice_backward", (Op.SLICE_BACKWARD,),
           lambda lib, g, *a: aten(lib).slice_backward(g, *a), _slice_backward_ref,
           lambda make: [S(make((2, 4)), [5, 4], 0, 1, 5, 2),
                         S(make((3, 4)), [3, 7], 1, 2, 6, 1)]),
]


# sliding windows: im2col (F.unfold) and col2im (F.fold), from their definition --------
def _window_geometry(size, kernel, dilation, padding, stride):
    return tuple((n + 2 * p - d * (k - 1) - 1) // st + 1
                 for n, k, d, p, st in zip(size, kernel, dilation, padding, stride))


def _im2col_ref(x, kernel, dilation, padding, stride):
    *outer, h, w = x.shape
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
    oh, ow = _window_geometry((h, w), kernel, dilation, padding, stride)
    padded = np.pad(x, [(0, 0)] * len(outer) + [(ph, ph), (pw, pw)])
    cols = np.empty((*outer, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            for y in range(oh):
                for z in range(ow):
                    cols[..., i, j, y, z] = padded[..., y * sh + i * dh, z * sw + j * dw]
    return cols.reshape(*outer[:-1], outer[-1] * kh * kw, oh * ow)


def _col2im_ref(cols, output_size, kernel, dilation, padding, stride):
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = output_size, kernel, dilation, \
        padding, stride
    oh, ow = _window_geometry((h, w), kernel, dilation, padding, stride)
    *outer, ck, _ = cols.shape
    blocks = cols.reshape(*outer, ck // (kh * kw), kh, kw, oh, ow)
    padded = np.zeros((*outer, ck // (kh * kw), h + 2 * ph, w + 2 * pw))
    for i in range(kh):
        for j in range(kw):
            for y in range(oh):
                for z in range(ow):
                    padded[..., y * sh + i * dh, z * sw + j * dw] += blocks[..., i, j, y, z]
    return padded[..., ph:ph + h, pw:pw + w]


WINDOW_ARGS = [([2, 3], [1, 1], [0, 0], [1, 1]), ([3, 2], [1, 2], [1, 0], [2, 1]),
               ([1, 1], [1, 1], [2, 1], [3, 3])]  # (kernel, dilation, padding, stride)
WINDOWS = [
    OpCase("im2col", (Op.IM2COL,), lambda lib, x, *a: aten(lib).im2col(x, *a), _im2col_ref,
           lambda make: [S(make((2, 3, 5, 6)), *a) for a in WINDOW_ARGS] +
           [S(make((3, 4, 4)), *WINDOW_ARGS[1]), S(make((0, 2, 4, 5)), *WINDOW_ARGS[0])]),
    OpCase("col2im", (Op.COL2IM,), lambda lib, c, *a: aten(lib).col2im(c, *a), _col2im_ref,
           lambda make: [S(make((2, 3 * a[0][0] * a[0][1], int(np.prod(
                             _window_geometry((5, 6), *a))))), [5, 6], *a) for a in WINDOW_ARGS] +
           [S(make((12, 9)), [4, 4], [2, 2], [1, 1], [0, 0], [1, 1])],
           # each add of a 16-bit window rounded, as PyTorch's loop (test_half_accumulate)
           tolerance={"float16": (1e-2, 1e-3), "bfloat16": (2e-2, 1e-2)}),
]


# indexing with index tensors: index, index_put, gather, scatter, nonzero ---------------
def index_put_samples(make):
    x = make((5, 4, 3))
    yield S(x, (make.index((2, 3), 5),), make((2, 3, 4, 3)))
    yield S(x, (np.array([4, -5, 0]), make.index((3,), 4)), make((3,)))  # negative indices
    yield S(x, (make.index((6,), 5),), make(()))  # one value, broadcast
    yield S(x, (make.mask((5,)),), make(()))
    yield S(x, (np.zeros(0, np.int64),), make((0, 4, 3)))
    yield S(make((0, 3)), (np.zeros(0, np.int64),), make((3,)))


def _index_put_ref(x, indices, values, accumulate=False):
    out = x.copy()
    key = tuple(k for i in indices for k in (np.nonzero(i) if i.dtype == np.bool_ else (i,)))
    if accumulate:
        np.add.at(out, key, np.broadcast_to(values, out[key].shape))
    else:
        out[key] = values
    return out


def _unique_along(make, shape, size, dim):
    """An index of `shape` whose values along `dim` are distinct, in [0, size): a scatter
    without repeats, so its result does not depend on the order of writes."""
    order = np.argsort(make.rng.random(shape[:dim] + (size,) + shape[dim + 1:]), axis=dim)
    return np.take(order, np.arange(shape[dim]), axis=dim).astype(np.int64)


def along_samples(make):
    """(x, dim, index, src) for gather / scatter: index no larger than x apart from dim,
    and no larger than src anywhere."""
    yield S(make((4, 5)), 1, _unique_along(make, (3, 2), 5, 1), make((3, 4)))
    yield S(make((4, 5)), 0, _unique_along(make, (2, 5), 4, 0), make((2, 5)))
    yield S(make((3, 4, 2)), -1, _unique_along(make, (3, 4, 2), 2, 2), make((3, 4, 2)))
    yield S(make((4, 3)), 0, np.zeros((0, 3), np.int64), make((0, 3)))
    yield S(make(()), 0, np.array(0), make(()))


def _gather_ref(x, dim, index, src=None):
    if x.ndim == 0:
        return x.copy()
    cut = x[tuple(slice(None) if k == dim % x.ndim else slice(0, n)
                  for k, n in enumerate(index.shape))]
    return np.take_along_axis(cut, index, axis=dim)


def _scatter_ref(x, dim, index, src, add=False):
    out = x.copy()
    if x.ndim == 0:
        return out + src if add else src.copy()
    dim %= x.ndim
    grid = np.indices(index.shape, sparse=True)
    key = tuple(index if k == dim else g for k, g in enumerate(grid))
    values = src[tuple(slice(0, n) for n in index.shape)]
    if add:
        np.add.at(out, key, values)
    else:
        out[key] = values
    return out


def scatter_add_samples(make):
    yield from along_samples(make)
    yield S(make((4, 5)), 1, make.index((4, 7), 5), make((4, 7)))  # repeats add up


INDEXING = [
    OpCase("index_put", (Op.INDEX_PUT,), lambda lib, x, i, v: x.index_put(i, v),
           _index_put_ref, index_put_samples, ALL, meta=False),
    OpCase("index_put_accumulate", (Op.INDEX_PUT,),
           lambda lib, x, i, v: x.index_put(i, v, accumulate=True),
           lambda x, i, v: _index_put_ref(x, i, v, True),
           lambda make: [S(make((5, 3)), (make.index((7,), 5),), make((7, 3))),
                         S(make((5, 3)), (np.array([1, 1, -4]), np.array([2, 2, 2])),
                           make(()))], NUMBERS,
           # each 16-bit add of a repeated index rounded, as PyTorch's (test_half_accumulate)
           tolerance={"float16": (5e-3, 1e-3), "bfloat16": (2e-2, 8e-3)}),
    OpCase("gather", (Op.GATHER,), lambda lib, x, d, i, src: lib.gather(x, d, i),
           _gather_ref, along_samples, ALL),
    OpCase("scatter", (Op.SCATTER,), lambda lib, x, d, i, src: x.scatter(d, i, src),
           _scatter_ref, along_samples, ALL, layouts=("contiguous", "transposed", "strided")),
    OpCase("scatter_value", (Op.SCATTER,), lambda lib, x, d, i, src: x.scatter(d, i, 2.5),
           lambda x, d, i, src: _scatter_ref(x, d, i, np.full(i.shape, 2.5)),
           along_samples, FLOATS, layouts=("contiguous", "transposed", "strided")),
    OpCase("scatter_add", (Op.SCATTER_ADD,), lambda lib, x, d, i, src: x.scatter_add(d, i, src),
           lambda x, d, i, src: _scatter_ref(x, d, i, src, add=True), scatter_add_samples,
           NUMBERS),
    OpCase("nonzero", (Op.NONZERO,), lambda lib, x: lib.nonzero(x), np.argwhere,
           lambda make: [S(make((4, 5))), S(make((7,))), S(make((0, 3))), S(make(()))], ALL,
           meta=False),
]


def isin_samples(make):
    x = make((3, 5))
    yield S(x, np.concatenate([x.reshape(-1)[::4], make((3,))]))  # some values shared
    x = make((4, 1, 3))
    yield S(x, np.concatenate([x.reshape(-1)[:4], make((2,))]).reshape(2, 3))  # 2-d tests
    yield S(make(()), make((5,)))
    yield S(make((0, 3)), make((4,)))
    yield S(make((7,)), make((0,)))
    yield S(make((3, 5)), 2)
    yield S(2, make((3, 2)))
    x = make((2, 7))
    yield S(x, x[:, 2:5], invert=True)


MEMBERSHIP = [
    OpCase("isin", (Op.ISIN,), lambda lib, x, t, **kw: lib.isin(x, t, **kw),
           lambda x, t, invert=False: np.isin(x, t, invert=invert), isin_samples, NUMBERS),
]


# in place (on a clone, so every layout of the input can be used) ----------------------
INPLACE_SHAPES = [((3, 5), (3, 5)), ((3, 5), (5,)), ((3, 5), ()), ((2, 0), (2, 1)),
                  ((4, 1, 3), (1, 3))]


def inplace_samples(make):
    for a, b in INPLACE_SHAPES:
        yield S(make(a), make(b))
    yield S(make((2, 3)), 2)


def inplace(name, op, ref, dtypes=NUMBERS, samples=inplace_samples):
    method = op.schema.name
    return OpCase(name, (op,), lambda lib, x, *a, **k: getattr(x.clone(), method)(*a, **k),
                  ref, samples, dtypes)


_UNARY_INPLACE = {
    Op.SIN_: np.sin, Op.COS_: np.cos, Op.TAN_: np.tan, Op.ASIN_: np.arcsin,
    Op.ACOS_: np.arccos, Op.ATAN_: np.arctan, Op.SINH_: np.sinh, Op.COSH_: np.cosh,
    Op.ASINH_: np.arcsinh, Op.ACOSH_: np.arccosh, Op.ATANH_: np.arctanh, Op.EXP2_: np.exp2,
    Op.SINC_: np.sinc, Op.DEG2RAD_: np.deg2rad, Op.RAD2DEG_: np.rad2deg,
    Op.FLOOR_: np.floor, Op.CEIL_: np.ceil, Op.TRUNC_: np.trunc, Op.ROUND_: np.round,
    Op.FRAC_: lambda x: x - np.trunc(x), Op.SGN_: np.sign, Op.NEG_: np.negative,
    Op.ABS_: np.abs, Op.SIGN_: np.sign, Op.EXP_: np.exp, Op.LOG_: np.log, Op.SQRT_: np.sqrt,
    Op.RSQRT_: lambda x: 1 / np.sqrt(x), Op.RELU_: lambda x: np.maximum(x, 0),
    Op.TANH_: np.tanh, Op.SIGMOID_: lambda x: 1 / (1 + np.exp(-x)),
    Op.ERF_: np.vectorize(math.erf, otypes=[float]), Op.EXPM1_: np.expm1, Op.LOG1P_: np.log1p,
    Op.NAN_TO_NUM_: np.nan_to_num}
_BINARY_INPLACE = {
    Op.ATAN2_: np.arctan2, Op.HYPOT_: np.hypot, Op.COPYSIGN_: np.copysign,
    Op.XLOGY_: lambda x, y: np.where(x == 0, 0.0, x * np.log(y)), Op.POW_: np.power,
    Op.EQ_: np.equal, Op.NE_: np.not_equal, Op.LT_: np.less, Op.LE_: np.less_equal,
    Op.GT_: np.greater, Op.GE_: np.greater_equal}


def _unary_inplace_samples(make):
    return [S(make((3, 5))), S(make(())), S(make((0, 2)))]


def _tensors_inplace_samples(make):
    """Tensors only: PyTorch's atan2_, hypot_ and nextafter_ take no Python number."""
    return (S(make(a), make(b)) for a, b in INPLACE_SHAPES)


def _divisor_inplace_samples(make):
    for a, b in INPLACE_SHAPES:
        yield S(make(a, scale=5.0), make(b, positive=True))


INPLACE = [
    OpCase("index_put_", (Op.INDEX_PUT_,), lambda lib, x, *a, **k: x.clone().index_put_(*a, **k),
           _index_put_ref,
           lambda make: [S(make((5, 3)), (make.index((4,), 5),), make((4, 3)), accumulate=True),
                         S(make((5, 3)), (make.mask((5, 3)),), make(()))], ALL, meta=False),
    inplace("add_", Op.ADD_, lambda x, y, alpha=1: x + alpha * y),
    inplace("add_alpha_", Op.ADD_, lambda x, y, alpha=1: x + alpha * y,
            samples=lambda make: (S(make(a), make(b), alpha=2) for a, b in INPLACE_SHAPES)),
    inplace("sub_", Op.SUB_, lambda x, y, alpha=1: x - alpha * y),
    inplace("mul_", Op.MUL_, np.multiply),
    inplace("div_", Op.DIV_, np.true_divide, FLOATS),
    inplace("clamp_", Op.CLAMP_, lambda x, lo, hi: np.clip(x, lo, hi),
            samples=lambda make: [S(make((3, 5)), -1, 1), S(make(()), 0, 2)]),
    *(inplace(op.schema.name, op, ref, FLOATS, samples=_unary_inplace_samples)
      for op, ref in _UNARY_INPLACE.items()),
    inplace("round_decimals_", Op.ROUND_, lambda x, decimals: np.round(x, decimals), FLOATS,
            samples=lambda make: [S(make((3, 5)), decimals=1)]),
    *(inplace(op.schema.name, op, ref, FLOATS, samples=_tensors_inplace_samples)
      for op, ref in _BINARY_INPLACE.items()),
    inplace("nextafter_", Op.NEXTAFTER_,  # (a step of float32's: the reference is float64)
            lambda a, b: np.nextafter(np.float32(a), np.float32(b)), ("float32",),
            samples=_tensors_inplace_samples),
    inplace("heaviside_", Op.HEAVISIDE_, lambda x, v: np.where(x == 0, v, x > 0), NUMBERS,
            samples=_tensors_inplace_samples),
    inplace("fmod_", Op.FMOD_, np.fmod, NUMBERS, samples=_divisor_inplace_samples),
    inplace("remainder_", Op.REMAINDER_, np.remainder, NUMBERS,
            samples=_divisor_inplace_samples),
    inplace("floor_divide_", Op.FLOOR_DIVIDE_, np.floor_divide, NUMBERS,
            samples=_divisor_inplace_samples),
    inplace("div_floor_", Op.DIV_MODE_, lambda a, b, rounding_mode: np.floor_divide(a, b),
            NUMBERS, samples=lambda make: (S(*s.args, rounding_mode="floor")
                                           for s in _divisor_inplace_samples(make))),
    inplace("clamp_tensors_", Op.CLAMP_TENSOR_,
            lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), NUMBERS,
            samples=lambda make: (S(make(a), make(b), np.asarray(make(b) + 1))
                                  for a, b in INPLACE_SHAPES)),
    dataclasses.replace(inplace("logit_", Op.LOGIT_, lambda x: np.log(x / (1 - x)), FLOATS,
                                samples=_unary_inplace_samples),
                        tolerance={"float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)}),
    inplace("addcmul_", Op.ADDCMUL_, lambda x, a, b, value=1: x + value * a * b, NUMBERS,
            samples=lambda make: (S(make(a), make(b), make(b), value=2)
                                  for a, b in INPLACE_SHAPES)),
    inplace("addcdiv_", Op.ADDCDIV_, lambda x, a, b, value=1: x + value * a / b, FLOATS,
            samples=lambda make: (S(make(a), make(b), make(b, positive=True), value=-0.5)
                                  for a, b in INPLACE_SHAPES)),
    inplace("zero_", Op.ZERO_, np.zeros_like, ALL,
            samples=lambda make: [S(make((3, 5))), S(make(())), S(make((0, 2)))]),
    inplace("fill_", Op.FILL_, np.full_like, ALL,
            samples=lambda make: [S(make((3, 5)), 1), S(make(()), 0), S(make((2, 3)), True)]),
    inplace("copy_", Op.COPY_, lambda x, src: np.broadcast_to(src, x.shape), ALL,
            samples=lambda make: (S(make(a), make(b)) for a, b in INPLACE_SHAPES)),
]

CASES = VIEWS + COPIES + WINDOWS + INDEXING + MEMBERSHIP + INPLACE
