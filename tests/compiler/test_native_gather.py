"""Gathers as native code: `t[i]`, index_select, embedding and gather run inside generated
elementwise kernels, which check every index (an index out of range raises the op's own
error, and no lane reads outside the source), over odd sizes, strided and transposed
sources and indices, both index dtypes, and on threads."""
import numpy as np
import pytest

import compiler
import eager
from ir.ops import Op


def _strided(a: np.ndarray):
    """`a` as every other element of a wider buffer along its last dim."""
    buffer = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    buffer[..., ::2] = a
    return eager.tensor(buffer)[..., ::2]


def _transposed(a: np.ndarray):
    return eager.tensor(np.ascontiguousarray(a.T)).t()


CASES = {  # name -> (fn, source shape, index shape, index high, negative indices allowed)
    "rows": (lambda x, i: x[i] * 3, (7, 5), (4,), 7, True),
    "rows-2d-index": (lambda x, i: x[i] + 1, (9, 33), (3, 5), 9, True),
    "columns": (lambda x, i: x[:, i] - x[:, :1], (6, 10), (13,), 10, True),
    "middle": (lambda x, i: x[:, i].exp(), (3, 8, 5), (6,), 8, True),
    "vector": (lambda x, i: x[i] * x[i], (17,), (37,), 17, True),
    "index_select-0": (lambda x, i: x.index_select(0, i) * 2, (11, 19), (5,), 11, False),
    "index_select-1": (lambda x, i: x.index_select(-1, i) + 0.5, (4, 9), (21,), 9, False),
    "embedding": (lambda x, i: eager.embedding(x, i).tanh(), (50, 24), (3, 7), 50, False),
    "gather-1": (lambda x, i: x.gather(1, i) * 2, (6, 9), (6, 4), 9, False),
    "gather-0": (lambda x, i: x.gather(0, i) + 1, (5, 7), (3, 7), 5, False),
}
LAYOUTS = ["contiguous", "strided source", "transposed source", "strided index", "int32"]


def _inputs(name, layout, seed=0, dtype=np.float32):
    fn, source_shape, index_shape, high, negative = CASES[name]
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(source_shape).astype(dtype)
    low = -high if negative else 0
    idx = rng.integers(low, high, index_shape)
    if name.startswith("gather"):  # the index's other dims stay inside the source's
        idx = np.clip(idx, 0, high - 1)
    source = _strided(a) if layout == "strided source" else \
        _transposed(a) if layout == "transposed source" and a.ndim == 2 else eager.tensor(a)
    index = _strided(idx) if layout == "strided index" else \
        eager.tensor(idx.astype(np.int32 if layout == "int32" else np.int64))
    return fn, source, index


def _assert_native(fn, *args):
    lowered = compiler.lower(fn, *args)
    assert lowered.interpreted == {}
    (graph,) = lowered.optimized
    assert [n.op for n in graph.nodes if n.op not in (Op.SCALAR,)] == [Op.FUSED]
    body = str(graph.nodes[-1].attr["body"])
    assert any(name in body for name in ("index.Tensor(", "index_select(", "embedding(",
                                         "gather("))
    assert lowered.kernels, "no kernel was generated"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", CASES)
def test_a_gather_runs_natively_and_agrees_with_eager(name, layout):
    fn, source, index = _inputs(name, layout)
    compiled = compiler.compile(fn, backend="native")
    np.testing.assert_allclose(compiled(source, index).numpy(), fn(source, index).numpy(),
                               rtol=1e-6, atol=1e-6)
    _, source2, index2 = _inputs(name, layout, seed=1)  # new values, the same kernel
    np.testing.assert_allclose(compiled(source2, index2).numpy(), fn(source2, index2).numpy(),
                               rtol=1e-6, atol=1e-6)
    kernels = list(next(iter(compiled.region_cache.values())).kernels.values())
    assert kernels and all(k.fallback_reason == "" for k in kernels)
    _assert_native(fn, source, index)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32, np.bool_])
def test_gathers_of_every_native_dtype(dtype):
    fn = lambda x, i: eager.embedding(x, i)  # noqa: E731
    a = (np.random.default_rng(2).standard_normal((13, 6)) * 4).astype(dtype)
    x, i = eager.tensor(a), eager.tensor([[12, 0, 5], [5, 5, 1]])
    assert np.array_equal(compiler.compile(fn, backend="native")(x, i).numpy(), a[i.numpy()])
    _assert_native(fn, x, i)


@pytest.mark.parametrize("bad", ["huge", "-huge", "size", "below"])
@pytest.mark.parametrize("name", ["rows", "columns", "index_select-1", "embedding",
                                  "gather-1"])
def test_an_index_out_of_range_raises_the_ops_error_and_reads_nothing_outside(name, bad):
    fn, source, index = _inputs(name, "contiguous")
    _, _, _, size, negative = CASES[name]
    compiled = compiler.compile(fn, backend="native")
    compiled(source, index)  # compiled and replaying
    spoilt = index.clone()
    value = {"huge": 2 ** 40, "-huge": -(2 ** 40), "size": size,
             "below": -size - 1 if negative else -1}[bad]
    spoilt.view(-1)[spoilt.numel() // 2] = value
    with pytest.raises(Exception) as expected:
        fn(source, spoilt)
    with pytest.raises(type(expected.value)) as got:
        compiled(source, spoilt)
    assert str(got.value) == str(expected.value)
    assert "out of bounds" in str(got.value) or "out of range" in str(got.value)


def test_a_large_gather_runs_on_threads_and_checks_every_part():
    fn = lambda x, i: x[i] * 2  # noqa: E731
    x = eager.randn(1000, 300)
    i = eager.tensor(np.random.default_rng(3).integers(-1000, 1000, 400))
    compiled = compiler.compile(fn, backend="native")
    np.testing.assert_allclose(compiled(x, i).numpy(), fn(x, i).numpy())
    i.view(-1)[-1] = 1000  # in the last thread's rows
    with pytest.raises(IndexError, match="index 1000 is out of bounds for dimension 0 with "
                                         "size 1000"):
        compiled(x, i)


def test_the_gather_heads_the_elementwise_group_that_reads_it():
    def f(x, i, y):
        return (x[i] * y).relu() + 1
    x, i, y = eager.randn(6, 4), eager.tensor([5, 0, -1]), eager.randn(3, 4)
    _assert_native(f, x, i, y)
    (graph,) = compiler.lower(f, x, i, y).optimized
    assert str(graph).count("fused(") == 1


def test_an_index_computed_in_the_graph_is_read_from_memory():
    def f(x, i):
        j = i * 2 + 1  # an elementwise kernel of the index's shape
        return x[j] * x[j]
    x, i = eager.randn(9), eager.tensor([0, 3, 1, 2])
    np.testing.assert_allclose(compiler.compile(f, backend="native")(x, i).numpy(),
                               f(x, i).numpy())
    lowered = compiler.lower(f, x, i)
    assert lowered.interpreted == {} and str(lowered.optimized[0]).count("fused(") == 2


def test_an_index_computed_beside_a_reader_of_the_same_input_stays_out_of_the_gather():
    def f(x, i, y):
        j = i + 1  # reads i, as the product below does: a horizontal merge candidate
        return x[j] * (i * y)
    x, i, y = eager.randn(9), eager.tensor([0, 3, 1, 2]), eager.randn(4)
    np.testing.assert_allclose(compiler.compile(f, backend="native")(x, i, y).numpy(),
                               f(x, i, y).numpy(), rtol=1e-6)
    assert compiler.lower(f, x, i, y).interpreted == {}
