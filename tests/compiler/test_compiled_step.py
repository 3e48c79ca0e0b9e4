"""A whole training step under compile (zero_grad, forward, loss, backward, optimiser
step): parameters and optimiser state after 20 steps equal eager's (float32 allclose,
float64 to 1e-12), for SGD with momentum/nesterov, Adam and AdamW on the MLP and the char
transformer; zero_grad either way, gradients accumulated over two backward calls, a
loss read outside and inside the step. Most tests use the "eager" backend (the graphs
alone, no code generation, to stay fast)."""
import numpy as np
import pytest

import compiler
import eager
from eager.nn import functional as F
from compiler.compiled_backward import TrainingRegion
from eager.testing import assert_close

STEPS = 20
TOLERANCE = {eager.float32: dict(rtol=1e-5, atol=1e-6),
             eager.float64: dict(rtol=1e-12, atol=1e-12)}
OPTIMISERS = {
    "sgd-momentum": lambda p: eager.optim.SGD(p, lr=0.05, momentum=0.9),
    "sgd-nesterov-decay": lambda p: eager.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                                    weight_decay=1e-2),
    "adam-decay": lambda p: eager.optim.Adam(p, lr=1e-2, weight_decay=1e-2),
    "adamw-decay": lambda p: eager.optim.AdamW(p, lr=1e-2, weight_decay=1e-2),
}


def _mlp(dtype):
    from examples.mlp_classifier import make_model
    eager.manual_seed(0)
    return make_model(16, 3, 4).to(dtype)


def _mlp_batches(dtype, count=3):
    rng = np.random.default_rng(0)
    return [(eager.tensor(rng.standard_normal((8, 4)), dtype=dtype),
             eager.tensor(rng.integers(0, 3, 8))) for _ in range(count)]


def _classify(model, x, y):
    return F.cross_entropy(model(x), y)


def _transformer(dtype):
    from examples.char_transformer import define
    eager.manual_seed(0)
    return define(eager)(11, 16, 2, 1, 8).to(dtype)


def _text_batches(dtype, count=3):
    rng = np.random.default_rng(1)
    return [(eager.tensor(rng.integers(0, 11, (2, 8))), eager.tensor(rng.integers(0, 11, (2, 8))))
            for _ in range(count)]


def _next_characters(model, x, y):
    return F.cross_entropy(model(x).reshape(-1, 11), y.reshape(-1))


def _train(make_model, make_optimiser, loss_of, batches, dtype, compiled, steps=STEPS,
           set_to_none=True, backend="eager"):
    """`steps` steps of a fresh model and optimiser; returns (model, optimiser, losses,
    the step function)."""
    model = make_model(dtype)
    opt = make_optimiser(model.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=set_to_none)
        loss = loss_of(model, x, y)
        loss.backward()
        opt.step()
        return loss
    run = compiler.compile(step, backend=backend) if compiled else step
    losses = [run(*batches[i % len(batches)]).item() for i in range(steps)]
    return model, opt, losses, run


def _assert_same_training(got, want, dtype):
    (model, opt, losses, _), (model_e, opt_e, losses_e, _) = got, want
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(losses, losses_e, **tol)
    for (name, p), (_, q) in zip(model.named_parameters(), model_e.named_parameters()):
        assert_close(p, q, **tol, msg=name)
    state, state_e = opt.state_dict()["state"], opt_e.state_dict()["state"]
    assert state.keys() == state_e.keys()
    for i in state:
        assert state[i].keys() == state_e[i].keys()
        for k, v in state[i].items():
            if isinstance(v, eager.Tensor):
                assert_close(v, state_e[i][k], **tol, msg=f"state {i} {k}")
            else:
                assert v == state_e[i][k]


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("optimiser", list(OPTIMISERS))
def test_mlp_whole_step_equals_eager_after_20_steps(optimiser, dtype):
    batches = _mlp_batches(dtype)
    args = (_mlp, OPTIMISERS[optimiser], _classify, batches, dtype)
    got, want = _train(*args, compiled=True), _train(*args, compiled=False)
    _assert_same_training(got, want, dtype)
    for (name, p), (_, q) in zip(got[0].named_parameters(), want[0].named_parameters()):
        assert_close(p.grad, q.grad, **TOLERANCE[dtype], msg=name)  # set by the replay
        assert not p.grad.requires_grad and p.grad.grad_fn is None
    (entry,) = got[3].entries.values()
    assert entry.mode == "replay" and entry.calls == STEPS and not entry.breaks
    assert [s.what.split(".")[1] for s in entry.steps] == [
        "zero_grad(set_to_none=True)", "backward()", "step()"]
    assert isinstance(entry.run, TrainingRegion) and entry.run.backward_calls == STEPS


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("optimiser", ["sgd-nesterov-decay", "adamw-decay"])
def test_char_transformer_whole_step_equals_eager_after_20_steps(optimiser, dtype):
    args = (_transformer, OPTIMISERS[optimiser], _next_characters, _text_batches(dtype), dtype)
    got = _train(*args, compiled=True)
    _assert_same_training(got, _train(*args, compiled=False), dtype)
    (entry,) = got[3].entries.values()
    assert entry.mode == "replay", entry.why_python


@pytest.mark.parametrize("optimiser", ["sgd-momentum", "adam-decay"])
def test_zero_grad_keeping_zeroed_tensors_equals_eager(optimiser):
    args = (_mlp, OPTIMISERS[optimiser], _classify, _mlp_batches(eager.float64), eager.float64)
    got = _train(*args, compiled=True, set_to_none=False)
    want = _train(*args, compiled=False, set_to_none=False)
    _assert_same_training(got, want, eager.float64)
    for p in got[0].parameters():
        assert p.grad is not None and p.grad._lazy is None
    (entry,) = got[3].entries.values()  # backward adds to the zeroed grads, as eagerly
    assert entry.mode == "replay"


def _compiled_and_eager(optimiser, step_of, drive=None):
    """Train the MLP in float64 compiled and eagerly: `step_of(model, opt)` makes the
    step, `drive(run, batches, opt)` calls it and returns the losses (default: 6 steps).
    Asserts that both trained alike; returns the compiled step's first entry."""
    dtype = eager.float64
    batches = _mlp_batches(dtype, 4)
    drive = drive or (lambda run, batches, opt: [run(*batches[i % 3]).item() for i in range(6)])
    results = []
    for compiled in (True, False):
        model = _mlp(dtype)
        opt = OPTIMISERS[optimiser](model.parameters())
        step = step_of(model, opt)
        run = compiler.compile(step, backend="eager") if compiled else step
        results.append((model, opt, drive(run, batches, opt), run))
    _assert_same_training(*results, dtype)
    return next(iter(results[0][3].entries.values()))


def _usual_step(model, opt, zero_grad=lambda model, opt: opt.zero_grad()):
    def step(x, y):
        zero_grad(model, opt)
        loss = _classify(model, x, y)
        loss.backward()
        opt.step()
        return loss
    return step


def _six_calls(between):
    """A drive for _compiled_and_eager: six calls, `between(i, opt)` after call i."""
    def drive(run, batches, opt):
        losses = []
        for i in range(6):
            losses.append(run(*batches[i % 3]).item())
            between(i, opt)
        return losses
    return drive


def test_a_step_without_zero_grad_accumulates_as_eager():
    """Without zero_grad in the step, backward adds to the .grad left by the last call
    (backward is a whole step: eager's engine accumulates)."""
    entry = _compiled_and_eager(
        "sgd-momentum", lambda model, opt: _usual_step(model, opt, lambda m, o: None),
        _six_calls(lambda i, opt: opt.zero_grad() if i == 2 else None))
    assert entry.mode == "replay"


def test_grads_set_to_none_by_python_itself_do_not_replay():
    def by_hand(model, opt):
        for p in model.parameters():
            p.grad = None  # no tensor op: only the .grad setter tells capture
    entry = _compiled_and_eager("adam-decay",
                                lambda model, opt: _usual_step(model, opt, by_hand))
    assert entry.mode == "python" and "Python sets the .grad of a (16, 4)" in entry.why_python


def test_module_zero_grad_is_a_whole_step_too():
    entry = _compiled_and_eager(
        "sgd-nesterov-decay",
        lambda model, opt: _usual_step(model, opt, lambda m, o: m.zero_grad()))
    assert entry.mode == "replay"
    assert entry.steps[0].what == "Sequential.zero_grad(set_to_none=True)"


def test_a_model_switched_to_eval_mode_is_captured_again():
    dtype = eager.float64
    model, opt, _, run = _train(_mlp, OPTIMISERS["sgd-momentum"], _classify,
                                _mlp_batches(dtype), dtype, compiled=True, steps=2)
    model.eval()
    run(*_mlp_batches(dtype)[0])
    assert len(run.entries) == 2
    assert "closure variable 'model': training: True  ->  False" in run.history[0]


def test_gradients_accumulated_over_two_backward_calls_equal_eager():
    def step_of(model, opt):
        def step(x, y, x2, y2):
            opt.zero_grad()
            loss = _classify(model, x, y)
            loss.backward()
            loss2 = _classify(model, x2, y2)
            loss2.backward()
            opt.step()
            return loss, loss2
        return step

    def drive(run, batches, opt):
        pairs = [run(*batches[i % 2 * 2], *batches[i % 2 * 2 + 1]) for i in range(6)]
        return [loss.item() for pair in pairs for loss in pair]
    entry = _compiled_and_eager("adamw-decay", step_of, drive)
    assert entry.mode == "replay" and len(entry.regions) == 2  # a forward per backward
    assert [type(a).__name__ for a in entry.program] == [
        "tuple", "ReplayRegion", "tuple", "ReplayRegion", "tuple", "tuple"]


def test_the_returned_loss_is_concrete_and_prints_outside_the_step(capsys):
    dtype = eager.float32
    model, opt, _, run = _train(_mlp, OPTIMISERS["adam-decay"], _classify,
                                _mlp_batches(dtype), dtype, compiled=True, steps=3)
    loss = run(*_mlp_batches(dtype)[0])
    print(f"loss {loss.item():.4f}")
    assert capsys.readouterr().out.startswith("loss ")
    assert loss._lazy is None and loss.shape == () and loss.requires_grad
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()  # as eagerly: the step's backward freed its graph


def test_a_value_python_reads_inside_the_step_follows_each_call():
    """`if loss.item() > limit` reads a value: the step breaks there and re-runs its
    Python at every call, so the branch follows this call's loss (nothing baked in)."""
    skipped = []

    def step_of(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = _classify(model, x, y)
            loss.backward()
            skipped.append(loss.item() > 1.08)
            if not skipped[-1]:
                opt.step()
            return loss
        return step

    def drive(run, batches, opt):
        return [run(*batches[i % 3]).item() for i in range(12)]
    entry = _compiled_and_eager("sgd-momentum", step_of, drive)
    assert True in skipped[:12] and False in skipped[:12]
    assert entry.mode == "python" and "Tensor.item() needs a concrete value" in \
        entry.breaks[0].reason


def test_a_loss_read_after_the_optimiser_step_breaks_the_graph():
    """The step's graph has run when opt.step() starts: reading the loss after it is
    Python reading a value, so the branch is not baked into a replay."""
    def step_of(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = _classify(model, x, y)
            loss.backward()
            opt.step()
            if loss.item() > 1.08:
                opt.param_groups[0]["lr"] *= 0.5
            return loss
        return step
    entry = _compiled_and_eager("adam-decay", step_of)
    assert entry.mode == "python" and "Tensor.item() needs a concrete value" in \
        entry.breaks[0].reason


def test_a_learning_rate_changed_between_replays_is_used():
    def lower(i, opt):
        opt.param_groups[0]["lr"] *= 0.7
    assert _compiled_and_eager("sgd-nesterov-decay", _usual_step, _six_calls(lower)).mode \
        == "replay"


def test_explain_says_where_the_step_breaks_and_why():
    dtype = eager.float32
    *_, run = _train(_mlp, OPTIMISERS["adam-decay"], _classify, _mlp_batches(dtype), dtype,
                     compiled=True, steps=2)
    text = run.explain()
    assert "replays its graph and whole steps without running Python" in text
    assert "graph breaks: none" in text
    assert "- Adam.zero_grad(set_to_none=True) after 0 region(s), at " in text
    assert "- Tensor.backward() after 1 region(s), at " in text
    assert "- Adam.step() after 1 region(s), at " in text
    assert "backward ran 2 time(s) compiled" in text


@pytest.mark.slow  # generates its kernels (seconds with a cold kernel cache)
def test_mlp_whole_step_as_native_kernels_equals_eager():
    dtype = eager.float32
    args = (_mlp, OPTIMISERS["adamw-decay"], _classify, _mlp_batches(dtype), dtype)
    got = _train(*args, compiled=True, backend="native")
    _assert_same_training(got, _train(*args, compiled=False), dtype)
    (entry,) = got[3].entries.values()
    assert entry.mode == "replay"
    for graph in (entry.run.forward, entry.run.backward):  # the interpreter's share is small
        fused = [n for n in graph.graph.nodes if n.op.name == "FUSED"]
        assert len(graph.kernels) + len(graph.native_reasons) == len(fused) > 2
        assert len(graph.kernels) >= 2 * len(graph.native_reasons)


@pytest.mark.slow  # generates its kernels (seconds with a cold kernel cache)
def test_char_transformer_whole_step_as_native_kernels_equals_eager():
    """Backward is compiled at its first run, inside the backward step: the passes
    trace decompositions (gelu_backward) there, a capture inside a whole step."""
    dtype = eager.float32
    args = (_transformer, OPTIMISERS["adamw-decay"], _next_characters, _text_batches(dtype),
            dtype)
    got = _train(*args, compiled=True, backend="native", steps=4)
    _assert_same_training(got, _train(*args, compiled=False, steps=4), dtype)
    (entry,) = got[3].entries.values()
    assert entry.mode == "replay" and entry.run.backward_calls == 4


def test_check_refuses_a_step_it_would_take_twice_after_taking_it_once():
    """check=True runs the function again eagerly: for a training step that would be a
    second optimiser step. It raises instead, naming the steps, and the parameters hold
    exactly one step (as eager's)."""
    batches = _mlp_batches(eager.float64, 1)
    model = _mlp(eager.float64)
    opt = OPTIMISERS["adam-decay"](model.parameters())

    def step(x, y):
        opt.zero_grad()
        loss = _classify(model, x, y)
        loss.backward()
        opt.step()
        return loss
    checked = compiler.compile(step, check=True)
    with pytest.raises(compiler.CompileCheckError, match=r"takes whole steps \(.*Adam\.step\(\)"):
        checked(*batches[0])
    reference, _, _, _ = _train(_mlp, OPTIMISERS["adam-decay"], _classify, batches,
                                eager.float64, compiled=False, steps=1)
    for p, q in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12)
    checked(*batches[0])  # checking is over: later calls run as compiled


def _logits_and_loss_step(model, opt, x, y, keep=None):
    """`logits, loss = model(x, y)` as nanoGPT's loop writes it: the logits a temporary
    the step drops (or, with `keep`, a list it appends them to)."""
    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        if keep is not None:
            keep.append(logits)
        loss.backward()
        opt.step()
        return loss
    return step


def test_a_step_that_drops_a_temporary_result_replays_and_equals_eager():
    """The logits are a region result nothing holds once the step returns: the replay
    computes and drops them (before, the step re-ran its Python under capture at every
    call, 'it keeps tensors besides its outputs')."""
    (x, y), = _mlp_batches(eager.float32, 1)
    runs = []
    for compiled in (True, False):
        model = _mlp(eager.float32)
        opt = eager.optim.AdamW(model.parameters(), lr=1e-2)
        step = _logits_and_loss_step(model, opt, x, y)
        run = compiler.compile(step, backend="eager") if compiled else step
        runs.append(([run().item() for _ in range(5)], model, run))
    (got, model, run), (want, model_e, _) = runs
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), model_e.parameters()):
        assert_close(p, q, rtol=1e-5, atol=1e-6)
    (entry,) = run.entries.values()
    assert entry.mode == "replay", entry.why_python


def test_a_step_that_keeps_a_result_elsewhere_runs_its_python_each_call():
    """A result the step stores (here in a list) must be each call's own tensor, as
    eagerly: the step is not replayed, and the stored logits equal eager's."""
    (x, y), = _mlp_batches(eager.float32, 1)
    kept, entries = {True: [], False: []}, []
    for compiled in (True, False):
        model = _mlp(eager.float32)
        opt = eager.optim.SGD(model.parameters(), lr=0.1)
        step = _logits_and_loss_step(model, opt, x, y, kept[compiled])
        run = compiler.compile(step, backend="eager") if compiled else step
        for _ in range(3):
            run()
        if compiled:
            entries = list(run.entries.values())
    assert len(kept[True]) == 3 and len({id(t) for t in kept[True]}) == 3
    for got, want in zip(kept[True], kept[False]):
        assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert all(e.mode == "python" for e in entries)
    assert any("keeps tensors besides its outputs" in e.why_python for e in entries)
