"""The autograd engine's behaviour: accumulation, freed graphs, autograd.grad, grad mode,
hooks, retain_grad, version counters and in-place ops, graph shapes, deep graphs."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import eager
from eager import autograd
from eager.autograd import AccumulateGrad
from eager.testing import assert_close


def leaf(*shape, seed=0, dtype=eager.float64, low=-1.0, high=1.0):
    values = np.random.default_rng(seed).uniform(low, high, shape)
    return eager.tensor(values, dtype=dtype, requires_grad=True)


# accumulation and freed graphs -------------------------------------------------------------
def test_leaf_gradients_accumulate_across_backward_calls():
    x = leaf(3)
    (x * x).sum().backward()
    first = x.grad.clone()
    assert_close(first, 2 * x.detach())
    (x * x).sum().backward()
    assert_close(x.grad, 2 * first)


def test_second_backward_through_a_freed_graph_raises():
    x = leaf(3)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


def test_a_node_s_saved_values_are_its_attributes_until_backward_frees_them():
    a, b = leaf(2, 3), leaf(3, 2)
    node = (a @ b).grad_fn
    assert node.self is a and node.mat2 is b  # MmBackward0 saved both operands
    assert not hasattr(node, "other")  # a name the rule does not save
    (a @ b).sum().backward()  # another graph: this node keeps its values
    assert node.self is a
    node.release()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        node.self


def test_retain_graph_allows_a_second_backward():
    x = leaf(3)
    y = (x.exp() * x).sum()
    y.backward(retain_graph=True)
    first = x.grad.clone()
    y.backward()
    assert_close(x.grad, 2 * first)


def test_non_scalar_backward_needs_a_gradient():
    x = leaf(2, 3)
    y = x * 2
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        y.backward()
    seed = eager.tensor(np.arange(6.0).reshape(2, 3))
    y.backward(seed)
    assert_close(x.grad, seed * 2)


def test_backward_of_a_tensor_without_history_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        eager.ones(2).sum().backward()


def test_gradient_of_wrong_shape_is_refused():
    x = leaf(2, 3)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(eager.ones(3, 2, dtype=eager.float64))


# autograd.grad -----------------------------------------------------------------------------
def test_grad_with_grad_outputs_leaves_dot_grad_alone():
    x = leaf(4)
    w = eager.tensor([1.0, -2.0, 0.5, 3.0], dtype=eager.float64)
    (gx,) = autograd.grad([x.tanh()], [x], [w])
    assert_close(gx, w * (1 - x.detach().tanh() ** 2))
    assert x.grad is None


def test_grad_of_several_inputs_and_outputs():
    x, y = leaf(3, seed=1), leaf(3, seed=2)
    gx, gy = autograd.grad([(x * y).sum(), (x * x).sum()], [x, y])
    assert_close(gx, y.detach() + 2 * x.detach())
    assert_close(gy, x.detach())


def test_grad_of_an_unused_input_needs_allow_unused():
    x, unused = leaf(3, seed=1), leaf(3, seed=2)
    y = (x * 3).sum()
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        autograd.grad(y, [x, unused], retain_graph=True)
    gx, gu = autograd.grad(y, [x, unused], allow_unused=True)
    assert_close(gx, eager.full((3,), 3.0, dtype=eager.float64))
    assert gu is None


def test_grad_with_create_graph_gives_second_derivatives():
    x = leaf(4, seed=3)
    (g,) = autograd.grad((x * x * x).sum(), x, create_graph=True)
    assert g.requires_grad and g.grad_fn is not None
    assert_close(g, 3 * x.detach() ** 2)
    (gg,) = autograd.grad(g.sum(), x)
    assert_close(gg, 6 * x.detach())


def test_grad_of_the_same_input_twice():
    x = leaf(3)
    a, b = autograd.grad((x * x).sum(), [x, x])
    assert_close(a, 2 * x.detach())
    assert_close(b, a)


def test_grad_without_create_graph_returns_detached_gradients():
    x = leaf(3)
    (g,) = autograd.grad((x * x).sum(), x)
    assert not g.requires_grad and g.grad_fn is None


def test_grad_of_an_input_not_requiring_grad_raises():
    x = leaf(3)
    with pytest.raises(RuntimeError, match="does not require grad"):
        autograd.grad((x * 2).sum(), eager.ones(3))


def test_backward_inputs_fills_only_the_listed_leaves():
    x, y = leaf(3, seed=1), leaf(3, seed=2)
    (x * y).sum().backward(inputs=[x])
    assert_close(x.grad, y.detach())
    assert y.grad is None


def test_backward_inputs_may_name_a_non_leaf():
    x = leaf(3)
    h = x * 2
    (h * h).sum().backward(inputs=[h])
    assert_close(h.grad, 2 * h.detach())
    assert x.grad is None


# grad mode -------------------------------------------------------------------------------
def test_no_grad_context_records_nothing():
    x = leaf(3)
    with eager.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert (x * 2).requires_grad


def test_grad_mode_decorators():
    x = leaf(3)

    @eager.no_grad()
    def without(t):
        return t * 2

    @eager.enable_grad()
    def with_grad(t):
        return t * 2

    @eager.set_grad_enabled(False)
    def switched_off(t):
        return t * 2

    @eager.no_grad
    def bare(t):
        return t * 2

    assert not without(x).requires_grad
    assert not bare(x).requires_grad
    assert not switched_off(x).requires_grad
    assert eager.is_grad_enabled()  # making the decorator left the mode as it was
    with eager.no_grad():
        assert with_grad(x).requires_grad
        assert not eager.is_grad_enabled()


def test_grad_modes_nest_and_restore():
    assert eager.is_grad_enabled()
    with eager.no_grad():
        with eager.enable_grad():
            assert eager.is_grad_enabled()
            with eager.set_grad_enabled(False):
                assert not eager.is_grad_enabled()
            assert eager.is_grad_enabled()
        assert not eager.is_grad_enabled()
    assert eager.is_grad_enabled()


def test_set_grad_enabled_as_a_plain_call():
    try:
        eager.set_grad_enabled(False)
        assert not eager.is_grad_enabled()
        assert not (leaf(2) * 2).requires_grad
    finally:
        eager.set_grad_enabled(True)
    assert (leaf(2) * 2).requires_grad


def test_grad_mode_restores_after_an_exception():
    with pytest.raises(ValueError):
        with eager.no_grad():
            raise ValueError
    assert eager.is_grad_enabled()


def test_grad_mode_is_thread_local():
    x = leaf(3)
    seen = {}
    entered, release = threading.Event(), threading.Event()

    def worker():
        with eager.no_grad():
            entered.set()
            release.wait(5)
            seen["worker"] = (x * 2).requires_grad

    thread = threading.Thread(target=worker)
    thread.start()
    entered.wait(5)
    seen["main"] = (x * 2).requires_grad  # while the worker is inside no_grad
    release.set()
    thread.join()
    assert seen == {"main": True, "worker": False}

    with eager.no_grad():
        other = []
        thread = threading.Thread(target=lambda: other.append((x * 2).requires_grad))
        thread.start()
        thread.join()
    assert other == [True]


# requires_grad, detach, retain_grad ------------------------------------------------------------
def test_requires_grad_on_an_integer_tensor_raises():
    with pytest.raises(RuntimeError, match="floating point"):
        eager.tensor([1, 2, 3]).requires_grad_()


def test_requires_grad_cannot_be_cleared_on_a_non_leaf():
    y = leaf(2) * 2
    with pytest.raises(RuntimeError, match="leaf variables"):
        y.requires_grad_(False)


def test_detach_shares_data_and_stops_gradients():
    x = leaf(3)
    d = (x * 2).detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_leaf
    y = (x * d).sum()
    y.backward()
    assert_close(x.grad, d)  # d is a constant: no gradient through it
    z = x.detach()
    assert z._storage is x._storage


def test_retain_grad_keeps_a_non_leaf_gradient():
    x = leaf(3)
    h = x * 3
    kept = x * 4
    kept.retain_grad()
    (h * kept).sum().backward()
    assert h.grad is None and not h.retains_grad
    assert kept.retains_grad
    assert_close(kept.grad, h.detach())
    assert_close(x.grad, 3 * kept.detach() + 4 * h.detach())


# hooks ---------------------------------------------------------------------------------------
def test_hook_can_replace_the_gradient():
    x = leaf(3)
    h = x * 2
    h.register_hook(lambda g: g * 10)
    h.sum().backward()
    assert_close(x.grad, eager.full((3,), 20.0, dtype=eager.float64))


def test_hook_sees_the_gradient_and_can_be_removed():
    x = leaf(3)
    seen = []
    handle = x.register_hook(lambda g: seen.append(g.clone()))
    (x * 5).sum().backward()
    assert len(seen) == 1
    assert_close(seen[0], eager.full((3,), 5.0, dtype=eager.float64))
    handle.remove()
    (x * 5).sum().backward()
    assert len(seen) == 1


def test_hook_on_a_leaf_changes_what_accumulates():
    x = leaf(3)
    x.register_hook(lambda g: -g)
    (x * 2).sum().backward()
    assert_close(x.grad, eager.full((3,), -2.0, dtype=eager.float64))


def test_retain_grad_sees_the_gradient_after_user_hooks():
    x = leaf(3)
    h = x * 2
    h.retain_grad()
    h.register_hook(lambda g: g * 3)
    h.sum().backward()
    assert_close(h.grad, eager.full((3,), 3.0, dtype=eager.float64))


def test_hook_changing_the_gradient_shape_raises():
    h = leaf(3) * 2
    h.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        h.sum().backward()


def test_hook_on_a_tensor_not_requiring_grad_raises():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        eager.ones(2).register_hook(lambda g: g)


# version counters and in-place ops -------------------------------------------------------------
def test_modifying_a_saved_tensor_in_place_makes_backward_fail():
    x = leaf(3)
    h = x * 2
    y = (h * h).sum()  # MulBackward0 saves h
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_modifying_a_saved_output_in_place_makes_backward_fail():
    x = leaf(3)
    y = x.exp()  # ExpBackward0 saves its result
    y.mul_(2)
    with pytest.raises(RuntimeError, match=r"output 0 of .*is at version 1; expected version 0"):
        y.sum().backward()


def test_modifying_a_tensor_that_was_not_saved_is_fine():
    x = leaf(3)
    h = x * 2
    y = (h + 1).sum()  # AddBackward0 saves only sizes
    h.add_(1)
    y.backward()
    assert_close(x.grad, eager.full((3,), 2.0, dtype=eager.float64))


def test_in_place_on_a_leaf_requiring_grad_raises():
    x = leaf(3)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)
    with eager.no_grad():
        x.add_(1)  # allowed: no graph is being recorded


@pytest.mark.parametrize("name, inplace, out_of_place", [
    ("add_", lambda y, w: y.add_(w, alpha=2), lambda y, w: y + 2 * w),
    ("sub_", lambda y, w: y.sub_(w), lambda y, w: y - w),
    ("mul_", lambda y, w: y.mul_(w), lambda y, w: y * w),
    ("div_", lambda y, w: y.div_(w + 2), lambda y, w: y / (w + 2)),
    ("clamp_", lambda y, w: y.clamp_(-0.5, 0.5) * w, lambda y, w: y.clamp(-0.5, 0.5) * w),
    ("zero_", lambda y, w: y.zero_() + w, lambda y, w: 0 * y + w),
    ("fill_", lambda y, w: y.fill_(3.0) * w, lambda y, w: 0 * y + 3 * w),
    ("copy_", lambda y, w: y.copy_(w * w), lambda y, w: 0 * y + w * w),
])
def test_in_place_on_a_non_leaf_gives_the_out_of_place_gradient(name, inplace, out_of_place):
    grads = []
    for f in (inplace, out_of_place):
        x, w = leaf(2, 3, seed=1), leaf(3, seed=2)
        y = x * x
        (f(y, w) * eager.tensor([1.0, 2.0, 3.0], dtype=eager.float64)).sum().backward()
        grads.append((x.grad, w.grad))
    assert_close(grads[0][0], grads[1][0])
    assert_close(grads[0][1], grads[1][1])


def test_in_place_result_keeps_its_place_in_the_graph():
    x = leaf(3)
    y = x * 2
    mul = y.grad_fn
    out = y.add_(1)
    assert out is y and y._version == 1
    assert type(y.grad_fn) is type((x + 1).grad_fn)  # the out-of-place op's node class
    assert y.grad_fn.next_functions[0] == (mul, 0)


def test_in_place_into_a_tensor_not_requiring_grad():
    x = leaf(3)
    buffer = eager.zeros(3, dtype=eager.float64)
    buffer.add_(x * 2)
    assert buffer.requires_grad and not buffer.is_leaf
    (buffer * buffer).sum().backward()
    assert_close(x.grad, 8 * x.detach())


def test_in_place_on_a_view_needing_grad_is_refused_clearly():
    y = leaf(2, 3) * 1
    with pytest.raises(RuntimeError, match="in-place operations on views"):
        y[0].mul_(2)


# graph shape and values ------------------------------------------------------------------------
def test_next_functions_point_at_accumulators_and_none():
    x = leaf(2, 2)
    c = eager.ones(2, 2, dtype=eager.float64)
    y = x * c
    (acc, nr), (missing, missing_nr) = y.grad_fn.next_functions
    assert isinstance(acc, AccumulateGrad) and acc.variable is x and nr == 0
    assert (missing, missing_nr) == (None, 0)
    z = x + 1
    assert z.grad_fn.next_functions[0][0] is acc  # one accumulator per leaf


def test_ops_on_tensors_not_requiring_grad_record_nothing():
    a = eager.ones(3, dtype=eager.float64)
    b = (a * 2).exp().sum()
    assert not b.requires_grad and b.grad_fn is None


def test_comparison_results_never_require_grad():
    x = leaf(3)
    assert not (x > 0).requires_grad
    assert not eager.argmax(x).requires_grad


def test_diamond_graph_sums_both_paths():
    x = leaf(3)
    h = x.exp()
    y = (h * 2 + h.tanh()).sum()
    y.backward()
    e = x.detach().exp()
    assert_close(x.grad, e * 2 + (1 - e.tanh() ** 2) * e)


def test_a_graph_reused_by_two_outputs():
    x = leaf(3)
    h = x * x
    a, b = (h * 3).sum(), h.sum()
    autograd.backward([a, b])
    assert_close(x.grad, 8 * x.detach())


def test_gradient_dtype_follows_the_leaf():
    x = leaf(3, dtype=eager.float32)
    y = (x.double() * 2).sum()
    assert y.dtype is eager.float64
    y.backward()
    assert x.grad.dtype is eager.float32
    assert_close(x.grad, eager.full((3,), 2.0))


def test_gradient_of_a_float32_graph_is_float32():
    x = leaf(2, 3, dtype=eager.float32)
    w = leaf(3, 4, dtype=eager.float32, seed=1)
    (x @ w).relu().mean().backward()
    assert x.grad.dtype is eager.float32 and w.grad.dtype is eager.float32


def test_a_deep_chain_does_not_hit_the_recursion_limit():
    x = leaf(2)
    y = x
    for _ in range(3000):
        y = y + 1
    y.sum().backward()
    assert_close(x.grad, eager.ones(2, dtype=eager.float64))
    del y  # freeing a deep graph must not recurse either


def test_embedding_padding_row_gets_no_gradient():
    weight = leaf(4, 3)
    indices = eager.tensor([[0, 2], [2, 3]])
    out = eager.embedding(weight, indices, padding_idx=2)
    (out * out).sum().backward()
    plain = weight.detach().clone().requires_grad_()
    (eager.embedding(plain, indices) ** 2).sum().backward()
    expected = plain.grad.clone()
    expected[2] = 0.0
    assert_close(weight.grad, expected)
    assert_close(out[0, 1], weight.detach()[2])  # the padding row is still read


def test_ties_share_the_gradient_of_amax():
    x = eager.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 2.0]], dtype=eager.float64,
                     requires_grad=True)
    eager.amax(x, [1]).sum().backward()
    assert_close(x.grad, eager.tensor([[0.0, 0.5, 0.5], [0.5, 0.0, 0.5]], dtype=eager.float64))


def test_a_python_float_exponents_gradient_is_exact_in_float64():
    """x ** (1/3): the derivative's exponent less one is Python's arithmetic, not the
    wrapped number's default dtype (float32: 2.7e-8 relative off)."""
    x = eager.tensor([2.0, 0.5], dtype=eager.float64, requires_grad=True)
    (x ** (1.0 / 3)).sum().backward()
    expected = [(1 / 3) * v ** (-2 / 3) for v in (2.0, 0.5)]
    assert x.grad.tolist() == pytest.approx(expected, rel=1e-15)
