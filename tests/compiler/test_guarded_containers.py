"""Containers a compiled function reads or returns (compiler/guards.py): a global or
closed-over list, dict, tuple, dataclass or namespace is guarded item by item, so a
value changed in place is seen (before, a list was guarded by identity and a compiled
function kept returning what the old item gave); the tensors inside are found again at
each call, so a step closing over `batch = (x, y)` replays its graph without running
Python; results come back as the containers the function built (a namedtuple was a list
on replay, a dict subclass a plain dict)."""
import collections
import dataclasses
import types

import numpy as np
import pytest

import compiler
import eager
from compiler import guards
from eager.nn import functional as F
from eager.testing import assert_close

SCALES = [2.0]
SETTINGS = {"scale": 1.0}


class _Count:
    """A counter the guards key by identity (a list would be keyed by its items)."""
    calls = 0


def _runs_python(fn):
    """fn, counting the calls that run its Python body (capture runs it; a replay not)."""
    count = _Count()

    def counted(*args):
        count.calls += 1
        return fn(*args)
    return counted, count


def test_a_global_list_item_changed_in_place_is_seen():
    cf = compiler.compile(lambda x: x * SCALES[0], backend="eager")
    x = eager.ones(3)
    try:
        assert cf(x).tolist() == [2.0] * 3
        SCALES[0] = 3.0
        assert cf(x).tolist() == [3.0] * 3
        SCALES.append(5.0)  # another item: another key, the same answer
        assert cf(x).tolist() == [3.0] * 3
    finally:
        SCALES[:] = [2.0]
    assert cf(x).tolist() == [2.0] * 3


def test_a_global_dict_value_changed_in_place_is_seen_natively():
    cf = eager.compile(lambda x: x * SETTINGS["scale"] + 1)
    x = eager.ones(4)
    try:
        assert cf(x).tolist() == [2.0] * 4
        SETTINGS["scale"] = 4.0
        assert cf(x).tolist() == [5.0] * 4
    finally:
        SETTINGS["scale"] = 1.0


@dataclasses.dataclass
class Config:
    scale: float
    shift: float = 0.0


@pytest.mark.parametrize("make", [Config, lambda scale: types.SimpleNamespace(scale=scale,
                                                                               shift=0.0)],
                         ids=["dataclass", "namespace"])
def test_a_closed_over_config_changed_in_place_is_seen(make):
    config = make(2.0)
    cf = compiler.compile(lambda x: x * config.scale + config.shift, backend="eager")
    x = eager.ones(2)
    assert cf(x).tolist() == [2.0, 2.0]
    config.shift = 1.0
    assert cf(x).tolist() == [3.0, 3.0]
    assert "closure variable 'config'.shift == 0.0  ->  closure variable 'config'.shift == " \
        "1.0" in cf.history[-1]


def test_a_closed_over_batch_tuple_rebound_replays_without_python():
    batch = (eager.ones(3), eager.full((3,), 2.0))

    def body():
        x, y = batch
        return x * y + 1
    fn, ran = _runs_python(body)
    cf = compiler.compile(fn, backend="eager")
    assert cf().tolist() == [3.0] * 3
    for value in (5.0, 7.0):
        batch = (eager.full((3,), value), eager.ones(3))
        assert cf().tolist() == [value + 1] * 3
    (entry,) = cf.entries.values()
    assert entry.mode == "replay", entry.why_python
    assert ran.calls == 1
    text = cf.explain()
    assert "body's closure variable 'batch'[0]: Tensor shape (3,), float32" in text


def test_tensors_in_a_dataclass_or_dict_argument_are_found_again():
    @dataclasses.dataclass
    class Batch:
        x: eager.Tensor
        y: eager.Tensor
    fn, ran = _runs_python(lambda b, d: b.x * b.y + d["bias"])
    cf = eager.compile(fn)
    for value in (1.0, 2.0, 3.0):
        got = cf(Batch(eager.full((2, 3), value), eager.ones(2, 3)), {"bias": eager.ones(3)})
        assert got.tolist() == [[value + 1] * 3] * 2
    assert ran.calls == 1


def test_a_training_step_closing_over_its_batch_replays_and_equals_eager():
    def train(compiled):
        eager.manual_seed(0)
        model = eager.nn.Sequential(eager.nn.Linear(4, 8), eager.nn.ReLU(), eager.nn.Linear(8, 3))
        opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng = np.random.default_rng(0)
        batch = None

        def step():
            x, y = batch
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        run = compiler.compile(step, backend="eager") if compiled else step
        losses = []
        for _ in range(4):
            batch = (eager.tensor(rng.standard_normal((6, 4)), dtype=eager.float32),
                     eager.tensor(rng.integers(0, 3, 6)))
            losses.append(run().item())
        return model, losses, run
    model, losses, run = train(True)
    model_e, losses_e, _ = train(False)
    np.testing.assert_allclose(losses, losses_e, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), model_e.parameters()):
        assert_close(p, q, rtol=1e-5, atol=1e-6)
    (entry,) = run.entries.values()
    assert entry.mode == "replay", entry.why_python


def test_a_container_larger_than_the_limit_is_guarded_by_identity(monkeypatch):
    monkeypatch.setattr(guards, "ITEMS_LIMIT", 3)
    table = [1.0, 2.0, 3.0, 4.0]
    cf = compiler.compile(lambda x: x * table[3], backend="eager")
    x = eager.ones(2)
    assert cf(x).tolist() == [4.0, 4.0]
    table = [1.0, 2.0, 3.0, 9.0]  # another object: another key
    assert cf(x).tolist() == [9.0, 9.0]
    assert "closure variable 'table': the same list object" in cf.explain()


Pair = collections.namedtuple("Pair", "doubled plus_one")


class Output(collections.OrderedDict):
    """A dict subclass whose items are also attributes, as a model output."""

    def __init__(self, **items):
        super().__init__(**items)
        self.__dict__.update(items)


@pytest.mark.parametrize("backend", ["eager", "native"])
def test_results_keep_their_container_types_on_replay(backend):
    def f(x):
        return Pair(x * 2, x + 1), Output(logits=x * 3), [x - 1]
    cf = compiler.compile(f, backend=backend)
    x = eager.ones(2)
    for _ in range(3):
        pair, output, listed = cf(x)
        assert type(pair) is Pair and pair.doubled.tolist() == [2.0, 2.0]
        assert type(output) is Output and output.logits.tolist() == [3.0, 3.0]
        assert output["logits"] is output.logits
        assert type(listed) is list and listed[0].tolist() == [0.0, 0.0]
    (entry,) = cf.entries.values()
    assert entry.mode == "replay" and entry.calls == 3


def _wrapped(fn):
    def wrapper(x):
        return fn(x)
    return wrapper


def test_closure_variables_of_a_function_a_wrapper_calls_are_guarded():
    """A decorator's wrapper reaches the function through its cell: that function's
    own closure variables are guarded too (they were not: a rebound or changed one
    kept the value the capture saw)."""
    scale, offsets = 2.0, [0.0]

    def body(x):
        return x * scale + offsets[0]
    cf = compiler.compile(_wrapped(body), backend="eager")
    x = eager.ones(2)
    assert cf(x).tolist() == [2.0, 2.0]
    scale = 5.0
    assert cf(x).tolist() == [5.0, 5.0]
    offsets[0] = 1.0
    assert cf(x).tolist() == [6.0, 6.0]
    assert "body's closure variable 'offsets'[0] == 0.0" in cf.history[-1]
