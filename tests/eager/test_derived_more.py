"""eager/derived_shapes.py and eager/derived_math.py: values (and gradients where
differentiable) against PyTorch in float64, numpy where PyTorch is not installed."""
import math

import numpy as np
import pytest

import eager

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4))
B = RNG.standard_normal((4, 5))
C = RNG.standard_normal((2, 3, 4))
LONG = RNG.standard_normal((3, 150))
SPECIAL = np.array([0.0, 1e-10, -1e-10, 1e-3, -0.7, 5.0, 30.0, -40.0])


def _torch():
    return pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


CASES = {  # id: (fn(lib, *tensors), arrays)
    "repeat": (lambda t, x: x.repeat(2, 1, 3), [A]),
    "tile": (lambda t, x: t.tile(x, (2,)), [C]),
    "repeat_interleave": (lambda t, x: t.repeat_interleave(x, 3, dim=1), [A]),
    "repeat_interleave-flat": (lambda t, x: x.repeat_interleave(2), [A]),
    "repeat_interleave-counts": (lambda t, x: x.repeat_interleave(t.tensor([1, 0, 2]), dim=0), [A]),
    "narrow": (lambda t, x: x.narrow(1, -3, 2), [A]),
    "movedim": (lambda t, x: t.movedim(x, (0, 2), (2, 0)), [C]),
    "moveaxis": (lambda t, x: x.moveaxis(-1, 0), [C]),
    "swapaxes": (lambda t, x: t.swapaxes(x, 0, 2), [C]),
    "unflatten": (lambda t, x: x.unflatten(1, (2, 2)), [A]),
    "ravel": (lambda t, x: x.t().ravel(), [A]),
    "broadcast_to": (lambda t, x: t.broadcast_to(x[0], (2, 4)), [A]),
    "hstack": (lambda t, x, y: t.hstack([x, y.t()[:3]]), [A, B]),
    "vstack": (lambda t, x: t.vstack([x, x[0]]), [A]),
    "dstack": (lambda t, x: t.dstack([x, x]), [A]),
    "column_stack": (lambda t, x: t.column_stack([x[0], x[1], x[:2].t()]), [A]),
    "meshgrid-xy": (lambda t, x, y: t.stack(t.meshgrid(x[0], y[0], indexing="xy")), [A, B]),
    "cartesian_prod": (lambda t, x, y: t.cartesian_prod(x[0], y[0, :2]), [A, B]),
    "atleast_3d": (lambda t, x: t.atleast_3d(x), [A]),
    "clip": (lambda t, x: x.clip(-0.5, 0.5), [A]),
    "clamp_min": (lambda t, x: x.clamp_min(0.1), [A]),
    "square": (lambda t, x: x.square(), [A]),
    "logsumexp": (lambda t, x: t.logsumexp(x, 1), [A]),
    "logsumexp-dims": (lambda t, x: x.logsumexp((0, 2), keepdim=True), [C]),
    "norm": (lambda t, x: x.norm(), [A]),
    "norm-p3-dim": (lambda t, x: t.norm(x, 3, dim=1), [A]),
    "norm-inf": (lambda t, x: x.norm(float("inf"), dim=0, keepdim=True), [A]),
    "log1p": (lambda t, x: t.log1p(x), [SPECIAL[:-1]]),
    "expm1": (lambda t, x: x.expm1(), [SPECIAL]),
    "log2": (lambda t, x: t.log2(x.abs() + 0.5), [A]),
    "log10": (lambda t, x: x.abs().log10(), [A]),
    "reciprocal": (lambda t, x: x.reciprocal(), [A]),
    "cumsum": (lambda t, x: t.cumsum(x, 1), [A]),
    "cumsum-dim0": (lambda t, x: x.cumsum(0), [C]),
    "cumsum-blocks": (lambda t, x: t.cumsum(x, -1), [LONG]),
    "cumprod": (lambda t, x: t.cumprod(x, 1), [A]),
    "cumprod-zeros": (lambda t, x: x.cumprod(0), [np.array([[2.0, 0.0], [0.0, 3.0], [4.0, 5.0],
                                                            [0.5, -1.0], [1.5, 2.0]])]),
    "bucketize": (lambda t, x: t.bucketize(x, t.tensor([-1.0, 0.0, 0.5])).to(x.dtype), [A]),
    "bucketize-right": (lambda t, x: t.bucketize(t.tensor([[-1.0, 0.0, 0.2, 1.0]]), t.tensor([-1.0, 0.0, 1.0]),
                                                 right=True).to(x.dtype), [A]),
    "searchsorted": (lambda t, x: t.searchsorted(t.tensor([-1.0, 0.0, 0.5]), x).to(x.dtype), [A]),
    "tensor-unfold": (lambda t, x: x.unfold(1, 3, 2), [C]),
    "tensor-unfold-dim0": (lambda t, x: x.unfold(0, 2, 1), [A]),
    "diff": (lambda t, x: t.diff(x, n=2, dim=1), [A]),
    "diff-prepend": (lambda t, x: x.diff(dim=0, prepend=x[:1] * 2), [A]),
    "take_along_dim": (lambda t, x: t.take_along_dim(x, t.tensor([[0], [3], [1]]), 1), [A]),
    "outer": (lambda t, x, y: t.outer(x[0], y[:, 0]), [A, B]),
    "inner": (lambda t, x, y: t.inner(x, y.t()), [A, B]),
    "diagonal": (lambda t, x: t.diagonal(x, 1), [A]),
    "diagonal-dims": (lambda t, x: x.diagonal(-1, 2, 1), [C]),
    "diag-embed": (lambda t, x: t.diag(x[0], -1), [A]),
    "diag-of-matrix": (lambda t, x: x.diag(2), [A]),
    "trace": (lambda t, x: t.trace(x), [A]),
    "einsum-matmul": (lambda t, x, y: t.einsum("ij,jk->ik", x, y), [A, B]),
    "einsum-attention": (lambda t, x, y: t.einsum("bqd,bkd->bqk", x, y), [C, C * 0.5]),
    "einsum-implicit": (lambda t, x, y: t.einsum("ij,jk", x, y), [A, B]),
    "einsum-ellipsis": (lambda t, x: t.einsum("...ij->...ji", x), [C]),
    "einsum-sum-out": (lambda t, x, y: t.einsum("bij,jk->b", x, y), [C, B]),
    "einsum-three": (lambda t, x, y, z: t.einsum("ij,jk,kl->il", x, y, z),
                     [A, B, RNG.standard_normal((5, 2))]),
    "einsum-outer": (lambda t, x, y: t.einsum("i,j->ij", x[0], y[0]), [A, B]),
    "einsum-broadcast": (lambda t, x, y: t.einsum("...j,...j->...", x, y), [C, A]),
}


def _run(lib, case):
    fn, arrays = CASES[case]
    inputs = [lib.tensor(a, dtype=lib.float64, requires_grad=True) for a in arrays]
    out = fn(lib, *inputs)
    if out.requires_grad:
        weights = np.random.default_rng(1).standard_normal(tuple(out.shape))
        (out * lib.tensor(weights)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else None
                                  for t in inputs]


@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients_equal_torchs(case):
    torch = _torch()
    (ours, our_grads), (theirs, their_grads) = _run(eager, case), _run(torch, case)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
    for i, (g, ref) in enumerate(zip(our_grads, their_grads)):
        assert (g is None) == (ref is None), f"gradient {i}"
        if g is not None:
            np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-12, err_msg=f"gradient {i}")


def test_cumsum_over_long_dims_equals_numpy():
    for n in (1, 64, 65, 1000, 4097):
        x = RNG.standard_normal((2, n))
        np.testing.assert_allclose(eager.cumsum(eager.tensor(x), 1).numpy(), np.cumsum(x, 1),
                                   rtol=1e-10, atol=1e-9)
    ints = eager.tensor([[3, -1, 4], [1, 5, 9]])
    assert eager.cumsum(ints, 1).tolist() == [[3, 2, 6], [1, 6, 15]]
    assert eager.cumsum(ints, 0).dtype == eager.int64


def test_log1p_and_expm1_keep_precision_near_zero():
    x = np.array([1e-12, -1e-15, 3e-8, 0.0])
    np.testing.assert_allclose(eager.log1p(eager.tensor(x)).numpy(), np.log1p(x), rtol=1e-14)
    np.testing.assert_allclose(eager.expm1(eager.tensor(x)).numpy(), np.expm1(x), rtol=1e-14)
    assert eager.expm1(eager.tensor([-800.0, 800.0])).tolist() == [-1.0, math.inf]


def test_nan_inf_predicates_and_nan_to_num():
    x = eager.tensor([1.0, math.nan, math.inf, -math.inf])
    assert eager.isnan(x).tolist() == [False, True, False, False]
    assert x.isinf().tolist() == [False, False, True, True]
    assert eager.isfinite(x).tolist() == [True, False, False, False]
    assert eager.isposinf(x).tolist() == [False, False, True, False]
    assert eager.nan_to_num(x, posinf=9.0).tolist() == [1.0, 0.0, 9.0, np.finfo(np.float32).min]
    assert eager.isfinite(eager.tensor([1, 2])).tolist() == [True, True]
    assert eager.count_nonzero(eager.tensor([[0, 1], [2, 0]]), 0).tolist() == [1, 1]


def test_host_found_ops_equal_numpy():
    x = eager.tensor([3, 1, 3, 0, 1, 3])
    assert eager.bincount(x).tolist() == np.bincount([3, 1, 3, 0, 1, 3]).tolist()
    assert eager.bincount(x, eager.tensor([0.5] * 6), minlength=6).tolist() == \
        [0.5, 1.0, 0.0, 1.5, 0.0, 0.0]
    values, inverse, counts = eager.unique(x, return_inverse=True, return_counts=True)
    assert values.tolist() == [0, 1, 3] and counts.tolist() == [1, 2, 3]
    assert values[inverse].tolist() == x.tolist()
    a = eager.tensor(A)
    assert eager.masked_select(a, a > 0).tolist() == A[A > 0].tolist()
    with pytest.raises(RuntimeError, match="bincount only supports 1-d non-negative"):
        eager.bincount(eager.tensor([-1, 2]))


def test_eye_and_the_in_place_spellings():
    assert eager.eye(2, 3).tolist() == np.eye(2, 3).tolist()
    t = eager.ones(3, 3)
    assert t.tril_() is t and t.tolist() == np.tril(np.ones((3, 3))).tolist()
    t.masked_fill_(t == 0, -1.0)
    assert t.tolist()[0] == [1.0, -1.0, -1.0]
    eager.manual_seed(0)
    u = eager.empty(1000).uniform_(2.0, 3.0)
    assert 2.0 <= u.min().item() and u.max().item() < 3.0
    n = eager.empty(4000).normal_(1.0, 0.5)
    assert abs(n.mean().item() - 1.0) < 0.05 and abs(n.std().item() - 0.5) < 0.05
    assert eager.ones(2).type_as(eager.tensor([1])).dtype == eager.int64
    assert eager.ones(2).new_full((2, 2), 7.0).tolist() == [[7.0, 7.0], [7.0, 7.0]]
    assert eager.ones(2, 3).nelement() == 6 and eager.ones(2, 3).is_cpu


def test_einsum_names_what_it_cannot_do():
    with pytest.raises(NotImplementedError, match="repeated index in 'ii'"):
        eager.einsum("ii->i", eager.ones(2, 2))
    with pytest.raises(RuntimeError, match="number of subscripts in the equation \\(2\\) does "
                                           "not match the number of dimensions \\(3\\)"):
        eager.einsum("ij->i", eager.ones(2, 2, 2))
