"""Compiled backward: a region whose outputs need gradients compiles a forward that
saves and a backward traced through eager's engine; gradients equal eager's. Most tests
use the "eager" backend (the graphs alone, no code generation, to stay fast); the
native ones assert their kernels ran natively."""
import numpy as np
import pytest

import compiler
import eager
from compiler.compiled_backward import CREATE_GRAPH_REASON, TrainingRegion
from eager import nn
from eager.nn import functional as F
from eager.testing import assert_close


def _params(*shapes, dtype=eager.float32):
    return [eager.randn(*s, dtype=dtype, requires_grad=True) for s in shapes]


def _grads(fn, args, wrt):
    """fn(*args).sum()'s gradients for `wrt`, with `.grad` left as found (None)."""
    out = fn(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    sum(o.sum() for o in outs if o.requires_grad).backward()
    grads = [p.grad for p in wrt]
    for p in wrt:
        p.grad = None
    return grads


def _same_grads(fn, args, wrt, compiled=None, calls=2):
    compiled = compiled or compiler.compile(fn, backend="eager")
    expected = _grads(fn, args, wrt)
    for _ in range(calls):
        got = _grads(compiled, args, wrt)
        for g, e in zip(got, expected):
            assert g is not None
            assert_close(g, e)
    return compiled


def _training_regions(cf) -> list:
    return [r for e in cf.entries.values() for r in e.runs if isinstance(r, TrainingRegion)]


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64])
def test_mlp_gradients_equal_eager_and_backward_is_one_node(dtype):
    eager.manual_seed(0)
    x = eager.randn(8, 3, dtype=dtype)
    w1, b1, w2 = _params((3, 6), (6,), (6, 2), dtype=dtype)

    def f(x, w1, b1, w2):
        return eager.tanh(eager.relu(x @ w1 + b1) @ w2)
    cf = _same_grads(f, (x, w1, b1, w2), [w1, b1, w2], calls=3)
    assert type(cf(x, w1, b1, w2).grad_fn).__name__ == "CompiledFunctionBackward"
    entry = next(iter(cf.entries.values()))
    assert entry.mode == "replay" and entry.calls == 4 and len(cf.entries) == 1
    (region,) = _training_regions(cf)
    assert region.backward_calls == 3


@pytest.mark.slow  # generates its kernels: ~5 s with a cold kernel cache
def test_backward_graph_runs_as_native_kernels_and_explain_says_so():
    eager.manual_seed(1)
    x = eager.randn(16, 4)
    w1, w2 = _params((4, 8), (8, 3))

    def f(x, w1, w2):
        return (eager.sigmoid(x @ w1) @ w2).sum()
    cf = compiler.compile(f)
    cf(x, w1, w2).backward()
    (region,) = _training_regions(cf)
    backward = region.backward
    fused = [n for n in backward.graph.nodes if n.op.name == "FUSED"]
    assert fused and len(backward.kernels) == len(fused) and not backward.native_reasons
    text = cf.explain()
    assert "autograd: compiled forward and backward" in text
    assert "backward graph:" in text and "backward ran 1 time(s) compiled" in text
    assert f"{len(fused)} fused kernel(s), {len(fused)} as native code" in \
        text.split("backward lowering:")[1]


@pytest.mark.slow  # generates its kernels
def test_layer_norm_backward_runs_native_and_equals_numpy_float64():
    """mean's derivative divides before it expands and simplify drops the expands that
    the ops broadcast anyway: no kernel holds a view of a value it computes."""
    rng = np.random.default_rng(1)
    x64, g64 = rng.standard_normal((5, 3, 7)), rng.standard_normal((5, 3, 7))
    x = eager.tensor(x64.astype(np.float32), requires_grad=True)
    cf = compiler.compile(lambda x: F.layer_norm(x, (7,)))
    cf(x).backward(eager.tensor(g64.astype(np.float32)))
    (region,) = _training_regions(cf)
    backward = region.backward
    fused = [n for n in backward.graph.nodes if n.op.name == "FUSED"]
    assert fused and len(backward.kernels) == len(fused) and not backward.native_reasons
    r = 1 / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    xhat = (x64 - x64.mean(-1, keepdims=True)) * r
    want = r * (g64 - g64.mean(-1, keepdims=True)
                - xhat * (g64 * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-5)


def test_saved_bytes_are_reported_before_and_after_recomputing():
    x = eager.randn(32, 16)
    (w,) = _params((16, 16))

    def f(x, w):
        return (eager.tanh(x @ w) * eager.sigmoid(x @ w)).sum()
    cf = compiler.compile(f, backend="eager")
    cf(x, w).backward()
    (region,) = _training_regions(cf)
    plan = region.plan
    assert plan.bytes_saved < plan.bytes_first_cut and plan.recomputed > 0
    assert f"{plan.bytes_first_cut} bytes saving every value" in cf.explain()
    assert f"{plan.bytes_saved} bytes after recomputing" in cf.explain()


def test_graph_break_regions_each_get_a_compiled_pair_chained_by_autograd():
    x = eager.randn(5, 4, dtype=eager.float64)
    w1, w2 = _params((4, 4), (4, 3), dtype=eager.float64)

    def f(x, w1, w2):
        h = eager.tanh(x @ w1)
        if h.sum().item() > -1e9:  # a graph break
            h = h * 2
        return eager.relu(h @ w2) + h.sum()
    cf = _same_grads(f, (x, w1, w2), [w1, w2])
    entry = next(iter(cf.entries.values()))
    assert entry.breaks and entry.mode == "python"
    assert len(_training_regions(cf)) >= 2


def test_non_leaf_inputs_parameter_used_twice_and_multiple_outputs():
    eager.manual_seed(2)
    a = eager.randn(4, 4, dtype=eager.float64, requires_grad=True)
    (w,) = _params((4, 4), dtype=eager.float64)

    def f(x, w):
        h = x @ w @ w  # w used twice
        return h.exp(), (h * x).sum(1), x.argmax(1)
    grads = []
    for fn in (f, compiler.compile(f, backend="eager")):
        x = a * 3  # a non-leaf input
        out1, out2, idx = fn(x, w)
        assert not idx.requires_grad and out1.requires_grad and out2.requires_grad
        (out1.sum() + (out2 * 2).sum()).backward()
        grads.append((a.grad, w.grad))
        a.grad = w.grad = None
    assert_close(grads[1][0], grads[0][0])
    assert_close(grads[1][1], grads[0][1])


def test_only_some_outputs_get_gradients_the_rest_count_as_zero():
    x = eager.randn(3, 3, dtype=eager.float64)
    (w,) = _params((3, 3), dtype=eager.float64)

    def f(x, w):
        y = x @ w
        return y.exp(), y * y
    cf = compiler.compile(f, backend="eager")
    cf(x, w)[1].sum().backward()
    got, w.grad = w.grad, None
    f(x, w)[1].sum().backward()
    assert_close(got, w.grad)


def test_outputs_not_requiring_grad_and_no_grad_calls_use_a_forward_graph():
    x = eager.randn(3, 3)
    (w,) = _params((3, 3))

    def f(x, w):
        return (x @ w).relu(), x * 2
    cf = compiler.compile(f, backend="eager")
    y, z = cf(x, w)
    assert y.requires_grad and not z.requires_grad and z.grad_fn is None
    with eager.no_grad():
        y2, _ = cf(x, w)
    assert not y2.requires_grad and y2.grad_fn is None
    assert len(cf.entries) == 2 and len(_training_regions(cf)) == 1
    assert_close(y2, y.detach())


def test_gradcheck_through_compiled_functions_in_float64():
    eager.manual_seed(3)
    x, w, b = _params((3, 4), (4, 2), (2,), dtype=eager.float64)

    def f(x, w, b):
        return F.gelu(x @ w + b).softmax(-1) * eager.sigmoid(x).sum(1, keepdim=True)
    cf = compiler.compile(f, backend="eager")
    assert eager.autograd.gradcheck(cf, (x, w, b))
    assert _training_regions(cf)


def test_create_graph_falls_back_to_eager_with_the_reason():
    x = eager.randn(3, dtype=eager.float64, requires_grad=True)

    def f(x):
        return (x ** 3).sum()
    cf = compiler.compile(f, backend="eager")
    (g,) = eager.autograd.grad(cf(x), [x], create_graph=True)
    (gg,) = eager.autograd.grad(g.sum(), [x])
    assert_close(g, 3 * x.detach() ** 2)
    assert_close(gg, 6 * x.detach())
    assert CREATE_GRAPH_REASON in cf.explain()


def test_in_place_update_of_a_saved_input_between_forward_and_backward_raises():
    x = eager.randn(3, 3)
    (w,) = _params((3, 3))

    def f(x, w):
        return (x @ w).sum()
    for fn in (f, compiler.compile(f, backend="eager")):
        y = fn(x, w)
        x.add_(1)  # mm saved x for w's gradient
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()


def test_a_second_backward_without_retain_graph_raises_as_eager():
    (w,) = _params((3,))
    cf = compiler.compile(lambda w: (w * w).sum())
    y = cf(w)
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_repeated_steps_through_one_compiled_module_match_eager_training():
    from examples.mlp_classifier import make_model, spiral
    x_np, y_np = spiral(20)
    x, y = eager.tensor(x_np), eager.tensor(y_np)
    losses = []
    for compiled in (False, True):
        eager.manual_seed(4)
        model = make_model(16)
        run = compiler.compile(model, backend="eager") if compiled else model
        opt = eager.optim.SGD(model.parameters(), lr=0.1)
        losses.append([])
        for _ in range(4):
            loss = F.cross_entropy(run(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[-1].append(loss.item())
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    entry = next(iter(run._compiled.entries.values()))
    assert len(run._compiled.entries) == 1 and entry.mode == "replay" and entry.calls == 4


@pytest.mark.parametrize("dtype", [eager.float32, eager.float64])
def test_char_transformer_gradients_equal_eager(dtype):
    from examples.char_transformer import CharTransformer
    eager.manual_seed(5)
    model = CharTransformer(12, d_model=16, heads=2, layers=1, context=8).to(dtype)
    idx = eager.tensor(np.random.default_rng(0).integers(0, 12, (2, 8)))
    params = list(model.parameters())
    compiled = compiler.compile(model, backend="eager")
    _same_grads(model, (idx,), params, compiled=compiled, calls=1)
    assert _training_regions(compiled._compiled)


def test_module_parameters_read_by_the_function_get_gradients():
    layer = nn.Linear(4, 3).double()
    x = eager.randn(2, 4, dtype=eager.float64)

    def f(x):
        return eager.tanh(layer(x))
    _same_grads(f, (x,), list(layer.parameters()))


@pytest.mark.parametrize("backend", ["eager", "native"])
def test_a_fresh_gradient_becomes_the_leafs_grad_without_a_copy(backend):
    """Each weight's gradient is a buffer the backward graph made for it alone: .grad
    keeps it (no clone), as PyTorch's AccumulateGrad steals such a gradient."""
    eager.manual_seed(0)
    x = eager.randn(8, 3)
    w1, w2 = _params((6, 3), (2, 6))
    cf = compiler.compile(lambda x: F.linear(eager.relu(F.linear(x, w1)), w2).sum(),
                          backend=backend)
    expected = _grads(lambda x: F.linear(eager.relu(F.linear(x, w1)), w2), (x,), [w1, w2])
    for _ in range(2):
        w1.grad = w2.grad = None
        loss = cf(x)
        with eager.profiler.profile() as prof:
            loss.backward()
        assert not [e for e in prof.events() if e.name == "aten::clone"]
        assert_close(w1.grad, expected[0])
        assert_close(w2.grad, expected[1])


def test_a_gradient_held_elsewhere_is_copied_into_grad():
    """A gradient the backward graph returns for two inputs, one a hook keeps, or one it
    was given, is copied: each .grad is memory of its own, as in eager."""
    a, b, c = _params((4,), (4,), (4,))
    kept = []
    c.register_hook(lambda g: kept.append(g))
    cf = compiler.compile(lambda a, b, c: (a + b).exp().sum() + (c * 2).sum(),
                          backend="native")
    cf(a, b, c).backward()
    expected = (a + b).exp().detach()
    a.grad.add_(1.0)
    c.grad.add_(1.0)
    assert_close(b.grad, expected)
    assert_close(kept[0], eager.full((4,), 2.0))
    d = eager.randn(4, requires_grad=True)
    given = eager.ones(4)  # the tangent, which the backward graph returns as d's gradient
    compiler.compile(lambda d: d + 1.0, backend="native")(d).backward(given)
    d.grad.add_(1.0)
    assert_close(given, eager.ones(4))
