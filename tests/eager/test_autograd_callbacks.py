"""The two autograd hooks DistributedDataParallel stands on: a leaf's post-accumulate-grad
hook sees its `.grad` once backward has accumulated into it, and a callback queued during
backward runs once, after every node."""
import pytest

import eager
from eager.autograd.engine import queue_callback


def test_post_accumulate_grad_hooks_see_the_accumulated_grad_each_backward():
    w = eager.ones(3, requires_grad=True)
    seen = []
    handle = w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.tolist()))
    (w * 2).sum().backward()
    (w * 3).sum().backward()
    assert seen == [[2.0] * 3, [5.0] * 3]
    handle.remove()
    (w * 1).sum().backward()
    assert len(seen) == 2


def test_post_accumulate_grad_hooks_are_for_leaves_that_require_grad():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        eager.ones(2).register_post_accumulate_grad_hook(print)
    y = eager.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="non-leaf"):
        y.register_post_accumulate_grad_hook(print)


def test_a_queued_callback_runs_once_after_every_gradient_is_accumulated():
    a, b = eager.ones(2, requires_grad=True), eager.ones(2, requires_grad=True)
    order = []

    def first_hook(t):
        if not order:
            queue_callback(lambda: order.append(("callback", a.grad is not None,
                                                 b.grad is not None)))
        order.append("hook")
    a.register_post_accumulate_grad_hook(first_hook)
    b.register_post_accumulate_grad_hook(first_hook)
    (a * b).sum().backward()
    assert order == ["hook", "hook", ("callback", True, True)]


def test_queue_callback_outside_backward_is_an_error():
    with pytest.raises(RuntimeError, match="during backward"):
        queue_callback(lambda: None)
