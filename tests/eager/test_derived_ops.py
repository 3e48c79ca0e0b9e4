"""eager/derived.py's ops (tril, triu, flip, roll, unbind, isclose, allclose, equal, all,
any, logical_*, lerp, sort, argsort, topk, kthvalue, multinomial), the legacy Tensor
constructors and formatting of zero-dim tensors: against numpy in float64, gradients by
finite differences, and PyTorch's values where it is installed."""
import math

import numpy as np
import pytest

import eager
from eager.autograd.gradcheck import gradcheck
from runtime.cuda.current import unless_gpu

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5))
TIES = np.array([[3.0, 1.0, 3.0, 2.0, 1.0], [0.0, 5.0, 5.0, -1.0, 5.0]])


def _torch():
    return pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


def _t(a, grad=False):
    return eager.tensor(a, dtype=eager.float64, requires_grad=grad)


@pytest.mark.parametrize("diagonal", [-2, -1, 0, 1, 3, 7])
def test_tril_and_triu_keep_numpys_triangles_and_pass_gradients_through_them(diagonal):
    np.testing.assert_array_equal(eager.tril(_t(X), diagonal).numpy(), np.tril(X, diagonal))
    np.testing.assert_array_equal(_t(X).triu(diagonal).numpy(), np.triu(X, diagonal))
    assert gradcheck(lambda x: eager.tril(x, diagonal), [_t(X[0], True)])
    assert eager.tril(eager.ones(4, 4, dtype=eager.bool)).sum().item() == 10
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dim"):
        eager.tril(eager.ones(3))


@pytest.mark.parametrize("dims", [[0], [2], [-1, 0], [0, 1, 2]])
def test_flip_reverses_each_dim_as_numpy_and_its_gradient_is_the_flipped_gradient(dims):
    np.testing.assert_array_equal(eager.flip(_t(X), dims).numpy(), np.flip(X, dims))
    assert gradcheck(lambda x: x.flip(dims), [_t(X[:2, :3, :2], True)])
    with pytest.raises(RuntimeError, match="dims has duplicates"):
        eager.flip(_t(X), [0, -3])
    assert eager.fliplr(_t(X[0])).tolist() == np.fliplr(X[0]).tolist()
    assert eager.flipud(_t(X[0])).tolist() == np.flipud(X[0]).tolist()


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 2), (7, 1), ((1, -3), (0, 2)), (3, None),
                                          (0, 1)])
def test_roll_moves_elements_around_as_numpy(shifts, dims):
    np.testing.assert_array_equal(eager.roll(_t(X), shifts, dims).numpy(),
                                  np.roll(X, shifts, dims))
    assert gradcheck(lambda x: eager.roll(x, shifts, dims), [_t(X[:, :2, :3], True)])
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        eager.roll(_t(X), (1, 2), 0)


def test_unbind_gives_the_slices_along_a_dim():
    parts = eager.unbind(_t(X), 1)
    assert len(parts) == 4 and all(p.shape == (3, 5) for p in parts)
    np.testing.assert_array_equal(parts[2].numpy(), X[:, 2])
    with pytest.raises(IndexError, match="tensor has no dimensions"):
        eager.tensor(1.0).unbind()


def test_closeness_as_numpy_defines_it_with_infinities_and_nans():
    a = np.array([1.0, 1.0 + 1e-6, 1.0 + 1e-3, math.inf, -math.inf, math.nan, math.inf, 0.0])
    b = np.array([1.0, 1.0, 1.0, math.inf, math.inf, math.nan, 1.0, 1e-9])
    for equal_nan in (False, True):
        got = eager.isclose(_t(a), _t(b), equal_nan=equal_nan).tolist()
        assert got == np.isclose(a, b, 1e-5, 1e-8, equal_nan).tolist()
    assert eager.allclose(_t(X), _t(X + 1e-9)) and not eager.allclose(_t(X), _t(X + 1e-3))
    assert eager.equal(eager.tensor([1, 2]), eager.tensor([1.0, 2.0]))
    assert not eager.equal(eager.ones(2), eager.ones(3)) and not eager.equal(eager.ones(2),
                                                                          eager.zeros(2))
    with pytest.raises(RuntimeError, match="isclose\\(\\): both tensors must have the same dtype"):
        eager.isclose(eager.ones(2), eager.ones(2, dtype=eager.float64))


def test_all_any_and_the_logical_ops_follow_numpy():
    a = RNG.integers(0, 2, (3, 4)).astype(bool)
    b = RNG.integers(0, 2, (3, 4)).astype(bool)
    ta, tb = eager.tensor(a), eager.tensor(b)
    assert eager.all(ta).item() == a.all() and eager.any(ta, 1).tolist() == a.any(1).tolist()
    assert ta.all(0, keepdim=True).tolist() == a.all(0, keepdims=True).tolist()
    assert (ta | tb).tolist() == (a | b).tolist() and (ta ^ tb).tolist() == (a ^ b).tolist()
    assert eager.logical_not(ta).tolist() == (~a).tolist()
    assert eager.logical_or(eager.tensor([0.0, 2.0]), eager.tensor([0.0, 0.0])).tolist() == \
        [False, True]
    with pytest.raises(NotImplementedError, match="\"bitwise_or_cpu\" not implemented for "
                                                  "'Float'"):
        eager.ones(2) | eager.ones(2)


def test_lerp_is_start_plus_weight_times_the_difference():
    a, b = _t(X[0], True), _t(X[1], True)
    np.testing.assert_allclose(eager.lerp(a, b, 0.25).detach().numpy(), X[0] + 0.25 * (X[1] - X[0]))
    np.testing.assert_array_equal(eager.lerp(a, b, 1.0).detach().numpy(), X[1])  # exact ends
    assert gradcheck(lambda s, e: s.lerp(e, _t(X[2])), [a, b])
    w = _t(np.linspace(-0.3, 1.3, 20).reshape(4, 5), True)  # both of PyTorch's branches
    assert gradcheck(lambda s, e, w: eager.lerp(s, e, w), [a, b, w])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_lerp_gives_pytorchs_values(dtype):
    """PyTorch's two branches (from |weight| 0.5: end - (1 - weight) diff), 16-bit floats
    computed in float32 and rounded once (three roundings made a third of bfloat16's
    results differ): within a unit of PyTorch's, which contracts to an FMA, and 16-bit
    results all but one in 200 bit for bit. (An ulp of the terms, not of a result near 0:
    where start and end nearly cancel, an FMA's answer is many of the result's units
    away.)"""
    torch = _torch()
    eps = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}[dtype]
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((2, 4096)).astype(np.float32)
    w = (rng.random(4096) * 1.6 - 0.3).astype(np.float32)
    for weight in (0.3, 0.7, 1.0, w):
        def run(lib):
            make = lambda v: lib.tensor(v).to(getattr(lib, dtype))  # noqa: E731
            return lib.lerp(make(a), make(b), make(weight) if weight is w else weight)
        want, got = run(torch).double().numpy(), run(eager).double().numpy()
        assert run(eager).dtype is getattr(eager, dtype)
        terms = np.abs(a) + np.abs(b) + np.abs(weight * (b - a))
        assert (np.abs(got - want) <= eps * terms).all()
        if dtype != "float32":
            assert int((got != want).sum()) <= 4096 // 200


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_is_stable_equals_numpy_and_its_values_carry_gradients(descending, dim):
    x = TIES if dim != 0 else TIES.T.copy()
    values, indices = eager.sort(_t(x), dim=dim, descending=descending)
    if descending:  # stable: equal values keep their order
        expected = np.flip(x.shape[dim] - 1 - np.argsort(np.flip(x, dim), dim, kind="stable"), dim)
    else:
        expected = np.argsort(x, dim, kind="stable")
    assert indices.tolist() == expected.tolist() and indices.dtype == eager.int64
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, expected, dim))
    assert eager.argsort(_t(x), dim, descending).tolist() == expected.tolist()
    assert gradcheck(lambda t: t.sort(dim, descending).values, [_t(X[0], True)])


def test_sort_and_topk_agree_with_torch_on_ties():
    torch = _torch()
    for descending in (False, True):
        ours = eager.sort(_t(TIES), descending=descending, stable=True)
        theirs = torch.sort(torch.tensor(TIES), descending=descending, stable=True)
        assert ours.indices.tolist() == theirs.indices.tolist()
    ours, theirs = eager.topk(_t(X), 3, 1), torch.topk(torch.tensor(X), 3, 1)
    np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
    assert ours.indices.tolist() == theirs.indices.tolist()


@pytest.mark.parametrize("largest", [True, False])
def test_topk_gives_the_k_largest_or_smallest_in_order(largest):
    values, indices = _t(X).topk(2, dim=2, largest=largest)
    order = np.argsort(-X if largest else X, axis=2, kind="stable")[..., :2]
    assert indices.tolist() == order.tolist()
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(X, order, 2))
    assert gradcheck(lambda t: eager.topk(t, 2, largest=largest)[0], [_t(X[0], True)])
    assert eager.topk(_t(X), 0).values.shape == (3, 4, 0)
    with pytest.raises(RuntimeError, match="topk: selected index k out of range"):
        eager.topk(_t(X), 6)


def test_kthvalue_and_max_over_a_dim_are_named_tuples():
    result = eager.kthvalue(_t(X), 2, 1)
    np.testing.assert_array_equal(result.values.numpy(), np.sort(X, 1)[:, 1])
    assert result.indices.tolist() == np.argsort(X, 1, kind="stable")[:, 1].tolist()
    assert eager.kthvalue(_t(X), 1, 0, keepdim=True).values.shape == (1, 4, 5)
    with pytest.raises(IndexError, match="selected number k out of range"):
        eager.kthvalue(_t(X), 5, 1)
    top = _t(X).max(2)
    assert top.indices.tolist() == X.argmax(2).tolist() and top.values.shape == (3, 4)
    assert _t(X).min(0).indices.tolist() == X.argmin(0).tolist()


def test_multinomial_draws_by_weight_from_a_generator():
    weights = eager.tensor([[0.0, 1.0, 3.0, 0.0], [2.0, 0.0, 0.0, 2.0]])
    drawn = eager.multinomial(weights, 4000, True, generator=eager.Generator().manual_seed(0))
    assert drawn.shape == (2, 4000) and drawn.dtype == eager.int64
    counts = [np.bincount(row, minlength=4) for row in drawn.numpy()]
    assert counts[0][0] == counts[0][3] == counts[1][1] == counts[1][2] == 0
    assert 2.7 < counts[0][2] / counts[0][1] < 3.3
    once = eager.multinomial(eager.tensor([1.0, 1.0, 1.0]), 3)
    assert sorted(once.tolist()) == [0, 1, 2]  # without replacement: each index once
    again = [eager.multinomial(weights, 5, True, generator=eager.Generator().manual_seed(7))
             .tolist() for _ in range(2)]
    assert again[0] == again[1]
    for bad, words in ((eager.tensor([1.0, -1.0]), "element < 0"),
                       (eager.tensor([0.0, 0.0]), "sum of probabilities <= 0"),
                       (eager.ones(2, 2, 2), "prob_dist must be 1 or 2 dim")):
        with pytest.raises(RuntimeError, match=words):
            eager.multinomial(bad, 1)
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist"):
        eager.multinomial(eager.ones(3), 4)


def test_derived_ops_run_on_cuda_tensors_as_on_the_cpu():
    with unless_gpu(memory=64 << 20):
        x = eager.tensor(X[0], dtype=eager.float32, device="cuda")
        assert eager.tril(x).device.type == "cuda"
        np.testing.assert_allclose(eager.tril(x).cpu().numpy(), np.tril(X[0]), rtol=1e-6)
        top = x.topk(2)
        assert top.indices.device.type == "cuda"
        assert top.indices.cpu().tolist() == np.argsort(-X[0], 1, kind="stable")[:, :2].tolist()
        np.testing.assert_allclose(eager.roll(x, 1, 1).cpu().numpy(), np.roll(X[0], 1, 1),
                                   rtol=1e-6)


# the legacy constructors and formatting -------------------------------------------------
def test_the_legacy_tensor_constructor_takes_what_pytorchs_takes():
    assert eager.Tensor([1, 2]).tolist() == [1.0, 2.0]
    assert eager.Tensor([1, 2]).dtype == eager.get_default_dtype()
    assert eager.Tensor(2, 3).shape == (2, 3) and eager.Tensor().shape == (0,)
    assert eager.Tensor(eager.Size([4])).shape == (4,)
    shared = eager.ones(2)
    alias = eager.Tensor(shared)
    alias[0] = 5.0
    assert shared.tolist() == [5.0, 1.0]  # the same data, as in PyTorch
    assert eager.LongTensor([1, 2]).dtype == eager.int64 and eager.DoubleTensor(3).shape == (3,)
    assert isinstance(eager.tensor([1]), eager.LongTensor)
    assert not isinstance(eager.tensor([1.0]), eager.LongTensor)
    with pytest.raises(TypeError, match=r"Tensor\(\): expected eager.float32 \(got eager.int64\)"):
        eager.Tensor(eager.tensor([1]))
    with pytest.raises(TypeError, match="takes sizes"):
        eager.Tensor(2.5)
    assert isinstance(eager.nn.Parameter(eager.ones(2)), eager.Tensor)


def test_a_zero_dim_tensor_formats_as_its_number():
    assert f"{eager.tensor(1.25):+.2f}" == "+1.25" and "{:>4d}".format(eager.tensor(7)) == "   7"
    assert f"{eager.ones(2)}" == str(eager.ones(2))
    with pytest.raises(TypeError, match="unsupported format string passed to Tensor.__format__"):
        "{:.2f}".format(eager.ones(2))


def test_a_compiled_function_reading_values_for_topk_gives_each_calls_answer():
    def fn(x):
        values, indices = x.topk(2)
        return (values * 2).sum() + (eager.tril(eager.ones(3, 3)) @ x[:, :3]).sum(), indices
    compiled = eager.compile(fn)
    for seed in range(3):  # new values each call: the order must be found again
        x = eager.tensor(np.random.default_rng(seed).standard_normal((3, 5)), dtype=eager.float32)
        (want, want_indices), (got, got_indices) = fn(x), compiled(x)
        assert got.item() == pytest.approx(want.item(), rel=1e-5)
        assert got_indices.tolist() == want_indices.tolist()
    assert "topk() needs a concrete value" in compiled.explain()
