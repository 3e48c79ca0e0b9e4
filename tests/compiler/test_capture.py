"""compile(): capture, replay, guards and their footguns, graph breaks, explain."""
import threading
import warnings

import numpy as np
import pytest

import compiler
import eager
from eager import nn
from eager.testing import assert_close


def _eager_and_compiled(fn, *args, **options):
    expected = fn(*args)
    compiled = compiler.compile(fn, backend="eager", **options)
    return expected, compiled(*args), compiled


def test_elementwise_chain_is_one_graph_and_replays():
    def f(x, y):
        return ((x * y + 1).exp() - x).relu() * 0.5 + y.tanh()
    x, y = eager.randn(4, 5), eager.randn(5)
    expected, got, cf = _eager_and_compiled(f, x, y)
    assert_close(got, expected)
    assert_close(cf(x, y), expected)
    entry = next(iter(cf.entries.values()))
    assert entry.mode == "replay" and entry.calls == 2 and len(entry.regions) == 1
    ops = [n.op.name for n in entry.regions[0].nodes if n.op.name != "SCALAR"]
    assert ops == ["MUL", "ADD", "EXP", "SUB", "RELU", "MUL", "TANH", "ADD"]
    text = str(entry.regions[0])
    assert "f32[] = scalar(value=0.5)" in text and "i64[] = scalar(value=1)" in text


def test_matmul_decomposes_to_primitive_ops():
    def f(a, b, c):
        return (a @ b) @ c
    a, b, c = eager.randn(2, 3, 4), eager.randn(4, 5), eager.randn(5, 6)
    expected, got, cf = _eager_and_compiled(f, a, b, c)
    assert_close(got, expected)
    text = str(next(iter(cf.entries.values())).regions[0])
    assert "= mm(" in text and "matmul" not in text


def test_replay_reads_new_argument_values():
    cf = compiler.compile(lambda x: x * 2 + 1, backend="eager")
    cf(eager.ones(3))
    assert cf(eager.full((3,), 5.0)).tolist() == [11.0, 11.0, 11.0]


def test_module_forward_and_parameter_updates_are_seen():
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    compiled = eager.compile(model, backend="eager")
    x = eager.randn(5, 4)
    assert_close(compiled(x), model(x))
    with eager.no_grad():
        for p in model.parameters():
            p.mul_(2.0)  # an optimiser's in-place update
    assert_close(compiled(x), model(x))
    assert compiled._compiled.entries and len(compiled._compiled.entries) == 1


def test_softmax_capture():
    f = compiler.compile(lambda x: eager.softmax(x, -1) * 3, backend="eager")
    x = eager.randn(3, 7)
    assert_close(f(x), eager.softmax(x, -1) * 3)


def test_data_dependent_if_breaks_and_gives_both_branches():
    def f(x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1
    cf = compiler.compile(f, backend="eager")
    pos, neg = eager.ones(3), -eager.ones(3)
    assert cf(pos).tolist() == [3.0] * 3
    assert cf(neg).tolist() == [-3.0] * 3  # same guards: Python re-runs, takes the other branch
    assert cf(pos).tolist() == [3.0] * 3
    entry = next(iter(cf.entries.values()))
    assert entry.mode == "python" and "graph break" in entry.why_python
    assert "Tensor.__bool__() needs a concrete value" in entry.breaks[0].reason
    assert "test_capture.py" in entry.breaks[0].where
    assert len(cf.region_cache) == 3  # y*2 region, then one region per branch


def test_item_in_the_middle():
    def f(x):
        scale = (x.abs().max()).item()
        return x / scale
    cf = compiler.compile(f, backend="eager")
    x = eager.tensor([1.0, -4.0, 2.0])
    assert cf(x).tolist() == [0.25, -1.0, 0.5]
    assert cf(eager.tensor([2.0, 1.0, 1.0])).tolist() == [1.0, 0.5, 0.5]
    assert "Tensor.item() needs a concrete value" in cf.explain()


def test_new_shape_recompiles_and_history_says_why():
    cf = compiler.compile(lambda x: x.reshape(x.shape[0] * 3) + 1, backend="eager")
    cf(eager.zeros(2, 3))
    cf(eager.zeros(4, 3))
    assert len(cf.entries) == 2
    assert cf.history and "(2, 3)" in cf.history[0] and "(4, 3)" in cf.history[0]


def test_recompile_limit_warns_once_then_runs_eagerly():
    cf = compiler.compile(lambda x: x * 3, backend="eager")
    for rank in range(1, compiler.RECOMPILE_LIMIT + 1):  # a new rank is a new graph
        cf(eager.ones(*[1] * rank))
    with pytest.warns(UserWarning, match="recompiled 8 times"):
        out = cf(eager.ones(20))
    assert out.tolist() == [3.0] * 20 and cf.gave_up
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cf(eager.ones(2, 2))  # no second warning


FLAG = True


def test_global_flag_flip_recompiles():
    global FLAG

    def f(x):
        return x + 1 if FLAG else x - 1
    cf = compiler.compile(f, backend="eager")
    x = eager.zeros(2)
    FLAG = True
    assert cf(x).tolist() == [1.0, 1.0]
    FLAG = False
    try:
        assert cf(x).tolist() == [-1.0, -1.0]
    finally:
        FLAG = True
    assert any("global 'FLAG'" in h for h in cf.history)


def _flagged(x):
    return x + 1 if FLAG else x - 1


def test_a_global_read_by_a_function_in_a_closure_cell_is_guarded():
    global FLAG
    helper = _flagged
    cf = compiler.compile(lambda x: helper(x) * 2, backend="eager")
    x = eager.zeros(2)
    assert cf(x).tolist() == [2.0, 2.0]
    FLAG = False
    try:
        assert cf(x).tolist() == [-2.0, -2.0]
    finally:
        FLAG = True
    assert any("global 'FLAG'" in h for h in cf.history)


def test_closure_counter_is_guarded():
    count = 0

    def f(x):
        return x * count
    cf = compiler.compile(f, backend="eager")
    x = eager.ones(2)
    for count in range(3):  # noqa: B007 - the closure reads it
        assert cf(x).tolist() == [float(count)] * 2


WEIGHT = eager.ones(1)
DROP = nn.Dropout(0.5)


def test_a_global_tensor_or_module_changed_in_place_is_guarded_at_every_call():
    """A global's key is made once per value (compiler/guards.py _Reads), except a
    tensor's and a module's, whose keys hold state that changes in place."""
    cf = compiler.compile(lambda x: DROP(x * WEIGHT), backend="eager")
    x = eager.ones(1000)
    DROP.eval()
    assert not cf(x).requires_grad and cf(x).tolist() == [1.0] * 1000
    WEIGHT.requires_grad_(True)
    try:
        assert cf(x).requires_grad
        DROP.train()
        trained = cf(x).tolist()
        assert set(trained) == {0.0, 2.0}
    finally:
        WEIGHT.requires_grad_(False)
        DROP.eval()
    assert cf(x).tolist() == [1.0] * 1000 and not cf(x).requires_grad


def test_a_global_function_rebound_recompiles():
    global _flagged
    cf = compiler.compile(lambda x: _flagged(x) * 2, backend="eager")
    x = eager.zeros(2)
    before = _flagged
    assert cf(x).tolist() == [2.0, 2.0]
    _flagged = lambda x: x + 5  # noqa: E731
    try:
        assert cf(x).tolist() == [10.0, 10.0]
    finally:
        _flagged = before
    assert cf(x).tolist() == [2.0, 2.0] and len(cf.entries) == 2


OFFSET = 1.0


def test_globals_read_at_every_call_are_guarded_after_their_keys_are_kept():
    """Two globals of one namespace read in one C call once both were stable: a value
    rebound, a global set to None or deleted, each is seen at the next call."""
    global OFFSET, _flagged
    cf = compiler.compile(lambda x: _flagged(x) + OFFSET, backend="eager")
    x = eager.zeros(2)
    before = _flagged
    try:
        for _ in range(3):  # keyed, then read back through the kept keys
            assert cf(x).tolist() == [2.0, 2.0]
        OFFSET = 10.0
        assert cf(x).tolist() == [11.0, 11.0]
        _flagged = lambda x: x - 5  # noqa: E731
        assert cf(x).tolist() == [5.0, 5.0]
        _flagged = before
        OFFSET = None
        with pytest.raises(TypeError):
            cf(x)
        del OFFSET
        with pytest.raises(NameError):
            cf(x)
    finally:
        OFFSET, _flagged = 1.0, before
    assert cf(x).tolist() == [2.0, 2.0]


def test_python_if_on_a_scalar_argument():
    cf = compiler.compile(lambda x, n: x * 2 if n > 3 else x, backend="eager")
    x = eager.ones(2)
    assert cf(x, 5).tolist() == [2.0, 2.0]
    assert cf(x, 1).tolist() == [1.0, 1.0]


def test_list_argument_whose_length_changes():
    cf = compiler.compile(lambda xs: sum(xs[1:], xs[0]), backend="eager")
    assert cf([eager.ones(2)] * 2).tolist() == [2.0, 2.0]
    assert cf([eager.ones(2)] * 3).tolist() == [3.0, 3.0]


def test_module_attribute_rebound_to_a_new_tensor():
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("factor", eager.tensor([2.0]))

        def forward(self, x):
            return x * self.factor
    m = Scale()
    cm = compiler.compile(m, backend="eager")
    assert cm(eager.ones(2)).tolist() == [2.0, 2.0]
    m.factor = eager.tensor([5.0])
    assert cm(eager.ones(2)).tolist() == [5.0, 5.0]


def test_module_training_flag_is_guarded():
    m = nn.Sequential(nn.Dropout(0.5))
    cm = compiler.compile(m, backend="eager")
    x = eager.ones(1000)
    trained = cm(x)
    m.eval()
    assert cm(x).tolist() == x.tolist()
    assert float((trained == 0).float().mean()) > 0.3


def test_random_numbers_are_fresh_each_call():
    cf = compiler.compile(lambda x: x + eager.rand(3), backend="eager")
    x = eager.zeros(3)
    a, b = cf(x), cf(x)
    assert a.tolist() != b.tolist()
    assert "random" in next(iter(cf.entries.values())).why_python


def test_fullgraph_turns_a_break_into_an_error():
    cf = compiler.compile(lambda x: x * x.sum().item(), backend="eager", fullgraph=True)
    with pytest.raises(RuntimeError, match=r"fullgraph=True.*Tensor.item\(\)"):
        cf(eager.ones(2))


def test_custom_op_without_lowering_breaks_and_runs_eagerly():
    from eager import dispatcher
    handle = dispatcher.define("kilntest::twice(Tensor x) -> Tensor")
    try:
        dispatcher.impl(handle, "CPU")(lambda x: eager.tensor(x.numpy() * 2))
        cf = compiler.compile(lambda x: handle(x + 1) * 3, backend="eager")
        assert cf(eager.ones(2)).tolist() == [12.0, 12.0]
        assert "custom op kilntest::twice has no lowering" in cf.explain()
    finally:
        dispatcher.undefine("kilntest::twice")


def test_gradients_flow_through_compiled_code():
    w = eager.randn(3, 2, dtype=eager.float64, requires_grad=True)
    x = eager.randn(4, 3, dtype=eager.float64)
    cf = compiler.compile(lambda x: (x @ w).tanh().sum(), backend="eager")
    for _ in range(2):
        w.grad = None
        cf(x).backward()
        got = w.grad
        w.grad = None
        (x @ w).tanh().sum().backward()
        assert_close(got, w.grad)


def test_check_mode_compares_with_eager():
    cf = compiler.compile(lambda x: (x * 3).exp(), backend="eager", check=True)
    cf(eager.randn(5))
    cf(eager.randn(5))


def test_check_mode_names_the_diverging_graph(monkeypatch):
    cf = compiler.compile(lambda x: x + 1, backend="eager", check=True)

    def wrong(graph):
        return lambda inputs: [inputs[0] * 0]
    monkeypatch.setattr(cf.backend, "compile", wrong)
    with pytest.raises(compiler.CompileCheckError, match="differs from eager execution"):
        cf(eager.ones(3))


def test_check_mode_leaves_no_state_behind_its_eager_run():
    """A module that updates state in place (BatchNorm's running statistics and its batch
    counter) is run again eagerly by check=True: those writes are undone, so the state
    after three checked calls is eager's after three calls."""
    x = eager.tensor(np.random.default_rng(0).standard_normal((6, 3)))
    checked, plain = eager.nn.BatchNorm1d(3).double(), eager.nn.BatchNorm1d(3).double()
    run = compiler.compile(checked, check=True)
    for _ in range(3):
        run(x)
        plain(x)
    assert checked.num_batches_tracked.item() == 3
    assert_close(checked.running_mean, plain.running_mean)
    assert_close(checked.running_var, plain.running_var)


def test_check_mode_runs_a_float32_module_and_leaves_the_random_stream_alone():
    """Its parameters stay float32, so the eager run takes the arguments as they are (a
    float64 copy of the input cannot meet float32 weights); and the draws of that run do
    not move the default generator."""
    eager.manual_seed(0)
    run = compiler.compile(eager.nn.Sequential(eager.nn.Linear(4, 3), eager.nn.ReLU()),
                           check=True)
    x = eager.randn(2, 4)
    eager.manual_seed(1)
    run(x)
    after_checked = eager.rand(3).tolist()
    eager.manual_seed(1)
    assert eager.rand(3).tolist() == after_checked


def test_check_mode_draws_the_compiled_calls_random_numbers():
    """The eager run starts from the generator state the compiled call started from, so
    dropout's masks agree (a difference would be reported), and the generator ends where
    an unchecked call leaves it."""
    model = eager.nn.Sequential(eager.nn.Linear(4, 8), eager.nn.Dropout(0.5))
    checked, plain = compiler.compile(model, check=True), compiler.compile(model)
    x = eager.randn(5, 4)
    for seed in range(3):
        eager.manual_seed(seed)
        got = checked(x).tolist()
        after = eager.rand(2).tolist()
        eager.manual_seed(seed)
        assert plain(x).tolist() == got and eager.rand(2).tolist() == after


def test_compiled_region_is_a_profiler_event():
    cf = compiler.compile(lambda x: x.exp() + 1, backend="eager")
    x = eager.ones(2, 2)
    cf(x)
    with eager.profiler.profile(record_shapes=True) as prof:
        cf(x)
    region = [e for e in prof.events() if e.name == "kiln::region"]
    assert region and region[0].input_shapes[0] == [2, 2]
    assert any(e.name == "aten::exp" and e.cpu_parent is region[0] for e in prof.events())


def test_debug_level_1_prints_graphs_and_breaks(capsys):
    def f(x):
        return x * 2 if x.sum().item() > 0 else x
    with compiler.debug(1):
        compiler.compile(f, backend="eager")(eager.ones(2))
    err = capsys.readouterr().err
    assert "captured graph" in err and "graph break" in err and "= mul(" in err


def test_explain_lists_guards_graphs_and_times():
    cf = compiler.compile(lambda x, n: x * n, backend="eager")
    cf(eager.ones(2), 3)
    text = cf.explain()
    for piece in ("entry 1", "Tensor shape (2,), float32", "== 3", "grad mode enabled",
                  "= mul(", "time: trace", "backend: eager"):
        assert piece in text, piece


def test_threads_share_one_entry_and_agree():
    cf = compiler.compile(lambda x: (x * 2).sum(0), backend="eager")
    x = eager.tensor(np.arange(12.0).reshape(3, 4).astype(np.float32))
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(cf(x).tolist())
        except Exception as e:  # surfaced below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cf.entries) == 1
    assert all(r == [24.0, 30.0, 36.0, 42.0] for r in results)


def test_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="unknown compile backend"):
        compiler.compile(lambda x: x, backend="tpu")


def test_eager_compile_is_compiler_compile():
    cf = eager.compile(lambda x: x + 1)
    assert isinstance(cf, compiler.CompiledFunction) and cf.backend.name == "native"
    assert cf(eager.zeros(1)).tolist() == [1.0]


@pytest.mark.parametrize("backend", ["eager", "native"])
def test_a_negative_zero_in_python_is_not_captured_as_zero(backend):
    cf = compiler.compile(lambda x: eager.where(x <= 0.0, -0.0, x), backend=backend)
    out = cf(eager.tensor([-1.0, 0.0, 2.0]))
    assert out.tolist() == [0.0, 0.0, 2.0] and np.signbit(out.numpy()).tolist() == [
        True, True, False]


def _symbolic_graphs(cf) -> list:
    return [g for family in cf.families.values() for g, _ in family.symbolic]


def test_a_size_change_that_leaves_the_graph_alone_makes_the_size_symbolic():
    w = eager.randn(3, 4)
    cf = compiler.compile(lambda x: (x @ w).relu().sum(1), backend="eager")
    for rows in (2, 5, 7, 1, 9):
        x = eager.randn(rows, 3)
        assert_close(cf(x), (x @ w).relu().sum(1))
    (general,) = _symbolic_graphs(cf)
    assert "%x0: f32[s0,3]" in str(general)
    # 2 and 5 compiled (the second symbolically); 1 is never a symbol's value
    assert cf.compiles == 3 and len(cf.entries) == 5
    assert any("became symbolic (s0)" in h for h in cf.history)
    assert "symbolic sizes (s0=9)" in cf.explain()


def test_every_new_shape_is_captured_again_so_python_reads_of_sizes_stay_right():
    """A slice whose length Python computes from a size: at 2 and 3 columns it is 1 (the
    graphs are one symbolic graph's instances); at 4 it is 2, which the new capture
    sees."""
    cf = compiler.compile(lambda a: a[..., :max(1, a.shape[-1] // 2)] + 1, backend="eager")
    for cols in (2, 3, 4, 6):
        x = eager.randn(5, cols)
        assert_close(cf(x), x[..., :max(1, cols // 2)] + 1)
    assert len(cf.entries) == 4


def test_a_size_baked_into_the_graph_stays_static():
    cf = compiler.compile(lambda x: x.view(x.shape[0] * 3, 2), backend="eager")
    assert cf(eager.ones(2, 6)).shape == (6, 2)
    assert cf(eager.ones(4, 6)).shape == (12, 2)
    assert not _symbolic_graphs(cf) and len(cf.entries) == 2


def test_a_size_read_as_a_python_number_stays_static():
    cf = compiler.compile(lambda x: x / x.shape[0], backend="eager")
    assert cf(eager.ones(2)).tolist() == [0.5, 0.5]
    assert cf(eager.ones(4)).tolist() == [0.25] * 4  # the scalar differs: no merge
    assert not _symbolic_graphs(cf)


def test_a_rank_change_is_a_graph_of_its_own():
    cf = compiler.compile(lambda a: a * 2 + 1, backend="eager")
    for shape in [(3, 4), (5, 4), (2, 7, 4), (6, 7, 4)]:
        x = eager.randn(*shape)
        assert_close(cf(x), x * 2 + 1)
    assert sorted(str(g).split("\n")[0] for g in _symbolic_graphs(cf)) == [
        "graph(%x0: f32[s0,4]):", "graph(%x0: f32[s0,7,4]):"]


def test_dynamic_false_compiles_each_shape_for_its_sizes():
    cf = compiler.compile(lambda x: eager.softmax(x, -1), backend="eager", dynamic=False)
    for rows in (2, 3, 4):
        cf(eager.randn(rows, 5))
    assert cf.compiles == 3 and not cf.families


def test_a_symbolic_graph_that_a_pass_cannot_take_keeps_static_sizes():
    """A pass that needs a symbolic size's value raises SymbolicSize: the family compiles
    each shape for its own sizes, and says so."""
    from compiler import dynamic
    from compiler.backends import EagerBackend
    from ir.graph import SymbolicSize

    class Picky(EagerBackend):
        def compile(self, graph):
            if not all(v.type.is_static for v in graph.inputs):
                raise SymbolicSize("this backend wants numbers")
            return super().compile(graph)
    cf = compiler.compile(lambda x: x.exp() + 1, backend=Picky())
    for rows in (2, 3, 4):
        x = eager.randn(rows, 5)
        assert_close(cf(x), x.exp() + 1)
    assert cf.compiles == 3 and not _symbolic_graphs(cf)
    assert any(isinstance(f, dynamic.Family) and "wants numbers" in f.kept_static
               for f in cf.families.values())
    assert any("kept static sizes" in h for h in cf.history)


def test_dynamic_true_probes_sizes_on_the_first_call():
    cf = compiler.compile(lambda x: eager.softmax(x, -1) * 2, backend="eager", dynamic=True)
    cf(eager.randn(3, 5))
    assert len(_symbolic_graphs(cf)) == 1
    compiled = cf.compiles
    for rows in (11, 3):
        x = eager.randn(rows, 5)
        assert_close(cf(x), eager.softmax(x, -1) * 2)
    assert cf.compiles == compiled  # the first call's own entry runs the symbolic code too
    assert "symbolic sizes (s0=3)" in cf.explain()


def test_dynamic_true_probes_the_first_argument_alone_when_all_cannot_grow():
    """x @ w cannot take both dims 0 grown (w's must match x's dim 1): the probe grows
    x's alone, and x's batch size is symbolic from the first call."""
    w = eager.randn(5, 3)
    cf = compiler.compile(lambda x, w: (x @ w).relu(), backend="eager", dynamic=True)
    cf(eager.randn(4, 5), w)
    (general,) = _symbolic_graphs(cf)
    assert "%x0: f32[s0,5]" in str(general)
    compiled = cf.compiles
    for rows in (2, 9):
        x = eager.randn(rows, 5)
        assert_close(cf(x, w), (x @ w).relu())
    assert cf.compiles == compiled


def test_compiled_kernels_land_in_the_disk_cache_which_can_be_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    compiler.compile(lambda x: (x * 3.25).exp() - 1.5)(eager.randn(5))
    assert compiler.cache_info().entries >= 1
    assert compiler.cache_clear() >= 1 and compiler.cache_info().entries == 0
