"""Compiled code follows the values of its inputs: index tensors are graph inputs (checked
where the index op runs), a shape that depends on data breaks the graph, and every read of
an input's values on the host breaks the graph, so no value is baked into a replay.

Each test calls a compiled function several times with new values of the same shapes and
compares with eager, on both backends ("eager": the interpreter, "native": generated code
where the graph allows it)."""
import numpy as np
import pytest

import compiler
import eager
from eager import nn
from eager.testing import assert_close

BACKENDS = ["eager", "native"]


def _entry(cf):
    (entry,) = cf.entries.values()
    return entry


def _breaks(cf) -> list[str]:
    return [b.reason for b in _entry(cf).breaks]


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_indexing_reads_new_indices_at_every_call(backend):
    w = eager.arange(20.0).reshape(5, 4)
    cf = compiler.compile(lambda w, i: w[i] * 3, backend=backend)
    for i in ([0, 1], [3, 4], [-1, 2], [4, 4]):
        index = eager.tensor(i)
        assert_close(cf(w, index), w[index] * 3)
    entry = _entry(cf)
    assert entry.mode == "replay" and entry.calls == 4 and not entry.breaks
    assert "index.Tensor(" in str(entry.graph)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_out_of_range_index_raises_index_error_on_every_call(backend):
    w = eager.arange(20.0).reshape(5, 4)
    cf = compiler.compile(lambda w, i: w[i] * 3, backend=backend)
    cf(w, eager.tensor([0, 1]))
    for bad, shown in (([3, 7], "index 7"), ([-6, 0], "index -6")):
        with pytest.raises(IndexError, match=f"{shown} is out of bounds for dimension 0 with "
                                             "size 5"):
            cf(w, eager.tensor(bad))
    assert _entry(cf).mode == "replay"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_mask_breaks_the_graph_and_gives_each_calls_selection(backend):
    x = eager.arange(6.0)
    cf = compiler.compile(lambda x, m: x[m] * 2, backend=backend)
    for threshold in (2, 4, -1, 9):
        mask = x > threshold
        assert_close(cf(x, mask), x[mask] * 2)
    assert _breaks(cf) == ["aten::nonzero: its output shape depends on its input's values"]
    assert "nonzero: its output shape depends" in cf.explain()


@pytest.mark.parametrize("backend", BACKENDS)
def test_mask_assignment_with_one_value_stays_one_graph(backend):
    def f(x, m):
        y = x * 1
        y[m] = 0.0
        return y
    x = eager.randn(4, 3)
    cf = compiler.compile(f, backend=backend)
    rng = np.random.default_rng(0)
    for _ in range(3):
        m = eager.tensor(rng.random((4, 3)) > 0.5)
        assert_close(cf(x, m), f(x, m))


INDEX_OPS = {  # x: (5, 4) floats; i: 6 indices in [0, 4)
    "index_select": lambda x, i: x.index_select(1, i),
    "embedding": lambda x, i: eager.embedding(x, i),
    "gather": lambda x, i: x.gather(1, i.reshape(1, 6).expand(5, 6)),
    "scatter": lambda x, i: x.scatter(1, i.reshape(1, 6), eager.ones(1, 6)),
    "scatter_add": lambda x, i: x.scatter_add(1, i.reshape(1, 6), eager.ones(1, 6)),
    "index_add": lambda x, i: x.index_add(0, i, eager.ones(6, 4)),
    "index_put": lambda x, i: x.index_put((i,), eager.ones(4), accumulate=True),
    "index_two_dims": lambda x, i: x[i.reshape(2, 3), i[:3]],
    "masked_fill": lambda x, i: x.masked_fill(i[:4] > 1, -1.0),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", INDEX_OPS)
def test_index_ops_take_new_indices_without_recompiling(name, backend):
    fn = INDEX_OPS[name]
    x = eager.randn(5, 4)
    cf = compiler.compile(fn, backend=backend)
    rng = np.random.default_rng(0)
    for _ in range(4):
        i = eager.tensor(rng.integers(0, 4, 6))
        assert_close(cf(x, i), fn(x, i))
    assert _entry(cf).mode == "replay" and _entry(cf).calls == 4


READS = {
    "tolist": lambda x, n: x * n.tolist()[0],
    "item": lambda x, n: x + n.item(),
    "int": lambda x, n: x[: int(n[0].abs().clamp(0, 3))] * 2,
    "float": lambda x, n: x * float(n[0]),
    "bool": lambda x, n: x * 2 if bool(n[0] > 0) else x * 3,
    "numpy": lambda x, n: x * float(n.numpy()[0]),
    "asarray": lambda x, n: x + float(np.asarray(n).sum()),
    "zero-dim index": lambda x, n: x[n[0].long().clamp(0, 2)] * 2,
}


@pytest.mark.parametrize("name", READS)
def test_reading_an_arguments_values_breaks_the_graph(name):
    fn = READS[name]
    cf = compiler.compile(fn, backend="eager")
    x = eager.arange(3.0)
    for v in (2.0, -1.0, 5.0):
        n = eager.tensor([v])
        assert_close(cf(x, n), fn(x, n))
    entry = _entry(cf)
    assert entry.mode == "python" and entry.breaks


def test_the_break_says_which_read_and_where():
    cf = compiler.compile(lambda x, n: x * n.tolist()[0], backend="eager")
    cf(eager.ones(2), eager.tensor([2.0]))
    (brk,) = _entry(cf).breaks
    assert brk.reason == ("Tensor.tolist() needs a concrete value: it reads the values of a "
                          "(1,) float32 tensor")
    line = test_the_break_says_which_read_and_where.__code__.co_firstlineno + 1
    assert brk.where == f"{__file__}:{line}"


def test_a_parameter_read_as_a_number_is_read_again_after_an_update():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(eager.tensor([2.0]))

        def forward(self, x):
            return x * self.s.item()
    model = Scale()
    cf = eager.compile(model, backend="eager")
    x = eager.ones(3)
    assert cf(x).tolist() == [2.0] * 3
    with eager.no_grad():
        model.s.fill_(5.0)
    assert cf(x).tolist() == [5.0] * 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_assignment_into_an_argument_happens_at_every_call_after_earlier_reads(backend):
    def f(x, i):
        y = x * 2
        x[i] = 100.0  # y was computed before the write
        return y
    cf = compiler.compile(f, backend=backend)
    for k in (0, 2, 1):
        x, expected_x = eager.ones(3), eager.ones(3)
        expected = f(expected_x, eager.tensor([k]))
        assert_close(cf(x, eager.tensor([k])), expected)
        assert_close(x, expected_x)


def test_writing_an_arguments_array_waits_for_the_pending_graph():
    def f(x):
        y = x + 1
        x.numpy()[0] = -50.0  # a raw write, outside any op
        return y
    cf = compiler.compile(f, backend="eager")
    for _ in range(2):
        x = eager.zeros(2)
        assert cf(x).tolist() == [1.0, 1.0]
        assert x.tolist() == [-50.0, 0.0]


def test_constants_made_inside_the_function_are_read_without_a_break():
    cf = compiler.compile(lambda x: x * eager.tensor([1.0, 2.0]).tolist()[1], backend="eager")
    assert cf(eager.ones(2)).tolist() == [2.0, 2.0]
    assert cf(eager.full((2,), 3.0)).tolist() == [6.0, 6.0]
    assert _entry(cf).mode == "replay"
