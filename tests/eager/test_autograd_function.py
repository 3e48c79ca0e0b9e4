"""Custom autograd functions (eager.autograd.Function) against PyTorch: the tutorial's
programs run with either module, gradients checked with finite differences, the ctx
API (save_for_backward, needs_input_grad, mark_dirty, mark_non_differentiable,
set_materialize_grads, once_differentiable, setup_context) and its errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import eager
from eager.autograd import Function, gradcheck, gradgradcheck
from eager.autograd.function import once_differentiable

torch = pytest.importorskip("torch", reason="torch is not installed: no reference to compare")


def _f64(m, a, requires_grad=True):
    return m.tensor(np.asarray(a, dtype=np.float64), dtype=m.float64,
                    requires_grad=requires_grad)


def _np(t):
    return t.detach().numpy()


# the PyTorch tutorial's programs, written once for either module -----------------------
def legendre_fit(m, steps: int) -> list[float]:
    """pytorch/tutorials, polynomial_custom_function.py, for `steps` steps."""
    class LegendrePolynomial3(m.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return 0.5 * (5 * input ** 3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors
            return grad_output * 1.5 * (5 * input ** 2 - 1)

    dtype = m.float64
    x = m.linspace(-math.pi, math.pi, 2000, dtype=dtype)
    y = m.tensor(np.sin(np.linspace(-math.pi, math.pi, 2000)), dtype=dtype)  # (kiln: no sin)
    a = m.full((), 0.0, dtype=dtype, requires_grad=True)
    b = m.full((), -1.0, dtype=dtype, requires_grad=True)
    c = m.full((), 0.0, dtype=dtype, requires_grad=True)
    d = m.full((), 0.3, dtype=dtype, requires_grad=True)
    learning_rate = 5e-6
    losses = []
    for _ in range(steps):
        P3 = LegendrePolynomial3.apply
        y_pred = a + b * P3(c + d * x)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with m.no_grad():
            for p in (a, b, c, d):
                p -= learning_rate * p.grad
                p.grad = None
    return losses + [a.item(), b.item(), c.item(), d.item()]


def relu_net(m, seed: int):
    """pytorch/tutorials, two_layer_net_custom_function.py (MyReLU): one step's loss
    and gradients, from the same starting weights."""
    class MyReLU(m.autograd.Function):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return input.clamp(min=0)

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors
            grad_input = grad_output.clone()
            grad_input[input < 0] = 0
            return grad_input

    rng = np.random.default_rng(seed)
    x = _f64(m, rng.standard_normal((16, 10)), requires_grad=False)
    y = _f64(m, rng.standard_normal((16, 3)), requires_grad=False)
    w1 = _f64(m, rng.standard_normal((10, 20)))
    w2 = _f64(m, rng.standard_normal((20, 3)))
    y_pred = MyReLU.apply(x.mm(w1)).mm(w2)
    loss = (y_pred - y).pow(2).sum()
    loss.backward()
    return loss.item(), _np(w1.grad), _np(w2.grad)


def test_the_tutorial_legendre_polynomial_fit_matches_torch_step_for_step():
    ours, theirs = legendre_fit(eager, 30), legendre_fit(torch, 30)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-15)  # (a and c stay ~0)


def test_the_tutorial_relu_two_layer_net_matches_torch():
    for ours, theirs in zip(relu_net(eager, 0), relu_net(torch, 0)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-15)  # (a and c stay ~0)


# Functions from PyTorch's "Extending PyTorch" notes ------------------------------------
class Exp(Function):
    @staticmethod
    def forward(ctx, i, k=1.0):
        result = (i * k).exp()
        ctx.save_for_backward(result)
        ctx.k = k
        return result

    @staticmethod
    def backward(ctx, grad_output):
        result, = ctx.saved_tensors
        return grad_output * result * ctx.k, None


class LinearFunction(Function):
    """The notes' linear, in the setup_context form."""
    @staticmethod
    def forward(input, weight, bias=None):
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, weight, bias = inputs
        ctx.save_for_backward(input, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        ctx.seen_needs = ctx.needs_input_grad
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)
        return grad_input, grad_weight, grad_bias


class MyCube(Function):
    """The double-backward tutorial's cube: its backward uses a second output."""
    @staticmethod
    def forward(x):
        return x ** 3, 3 * x ** 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x, output[1])

    @staticmethod
    def backward(ctx, grad_output, grad_dx):
        x, dx = ctx.saved_tensors
        return grad_output * dx + grad_dx * 6 * x


def my_cube(x):
    return MyCube.apply(x)[0]


def test_exp_saving_its_output_passes_gradcheck_and_gradgradcheck():
    x = _f64(eager, [[0.3, -1.2, 0.7], [1.1, 0.0, -0.4]])
    assert gradcheck(lambda t: Exp.apply(t, 1.5), (x,))
    assert gradgradcheck(lambda t: Exp.apply(t, 1.5), (x,))
    np.testing.assert_allclose(_np(Exp.apply(x, 1.5)), np.exp(1.5 * _np(x)))


def test_the_node_is_the_ctx_and_is_named_after_the_class():
    x = _f64(eager, [0.5, 1.0])
    y = Exp.apply(x, 2.0)
    assert type(y.grad_fn).__name__ == "ExpBackward" and y.grad_fn.name() == "ExpBackward"
    assert y.grad_fn.k == 2.0  # set on ctx in forward
    (node, nr), = y.grad_fn.next_functions  # one edge: the non-tensor k has none
    assert type(node).__name__ == "AccumulateGrad" and node.variable is x and nr == 0
    assert y.grad_fn.needs_input_grad == (True, False)
    t = torch.tensor([0.5, 1.0], requires_grad=True)

    class TorchExp(torch.autograd.Function):
        forward, backward = Exp.forward, Exp.backward
    assert type(TorchExp.apply(t, 2.0).grad_fn).__name__ == "TorchExpBackward"


def test_linear_function_in_setup_context_form_matches_torch_linear():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(s) for s in ((4, 3), (5, 3), (5,))]
    ours = [_f64(eager, a) for a in arrays]
    theirs = [_f64(torch, a) for a in arrays]
    out = LinearFunction.apply(*ours)
    ref = torch.nn.functional.linear(*theirs)
    np.testing.assert_allclose(_np(out), _np(ref), rtol=1e-12)
    out.sum().backward()
    ref.sum().backward()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(_np(a.grad), _np(b.grad), rtol=1e-12)
    assert gradcheck(LinearFunction.apply, tuple(_f64(eager, a) for a in arrays))


def test_needs_input_grad_says_which_arguments_need_a_gradient():
    x, w = _f64(eager, np.ones((2, 3))), _f64(eager, np.ones((4, 3)))
    b = _f64(eager, np.ones(4), requires_grad=False)
    out = LinearFunction.apply(x, w, b)
    out.sum().backward()
    assert out.grad_fn.seen_needs == (True, True, False)
    assert b.grad is None and x.grad is not None
    out = LinearFunction.apply(x.detach(), w)  # bias: the default, filled in for ctx
    out.sum().backward()
    assert out.grad_fn.seen_needs == (False, True, False)


def test_non_tensor_arguments_pass_through_and_a_gradient_for_one_is_an_error():
    class MulConstant(Function):
        @staticmethod
        def forward(ctx, tensor, constant):
            ctx.constant = constant
            return tensor * constant

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.constant, None

    class Wrong(MulConstant):
        @staticmethod
        def backward(ctx, grad_output):
            return grad_output, grad_output

    x = _f64(eager, [1.0, 2.0])
    assert gradcheck(lambda t: MulConstant.apply(t, 3.5), (x,))
    with pytest.raises(RuntimeError, match="WrongBackward returned a gradient different than "
                                           "None at position 2, but the corresponding forward "
                                           "input was not a Variable"):
        Wrong.apply(x, 2.0).sum().backward()


def test_backward_returning_the_wrong_number_or_shape_of_gradients_is_an_error():
    class Fn(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

    class Few(Fn):
        @staticmethod
        def backward(ctx, g):
            return g

    class Many(Fn):
        @staticmethod
        def backward(ctx, g):
            return g, g, g

    class TrailingNone(Fn):
        @staticmethod
        def backward(ctx, g):
            return g, g, None

    class Shape(Fn):
        @staticmethod
        def backward(ctx, g):
            return g[:1], g

    a, b = _f64(eager, [1.0, 2.0]), _f64(eager, [3.0, 4.0])
    with pytest.raises(RuntimeError, match=r"function FewBackward returned an incorrect number "
                                           r"of gradients \(expected 2, got 1\)"):
        Few.apply(a, b).sum().backward()
    with pytest.raises(RuntimeError, match=r"expected 2, got 3"):
        Many.apply(a, b).sum().backward()
    TrailingNone.apply(a, b).sum().backward()
    assert a.grad.tolist() == [1.0, 1.0]
    with pytest.raises(RuntimeError, match=r"Function ShapeBackward returned an invalid gradient "
                                           r"at index 0 - got \[1\] but expected shape "
                                           r"compatible with \[2\]"):
        Shape.apply(a, b).sum().backward()


def test_a_saved_tensor_changed_in_place_fails_backward_and_saved_tensors_are_freed():
    class Square(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            a, = ctx.saved_tensors
            return 2 * a * g

    x = _f64(eager, [1.0, 2.0])
    z = x * 1
    out = Square.apply(z)
    z.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*is at version 1; "
                                           "expected version 0"):
        out.sum().backward()
    out = Square.apply(x)
    out.sum().backward(retain_graph=True)
    assert out.grad_fn.saved_tensors[0] is x
    out.sum().backward()
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        _ = out.grad_fn.saved_tensors


def test_mark_dirty_gives_the_changed_input_the_new_history():
    class Double_(Function):
        @staticmethod
        def forward(ctx, a):
            a.mul_(2)
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = _f64(eager, [1.0, 3.0])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in "
                                           "an in-place operation"):
        Double_.apply(x)  # (after forward doubled x, as in PyTorch)
    x = _f64(eager, [1.0, 3.0])
    z = x * 1
    out = Double_.apply(z)
    assert out is z and type(z.grad_fn).__name__ == "Double_Backward" and z._version == 1
    (z * z).sum().backward()
    assert x.grad.tolist() == [8.0, 24.0]  # d/dx (2x)^2


def test_an_input_returned_as_is_is_a_new_tensor_over_its_memory():
    class Same(Function):
        @staticmethod
        def forward(ctx, a):
            return a

        @staticmethod
        def backward(ctx, g):
            return 3 * g

    x = _f64(eager, [1.0, 2.0])
    y = Same.apply(x)
    assert y is not x and y.data_ptr() == x.data_ptr() and y._base is x
    y.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0] and x.grad_fn is None


def _sort_fn(m):
    """The notes' mark_non_differentiable example: sort, whose indices get no gradient."""
    class Sort(m.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            values, idx = x.sort()
            ctx.mark_non_differentiable(idx)
            ctx.save_for_backward(x, idx)
            return values, idx

        @staticmethod
        def backward(ctx, g1, g2):
            x, idx = ctx.saved_tensors
            ctx.g2 = g2
            return m.zeros_like(x).scatter(0, idx, g1)
    return Sort


def test_mark_non_differentiable_outputs_need_no_grad_and_backward_still_gets_zeros():
    a = [0.3, -1.0, 2.0, 0.5]
    results = {}
    for m in (eager, torch):
        x = _f64(m, a)
        values, idx = _sort_fn(m).apply(x)
        assert not idx.requires_grad and idx.grad_fn is None and values.requires_grad
        (values * m.tensor([1.0, 2.0, 3.0, 4.0], dtype=m.float64)).sum().backward()
        assert values.grad_fn.g2.tolist() == [0, 0, 0, 0]
        results[m] = _np(x.grad)
    np.testing.assert_array_equal(results[eager], results[torch])


def test_set_materialize_grads_false_gives_none_for_outputs_without_a_gradient():
    seen = {}

    class Two(Function):
        @staticmethod
        def forward(ctx, a, materialize):
            ctx.set_materialize_grads(materialize)
            return a * 2, a * 3

        @staticmethod
        def backward(ctx, g1, g2):
            seen[ctx.materialize_grads] = g2
            return g1 * 2, None

    x = _f64(eager, [1.0, 2.0])
    Two.apply(x, False)[0].sum().backward()
    Two.apply(x, True)[0].sum().backward()
    assert seen[False] is None and seen[True].tolist() == [0.0, 0.0]


def test_several_outputs_and_non_tensor_outputs_keep_their_places():
    class Mixed(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2, 3, a.argmax(), a * 5

        @staticmethod
        def backward(ctx, g1, g2, g3, g4):
            ctx.given = (g2, g3.dtype)
            return g1 * 2 + g4 * 5

    x = _f64(eager, [1.0, 2.0])
    out = Mixed.apply(x)
    assert out[1] == 3 and not out[2].requires_grad and out[0].output_nr == 0
    assert out[3].output_nr == 3 and out[3].grad_fn is out[0].grad_fn
    (out[0] + out[3]).sum().backward()
    assert x.grad.tolist() == [7.0, 7.0]
    assert out[0].grad_fn.given == (None, eager.int64)
    assert gradcheck(lambda t: Mixed.apply(t)[3] * Mixed.apply(t)[0], (x,))


def test_double_backward_through_a_differentiable_backward_matches_torch():
    x = _f64(eager, [0.5, -1.5, 2.0])
    assert gradcheck(my_cube, (x,)) and gradgradcheck(my_cube, (x,))

    class TorchCube(torch.autograd.Function):
        forward, setup_context, backward = MyCube.forward, MyCube.setup_context, MyCube.backward
    t = _f64(torch, [0.5, -1.5, 2.0])
    results = []
    for m, fn, v in ((eager, my_cube, x), (torch, lambda a: TorchCube.apply(a)[0], t)):
        g, = m.autograd.grad(fn(v).sum(), v, create_graph=True)
        gg, = m.autograd.grad((g * g).sum(), v)
        results.append((_np(g), _np(gg)))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def test_once_differentiable_backward_runs_without_grad_and_refuses_a_second_derivative():
    class Once(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a ** 2

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            a, = ctx.saved_tensors
            ctx.grad_mode = eager.is_grad_enabled()
            return 2 * a * g

    x = _f64(eager, [1.0, 2.0])
    y = Once.apply(x)
    g, = eager.autograd.grad(y.sum(), x, create_graph=True)
    assert y.grad_fn.grad_mode is False and not g.requires_grad  # the seed needs no grad
    seed = eager.ones((), dtype=eager.float64, requires_grad=True)
    g, = eager.autograd.grad(Once.apply(x).sum(), x, seed, create_graph=True)
    assert type(g.grad_fn).__name__ == "DelayedError" and g.tolist() == [2.0, 4.0]
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was "
                                           "marked with @once_differentiable"):
        g.sum().backward()


def test_without_grad_mode_or_inputs_needing_grad_no_node_is_recorded():
    x = _f64(eager, [1.0])
    with eager.no_grad():
        assert Exp.apply(x).grad_fn is None
    assert Exp.apply(x.detach()).grad_fn is None


def test_missing_forward_or_backward_raise_pytorch_errors_and_vjp_names_backward():
    class NoBackward(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

    class ByVjp(NoBackward):
        @staticmethod
        def vjp(ctx, g):
            return g * 2

    x = _f64(eager, [1.0])
    with pytest.raises(NotImplementedError, match="You must implement the forward function"):
        Function.apply(x)
    with pytest.raises(NotImplementedError, match="You must implement either the backward or "
                                                  "vjp method"):
        NoBackward.apply(x).sum().backward()
    ByVjp.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0]


def test_under_compile_a_function_is_a_named_graph_break_with_eager_results():
    def f(x, w):
        y = Exp.apply((x @ w).tanh() * 2, 0.5)
        return (y * 3 + 1).sum()

    rng = np.random.default_rng(2)
    x = _f64(eager, rng.standard_normal((4, 3)), requires_grad=False)
    w = _f64(eager, rng.standard_normal((3, 2)))
    expected = f(x, w)
    expected.backward()
    expected_grad, w.grad = w.grad, None
    compiled = eager.compile(f)
    for _ in range(2):
        out = compiled(x, w)
        out.backward()
        np.testing.assert_allclose(out.item(), expected.item(), rtol=1e-12)
        np.testing.assert_allclose(_np(w.grad), _np(expected_grad), rtol=1e-12)
        w.grad = None
    report = compiled.explain()
    assert "autograd.Function Exp runs eagerly at" in report
    assert "test_autograd_function.py" in report.split("autograd.Function Exp runs eagerly at")[1]
