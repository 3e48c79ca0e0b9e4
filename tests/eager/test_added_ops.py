"""logit, prod, var_mean / std_mean, addcmul / addcdiv against PyTorch: what the op
tables (op_table.py, test_gradcheck.py) do not say: 16-bit results bit for bit, PyTorch's
node names, gradients at zeros and outside logit's domain, and PyTorch's errors."""
from __future__ import annotations

import numpy as np
import pytest

import eager
from torch_parity import require_torch, torch_to_numpy

RNG = np.random.default_rng(7)


def _pair(torch, a, dtype="float32", requires_grad=False):
    x = eager.tensor(a).to(getattr(eager, dtype)).detach().requires_grad_(requires_grad)
    t = torch.tensor(a).to(getattr(torch, dtype)).detach().requires_grad_(requires_grad)
    return x, t


def _same_bits(ours, theirs, what):
    np.testing.assert_array_equal(ours.detach().numpy(), torch_to_numpy(theirs), err_msg=what)


# logit ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("eps", [None, 0.1])
def test_16_bit_logit_rounds_each_step_bit_for_bit_as_pytorch(dtype, eps):
    torch = require_torch()
    x, t = _pair(torch, RNG.random(4099), dtype)
    _same_bits(eager.logit(x, eps), torch.logit(t, eps), f"{dtype} eps={eps}")


@pytest.mark.parametrize("n", [100, 4099])  # numpy's kernel, then the generated one
def test_float32_logit_is_pytorchs_within_a_unit(n):
    torch = require_torch()
    x, t = _pair(torch, RNG.random(n))
    np.testing.assert_allclose(eager.logit(x, 0.05).numpy(), torch.logit(t, 0.05).numpy(),
                               rtol=3e-7, atol=3e-7)


@pytest.mark.parametrize("eps", [None, 0.25])
def test_logit_gradient_is_nan_or_zero_outside_as_pytorchs(eps):
    torch = require_torch()
    a = np.array([-0.5, 0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.5])
    x, t = _pair(torch, a, "float64", requires_grad=True)
    y, ty = eager.logit(x, eps), torch.logit(t, eps)
    assert type(y.grad_fn).__name__ == type(ty.grad_fn).__name__ == "LogitBackward0"
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    y.backward(eager.ones(9, dtype=eager.float64))
    ty.backward(torch.ones(9, dtype=torch.float64))
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


def test_logit_of_integers_is_float32_and_its_other_names_are_the_same_op():
    y = eager.logit(eager.tensor([0, 1, 2]))
    assert y.dtype is eager.float32 and y.tolist()[:2] == [-float("inf"), float("inf")]
    x = eager.tensor([0.2, 0.9])
    for other in (eager.special.logit(x), x.logit(), x.clone().logit_(),
                  eager.logit_(x.clone())):
        assert other.tolist() == eager.logit(x).tolist()


# addcmul, addcdiv ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [100, 4099])
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_and_addcdiv_are_pytorchs_bit_for_bit(name, n, dtype):
    """addcmul's last product and sum are one FMA in PyTorch's float32 (the 16-bit floats
    compute in float32, rounded once): numpy's kernel and the generated one make it."""
    torch = require_torch()
    (s, ts), (a, ta), (b, tb) = (_pair(torch, RNG.standard_normal(n), dtype) for _ in range(3))
    _same_bits(getattr(eager, name)(s, a, b, value=0.3),
               getattr(torch, name)(ts, ta, tb, value=0.3), f"{name} {dtype} {n}")


def test_optimiser_steps_in_place_are_pytorchs():
    """Adam's second moment and step, as user code writes them."""
    torch = require_torch()
    (v, tv), (g, tg), (p, tp) = (_pair(torch, RNG.standard_normal((7, 13)))
                                 for _ in range(3))
    for lib, (v_, g_, p_) in ((eager, (v, g, p)), (torch, (tv, tg, tp))):
        v_.mul_(0.999).addcmul_(g_, g_, value=0.001)
        p_.addcdiv_(g_, v_.sqrt().add_(1e-8), value=-0.01)
    _same_bits(v, tv, "exp_avg_sq")
    _same_bits(p, tp, "param")


def test_addcmul_and_addcdiv_gradients_are_pytorchs_through_broadcasts():
    torch = require_torch()
    shapes = [(4,), (3, 4), (3, 1)]
    arrays = [RNG.standard_normal(s) + 2.0 for s in shapes]
    for name, node in (("addcmul", "AddcmulBackward0"), ("addcdiv", "AddcdivBackward0")):
        ours = [_pair(torch, a, "float64", True) for a in arrays]
        y = getattr(eager, name)(*(o[0] for o in ours), value=-1.5)
        ty = getattr(torch, name)(*(o[1] for o in ours), value=-1.5)
        assert type(y.grad_fn).__name__ == node
        y.sum().backward()
        ty.sum().backward()
        for x, t in ours:
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


def test_addcdiv_of_integers_and_addcmul_of_bools_raise_pytorchs_errors():
    i, f = eager.tensor([1, 2]), eager.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer "
                                           "supported"):
        eager.addcdiv(f, i, i)
    assert eager.addcdiv(i, f, i).dtype is eager.float32  # one float divisor operand
    with pytest.raises(NotImplementedError, match="\"addcmul_cpu_out\" not implemented for "
                                                  "'Bool'"):
        eager.addcmul(*[eager.tensor([True])] * 3)
    with pytest.raises(RuntimeError, match="value cannot be converted to type int8_t"):
        eager.addcmul(*[eager.tensor([1], dtype=eager.int8)] * 3, value=1000)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        i.clone().addcmul_(f, f)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        f.clone().addcmul_(eager.ones(2, 2), f)
    with pytest.raises(TypeError):
        eager.addcmul(f, f, 2.0)  # tensors only, as PyTorch
    assert eager.addcmul(i, i, i, value=0.5).tolist() == [1, 2]  # value truncates: 0


# prod ----------------------------------------------------------------------------------
@pytest.mark.parametrize("zeros", [[], [5], [2, 9]], ids=["none", "one", "two"])
def test_prod_gradients_with_zeros_are_pytorchs(zeros):
    torch = require_torch()
    a = RNG.uniform(0.5, 1.5, (3, 4))
    a.reshape(-1)[zeros] = 0.0
    x, t = _pair(torch, a, "float64", requires_grad=True)
    for dims, node in (((), "ProdBackward0"), ((1,), "ProdBackward1"),
                       ((0, True), "ProdBackward1")):
        y, ty = x.prod(*dims), t.prod(*dims)
        assert type(y.grad_fn).__name__ == type(ty.grad_fn).__name__ == node
        w = RNG.standard_normal(tuple(ty.shape))
        (gx,) = eager.autograd.grad(y, x, eager.tensor(w), create_graph=True)
        (gt,) = torch.autograd.grad(ty, t, torch.tensor(w), create_graph=True)
        np.testing.assert_allclose(gx.detach().numpy(), gt.detach().numpy(), rtol=1e-12,
                                   atol=1e-15, err_msg=f"{zeros} {dims}")
        (ggx,) = eager.autograd.grad(gx.sum(), x)  # differentiable again, at zeros too
        (ggt,) = torch.autograd.grad(gt.sum(), t)
        np.testing.assert_allclose(ggx.numpy(), ggt.numpy(), rtol=1e-12, atol=1e-15)


def test_prod_of_integers_and_bools_is_int64_and_of_nothing_is_one():
    assert eager.prod(eager.tensor([3, 4], dtype=eager.int8)).dtype is eager.int64
    assert eager.prod(eager.tensor([True, False]), 0).tolist() == 0
    assert eager.tensor([2, 3], dtype=eager.uint8).prod(dtype=eager.int32).dtype is eager.int32
    assert eager.zeros(0, 3).prod(0).tolist() == [1.0, 1.0, 1.0]
    assert eager.tensor([2 ** 40, 2 ** 40]).prod().tolist() == 0  # wraps as int64 does


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_prod_rounds_each_product_as_pytorch(dtype):
    torch = require_torch()
    x, t = _pair(torch, RNG.uniform(0.5, 1.5, (64, 37)), dtype)
    _same_bits(x.prod(1), t.prod(1), "rows")
    _same_bits(x.prod(0, keepdim=True), t.prod(0, keepdim=True), "columns")
    _same_bits(x[:2, :5].prod(), t[:2, :5].prod(), "all of a strided view")


def test_prod_refuses_what_pytorch_refuses():
    x = eager.ones(2, 3)
    with pytest.raises(TypeError, match="prod\\(\\) received an invalid combination"):
        eager.prod(x, keepdim=True)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.prod(2)


# var_mean, std_mean --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_gradients_flow_through_both_outputs_as_pytorchs(name):
    torch = require_torch()
    x, t = _pair(torch, RNG.standard_normal((3, 5)), "float64", requires_grad=True)
    node = "VarMeanBackward0" if name == "var_mean" else "StdMeanBackward0"
    (s, m), (ts, tm) = getattr(eager, name)(x, 1), getattr(torch, name)(t, 1)
    assert type(s.grad_fn).__name__ == type(m.grad_fn).__name__ == node
    assert s.grad_fn is m.grad_fn and (s.output_nr, m.output_nr) == (0, 1)
    w, v = RNG.standard_normal(3), RNG.standard_normal(3)
    (s * eager.tensor(w) + m * eager.tensor(v)).sum().backward()
    (ts * torch.tensor(w) + tm * torch.tensor(v)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)
    x.grad = None
    m2 = getattr(eager, name)(x, 0, keepdim=True)[1]  # the mean alone
    m2.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((3, 5), 1 / 3))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_var_mean_and_std_mean_round_once_as_pytorch(dtype):
    torch = require_torch()
    x, t = _pair(torch, RNG.uniform(0.5, 1.5, (64, 37)), dtype)
    for name in ("var_mean", "std_mean"):
        for ours, theirs in zip(getattr(eager, name)(x, 1), getattr(torch, name)(t, 1)):
            _same_bits(ours, theirs, f"{name} {dtype}")


def test_var_mean_takes_pytorchs_spellings_and_refuses_integers():
    torch = require_torch()
    a = RNG.standard_normal((4, 3))
    x, t = _pair(torch, a)
    for call in (lambda m, x: m.var_mean(x, False), lambda m, x: m.var_mean(x, 0, False, True),
                 lambda m, x: m.std_mean(x, dim=[0, 1], correction=2),
                 lambda m, x: m.std_mean(x, unbiased=False)):
        for ours, theirs in zip(call(eager, x), call(torch, t)):
            np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-7)
    with pytest.raises(RuntimeError, match="var_mean only support floating point"):
        eager.var_mean(eager.tensor([1, 2]))


def test_a_compiled_function_gives_eagers_values():
    def f(x, y):
        v, m = eager.var_mean(x, 1)
        return eager.addcmul(m, v, y.logit(0.01)) + x.prod(1)
    x, y = eager.tensor(RNG.random((5, 7)), dtype=eager.float32), eager.rand(5)
    np.testing.assert_allclose(eager.compile(f)(x, y).numpy(), f(x, y).numpy(), rtol=1e-6)
