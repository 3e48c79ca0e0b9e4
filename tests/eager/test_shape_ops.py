"""Aliasing: views share memory with their base both ways, in-place ops write through
views and bump the shared version counter, copies share nothing, and `t[idx] = v`
agrees with numpy's assignment."""
from __future__ import annotations

import numpy as np
import pytest

import eager

# (name, the view in eager, the same view in numpy); all views of a (2, 3, 4) tensor
VIEWS = [
    ("view", lambda t: t.view(6, 4), lambda a: a.reshape(6, 4)),
    ("reshape", lambda t: t.reshape(4, -1), lambda a: a.reshape(4, -1)),
    ("transpose", lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    ("t", lambda t: t[0].t(), lambda a: a[0].T),
    ("permute", lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("unsqueeze", lambda t: t.unsqueeze(1), lambda a: a[:, None]),
    ("squeeze", lambda t: t[:1].squeeze(0), lambda a: a[:1].squeeze(0)),
    ("select", lambda t: t.select(1, -1), lambda a: a[:, -1]),
    ("slice", lambda t: t[:, 1:, ::2], lambda a: a[:, 1:, ::2]),
    ("index_basic", lambda t: t[1, ..., None, 1:3], lambda a: a[1, ..., None, 1:3]),
    ("flatten", lambda t: t.flatten(1), lambda a: a.reshape(2, 12)),
    ("split", lambda t: t.split(2, 2)[1], lambda a: a[:, :, 2:4]),
    ("chunk", lambda t: t.chunk(3, 1)[2], lambda a: a[:, 2:3]),
    ("detach", lambda t: t.detach(), lambda a: a),
    ("view_of_view", lambda t: t.transpose(0, 1)[1:].select(2, 0),
     lambda a: a.swapaxes(0, 1)[1:, :, 0]),
]


def base_tensor():
    return eager.arange(24, dtype=eager.float64).reshape(2, 3, 4)


@pytest.mark.parametrize("name, view, np_view", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_shares_memory_with_its_base(name, view, np_view):
    base = base_tensor()
    v = view(base)
    expected = base.numpy().copy()
    np.testing.assert_array_equal(v.numpy(), np_view(expected))

    v.mul_(-1)  # through the view, seen in the base
    np_view(expected)[...] *= -1
    np.testing.assert_array_equal(base.numpy(), expected)

    base.add_(100)  # through the base, seen in the view
    np.testing.assert_array_equal(v.numpy(), np_view(expected + 100))
    assert v._version == base._version == 2


def test_expand_reads_through_to_its_base():
    base = eager.tensor([[1.0], [2.0]])
    v = base.expand(2, 3)
    assert v.stride() == (1, 0)
    base.mul_(10)
    np.testing.assert_array_equal(v.numpy(), np.broadcast_to(base.numpy(), (2, 3)))


def test_copies_share_nothing():
    base = base_tensor()
    copies = [base.clone(), base.transpose(0, 1).contiguous(), base.reshape(-1).to(eager.float32),
              base[eager.tensor([0, 1])], base[base > 5], eager.cat([base, base])]
    before = [c.numpy().copy() for c in copies]
    base.zero_()
    for c, b in zip(copies, before):
        np.testing.assert_array_equal(c.numpy(), b)


def test_contiguous_and_reshape_copy_only_when_they_must():
    base = base_tensor()
    assert base.contiguous() is base
    assert base.reshape(6, 4)._storage is base._storage
    transposed = base.transpose(1, 2)
    assert not transposed.is_contiguous()
    assert transposed.contiguous()._storage is not base._storage
    assert transposed.reshape(-1)._storage is not base._storage  # no view can do it


# in place ---------------------------------------------------------------------------------
INPLACE = [  # (name, the op in eager, the same in numpy on an array)
    ("add_", lambda t: t.add_(eager.tensor([1.0, 2.0, 3.0, 4.0]), alpha=2),
     lambda a: a.__iadd__(2 * np.array([1.0, 2.0, 3.0, 4.0]))),
    ("sub_", lambda t: t.sub_(1.5), lambda a: a.__isub__(1.5)),
    ("mul_", lambda t: t.mul_(eager.tensor(-2.0)), lambda a: a.__imul__(-2.0)),
    ("div_", lambda t: t.div_(4), lambda a: a.__itruediv__(4)),
    ("clamp_", lambda t: t.clamp_(2, 9), lambda a: np.clip(a, 2, 9, out=a)),
    ("zero_", lambda t: t.zero_(), lambda a: a.fill(0)),
    ("fill_", lambda t: t.fill_(7), lambda a: a.fill(7)),
    ("copy_", lambda t: t.copy_(eager.tensor([1, 2, 3, 4])), lambda a: np.copyto(a, [1, 2, 3, 4])),
    ("iadd", lambda t: t.__iadd__(3), lambda a: a.__iadd__(3)),
    ("setitem", lambda t: t.__setitem__((slice(None), 1), 5.0),
     lambda a: a.__setitem__((slice(None), 1), 5.0)),
]
TARGETS = [  # in-place ops write into these (3, 4) views of a (4, 8) base
    ("whole", lambda t: t[:3, :4], lambda a: a[:3, :4]),
    ("transposed", lambda t: t[:4, :3].t(), lambda a: a[:4, :3].T),
    ("strided", lambda t: t[1:, ::2][:, :4], lambda a: a[1:, ::2][:, :4]),
]


@pytest.mark.parametrize("target, view, np_view", TARGETS, ids=[t[0] for t in TARGETS])
@pytest.mark.parametrize("name, op, np_op", INPLACE, ids=[op[0] for op in INPLACE])
def test_inplace_op_writes_its_target_and_bumps_the_version(name, op, np_op, target, view,
                                                             np_view):
    base = eager.arange(32, dtype=eager.float32).reshape(4, 8)
    expected = base.numpy().copy()
    t = view(base)
    before = t._version
    out = op(t)
    np_op(np_view(expected))
    if name != "setitem":
        assert out is t
    assert t._version == base._version == before + 1
    np.testing.assert_array_equal(base.numpy(), expected)


def test_out_of_place_ops_leave_the_version_alone():
    t = eager.ones(3)
    t + 1, t.exp(), t.sum(), t.view(3), t[1:]  # noqa: B018
    assert t._version == 0


# t[idx] = v -------------------------------------------------------------------------------
SETITEM_KEYS = [1, -1, slice(1, None), (slice(None), slice(None, None, 2)), (Ellipsis, 0),
                (1, 2), [0, 2], np.array([[1], [0]]), (np.array([0, 2]), np.array([1, 3]))]


@pytest.mark.parametrize("key", SETITEM_KEYS, ids=repr)
@pytest.mark.parametrize("value", [7, -1.5, "tensor", "row"])
def test_setitem_agrees_with_numpy(key, value):
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    t = eager.tensor(a)
    eager_key = tuple(eager.tensor(k) if isinstance(k, np.ndarray) else k for k in key) \
        if isinstance(key, tuple) else eager.tensor(key) if isinstance(key, np.ndarray) else key
    target_shape = a[key].shape
    if value == "tensor":
        value = np.arange(np.prod(target_shape), dtype=np.float64).reshape(target_shape)
    elif value == "row":  # broadcast along leading dims
        value = np.arange(target_shape[-1]) + 0.5 if target_shape else np.array(0.5)
    a[key] = value
    t[eager_key] = eager.tensor(value) if isinstance(value, np.ndarray) else value
    np.testing.assert_array_equal(t.numpy(), a)
    assert t._version == 1


def test_setitem_with_a_mask_and_through_a_view():
    base = eager.zeros(3, 4)
    rows = base[1:]  # a view: assignment into it lands in the base
    rows[rows == 0] = 2.0
    rows[:, eager.tensor([True, False, True, False])] = eager.tensor([5.0, 6.0])
    expected = np.zeros((3, 4), np.float32)
    expected[1:] = 2.0
    expected[1:, [0, 2]] = [5.0, 6.0]
    np.testing.assert_array_equal(base.numpy(), expected)


def test_setitem_casts_the_value_to_the_tensor_dtype():
    t, a = eager.zeros(3, dtype=eager.int64), np.zeros(3, np.int64)
    t[0] = a[0] = 2.7
    t[1:] = eager.tensor([True, False])
    a[1:] = [True, False]
    assert t.dtype is eager.int64
    np.testing.assert_array_equal(t.numpy(), a)


def test_advanced_indexing_returns_a_copy():
    base = base_tensor()
    picked = base[eager.tensor([1, 0])]
    picked.zero_()
    np.testing.assert_array_equal(base.numpy(), np.arange(24.0).reshape(2, 3, 4))


@pytest.mark.parametrize("shape, dim, count", [((43, 64), 0, 512), ((5, 7, 3), 1, 40),
                                               ((4, 6), 1, 0), ((0, 3), 1, 5), ((9,), 0, 33)])
def test_add_at_through_flat_indices_adds_in_np_add_at_s_order(shape, dim, count):
    """The same bits as np.add.at: repeated and negative indices, float32 values whose sum
    depends on the order, a non-contiguous target (numpy's own path)."""
    from eager.kernels._common import add_at
    rng = np.random.default_rng(count)
    size = shape[dim]
    index = rng.integers(-size, size, count)
    values_shape = shape[:dim] + (count,) + shape[dim + 1:]
    values = (rng.standard_normal(values_shape) * 10.0 ** rng.integers(-4, 5, values_shape)
              ).astype(np.float32)
    grid = np.indices(values_shape, sparse=True)
    key = tuple(index.reshape(g.shape) if k == dim else g for k, g in enumerate(grid))
    for start in (np.zeros(shape, np.float32), np.ones(shape[::-1], np.float32).T):
        want, got = start.copy(order="K"), start.copy(order="K")
        np.add.at(want, key, values)
        add_at(got, key, values)
        assert got.tobytes() == want.tobytes() and got.flags.c_contiguous == \
            want.flags.c_contiguous
