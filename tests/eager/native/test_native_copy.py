"""The generated strided copy (eager/backends/native/copies.py) and cat on it
(eager/kernels/copies.py): numpy's values, bit for bit, over every item size (1, 2, 4, 8
bytes), the layouts its blocks treat apart (whole rows, transposed tiles whole and at the
edges, any other strides an item a step, outer dims, broadcast sources), empty and
one-element dims, 0-d arrays, and on 1 and 2 threads (cut over outer indices or over
rows); nothing outside the destination is written."""
import numpy as np
import pytest

import eager
from eager.backends.native import copies as native
from eager.kernels import copies as kernels
from runtime import threads as threads_module
from runtime.llvm.jit import compiling_here

DTYPES = [np.int8, np.float16, np.float32, np.int64, np.float64, np.bool_]
_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}  # compared as bits


@pytest.fixture(autouse=True, params=[1, 2], ids=["1 thread", "2 threads"])
def threads(request, monkeypatch):
    """Every size native, and copies cut among `threads` threads from any size."""
    monkeypatch.setattr(kernels, "CAT_NATIVE_BYTES", 0)
    monkeypatch.setattr(native, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(native, "_plans", {})
    monkeypatch.setattr(threads_module, "_chosen", [None])  # put back after the test
    eager.set_num_threads(request.param)
    with compiling_here():  # no fallback to numpy while a kernel compiles
        yield request.param


def _values(shape, dtype, seed=0) -> np.ndarray:
    bits = np.random.default_rng(seed).integers(0, 256, (*shape, np.dtype(dtype).itemsize),
                                                dtype=np.uint8)
    if dtype == np.bool_:
        bits &= 1
    return bits.view(dtype).reshape(shape)


def _sources(dtype) -> list:
    """Source views of every layout the kernel treats apart."""
    a = _values((6, 37, 29), dtype)
    b = _values((3, 5, 7), dtype, 1)
    return [
        a,  # contiguous: one row
        a[:, 1:30],  # whole rows, outer dims
        a.transpose(0, 2, 1),  # transposed: whole tiles and edges
        a.transpose(2, 1, 0),
        a[::2, ::3, 1::2],  # steps: an item a step
        np.broadcast_to(a[:, :1], a.shape),  # a broadcast (stride 0) source
        np.broadcast_to(a[0, 0, 0], (4, 3, 2)),
        b, b.transpose(1, 0, 2), b[:, :1], b[:, :0],
        _values((64, 64), dtype).T,  # whole tiles of every item size
        _values((1, 1, 1), dtype), a[2, 3, 4][()], a[2, 3],
        _values((2, 1, 3, 1, 2, 1, 3, 1, 2), dtype).transpose(8, 0, 1, 2, 3, 4, 5, 6, 7),
    ]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_copy_equals_numpy_s_into_contiguous_and_transposed_destinations(dtype):
    for src in _sources(dtype):
        src = np.asarray(src).view(_BITS[np.dtype(dtype).itemsize])
        for order in (None, tuple(reversed(range(src.ndim)))):
            space = np.full((3, *reversed(src.shape)) if order else (3, *src.shape), 7,
                            src.dtype)
            dst = space[1:2].reshape(space.shape[1:])  # an array where 0-d too
            if order:
                dst = dst.transpose(order)
            before = native.calls
            assert native.copy([(dst, src)])
            assert native.calls == before + 1
            np.testing.assert_array_equal(dst, src, err_msg=f"{src.shape} {src.strides}")
            assert (space[0] == 7).all() and (space[2] == 7).all()


def test_more_outer_dims_than_a_record_holds_are_declined():
    src = _values((2,) * 10, np.float32).transpose(9, 8, 7, 6, 5, 4, 3, 2, 1, 0)[..., ::2]
    assert not native.copy([(np.empty(src.shape, np.float32), src)])


def _cat_both(tensors, dim):
    """(generated, numpy's) cat of `tensors`, checking that the kernel ran."""
    kernels._copies = False
    expected = eager.cat(tensors, dim)
    kernels._copies = None
    before = native.calls
    got = eager.cat(tensors, dim)
    assert native.calls == before + 1, "the generated copy did not run"
    return got, expected


CAT_DTYPES = [eager.float32, eager.float64, eager.int64, eager.bool, eager.float16,
              eager.bfloat16, eager.int8]


@pytest.mark.parametrize("dtype", CAT_DTYPES, ids=str)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_equals_numpy_s_concatenate(dtype, dim):
    rng = np.random.default_rng(2)
    x = eager.tensor(rng.standard_normal((8, 24, 40)) * 50).to(dtype)
    y = eager.tensor(rng.standard_normal((8, 40, 48)) * 50).to(dtype)
    parts = [x, x.permute(0, 2, 1).contiguous().permute(0, 2, 1), y.permute(0, 2, 1)[:, ::2],
             x.flip(1), x[:1].expand(8, 24, 40)]
    parts = [p.transpose(0, 1) if dim == 1 else p for p in parts]
    got, expected = _cat_both(parts, dim)
    assert got.dtype == expected.dtype == dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got._np().view(np.uint8), expected._np().view(np.uint8))


def test_cat_of_the_gpt_step_s_q_k_v_gradients():
    rng = np.random.default_rng(3)
    q, v = (eager.tensor(rng.standard_normal((8, 64, 384), np.float32)) for _ in range(2))
    k = eager.tensor(rng.standard_normal((8, 384, 64), np.float32)).transpose(1, 2)
    got, expected = _cat_both([q, k, v], 2)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    np.testing.assert_array_equal(got.numpy()[..., 384:768], k.numpy())


def test_cat_of_many_parts_empty_parts_and_one_element_dims():
    parts = [eager.arange(7 * i, dtype=eager.float32).reshape(1, i, 7).expand(3, i, 7)
             for i in (0, 1, 2, 0, 5, 1)] + [eager.zeros(0)]
    got, expected = _cat_both(parts, 1)
    assert got.shape == (3, 9, 7)
    assert eager.equal(got, expected)
    got, expected = _cat_both([eager.ones(1, 1, 1)] * 39 + [eager.ones(1, 1, 4)[..., ::2]], -1)
    assert got.shape == (1, 1, 41) and eager.equal(got, expected)


def test_cat_of_parts_of_other_dtypes_or_all_contiguous_keeps_numpy():
    parts = [eager.ones(4, 5).t(), eager.arange(20).reshape(4, 5).t()]
    before = native.calls
    out = eager.cat(parts, 0)
    assert native.calls == before and out.dtype == eager.float32
    assert out[5:].tolist() == [[float(i) for i in range(j, 20, 5)] for j in range(5)]
    assert eager.cat([eager.ones(4, 5), eager.zeros(4, 5)], 1).tolist() == [[1.0] * 5 + [0.0] * 5] * 4
    assert native.calls == before


def test_cat_s_errors_are_unchanged():
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 1"):
        eager.cat([eager.ones(2, 3), eager.ones(3, 3)], 1)
    with pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        eager.cat([eager.tensor(1.0), eager.tensor(2.0)])
