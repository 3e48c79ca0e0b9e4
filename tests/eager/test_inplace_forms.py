"""In-place forms of the pointwise ops (exp_, relu_, eq_, nan_to_num_ ...: records declared
with their twins, ir/records.py `declare(inplace=...)`) and of composite ops (square_,
clamp_min_ ...: eager/written_back.py), and nan_to_num as an op record: values, node
names and gradients against PyTorch, PyTorch's refusals, and compiled regions that take
them as their out-of-place twins."""
import numpy as np
import pytest

import compiler
import eager
from ir.ops import Op
from ir.records import RECORDS, declaring_modules

torch = pytest.importorskip("torch", reason="PyTorch (the compare extra) is the reference")

RECORD_FORMS = ["exp_", "log_", "sqrt_", "rsqrt_", "relu_", "tanh_", "sigmoid_", "erf_",
                "expm1_", "log1p_", "neg_", "negative_", "abs_", "absolute_", "sign_",
                "nan_to_num_"]
COMPOSITE_FORMS = [("square_", ()), ("reciprocal_", ()), ("log2_", ()), ("log10_", ()),
                   ("clamp_min_", (1.2,)), ("clamp_max_", (1.2,)), ("clip_", (0.8, 1.5)),
                   ("cumsum_", (0,)), ("cumprod_", (0,)), ("lerp_", ("tensor", 0.25))]
COMPARISONS = ["eq_", "ne_", "lt_", "le_", "gt_", "ge_"]
VALUES = np.array([0.7, 1.3, 2.0, 0.5, 1.7], np.float32)


def _pair(values=VALUES, requires_grad=False):
    return (eager.tensor(values, requires_grad=requires_grad),
            torch.tensor(values, requires_grad=requires_grad))


def _args(args, lib):
    return [lib.tensor(VALUES[::-1].copy()) if a == "tensor" else a for a in args]


@pytest.mark.parametrize("name", RECORD_FORMS)
def test_a_records_inplace_form_writes_self_with_pytorchs_values_node_and_gradient(name):
    signed = np.array([-1.5, 0.3, 2.0, -0.0, 0.7], np.float32)
    ours, theirs = _pair(signed)
    assert getattr(ours, name)() is ours
    getattr(theirs, name)()
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, equal_nan=True)
    (leaf, y), (tleaf, ty) = ((x, x * 1) for x in _pair(requires_grad=True))
    getattr(y, name)()
    getattr(ty, name)()
    assert type(y.grad_fn).__name__ == type(ty.grad_fn).__name__
    (y * y).sum().backward()  # (reads the written value: saved results stay valid)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), tleaf.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("name", RECORD_FORMS + [n for n, _ in COMPOSITE_FORMS])
def test_the_function_form_exists_where_pytorchs_does(name):
    if hasattr(torch, name):
        args = dict(COMPOSITE_FORMS).get(name, ())
        x, t = _pair()
        assert getattr(eager, name)(x, *args) is x
        getattr(torch, name)(t, *args)
        np.testing.assert_allclose(x.numpy(), t.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", COMPARISONS)
@pytest.mark.parametrize("other", ["number", "tensor"])
def test_an_inplace_comparison_writes_ones_and_zeros_with_zero_gradients(name, other):
    (leaf, y), (tleaf, ty) = ((x, x * 1) for x in _pair(requires_grad=True))
    getattr(y, name)(1.3 if other == "number" else eager.tensor(VALUES[::-1].copy()))
    getattr(ty, name)(1.3 if other == "number" else torch.tensor(VALUES[::-1].copy()))
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    assert type(y.grad_fn).__name__ == type(ty.grad_fn).__name__  # EqBackward0 / 1
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), tleaf.grad.numpy())


@pytest.mark.parametrize("name,args", COMPOSITE_FORMS)
def test_a_composites_inplace_form_writes_self_with_pytorchs_values_and_gradient(name, args):
    ours, theirs = _pair()
    assert getattr(ours, name)(*_args(args, eager)) is ours
    getattr(theirs, name)(*_args(args, torch))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    (leaf, y), (tleaf, ty) = ((x, x * 1) for x in _pair(requires_grad=True))
    getattr(y, name)(*_args(args, eager))
    getattr(ty, name)(*_args(args, torch))
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), tleaf.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("name", ["exp_", "sqrt_", "sigmoid_", "reciprocal_", "log2_"])
def test_a_float_result_into_an_integer_tensor_is_refused_as_pytorch_refuses_it(name):
    with pytest.raises(RuntimeError) as theirs:
        getattr(torch.tensor([1, 2]), name)()
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long") as ours:
        getattr(eager.tensor([1, 2]), name)()
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("given", [{}, {"nan": 1.5, "posinf": 1e39, "neginf": -5.0},
                                   {"posinf": 2.0}])
def test_nan_to_num_is_pytorchs_in_eager_and_in_native_code(dtype, given):
    x = np.array([np.nan, np.inf, -np.inf, 1.0, -0.0, 3e38, -1e-40] * 3, dtype)
    theirs = torch.nan_to_num(torch.tensor(x), **given).numpy()
    ours = eager.nan_to_num(eager.tensor(x), **given).numpy()
    compiled = compiler.compile(lambda v: eager.nan_to_num(v * 1, **given), backend="native")
    native = compiled(eager.tensor(x)).numpy()
    for got in (ours, native):
        assert got.dtype == theirs.dtype
        np.testing.assert_array_equal(got, theirs)  # (-0.0 kept: tested by the bits below)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(theirs))
    lowered = compiler.lower(compiled, eager.tensor(x))
    assert not lowered.interpreted  # every node is in a generated kernel
    assert all(n.op in (Op.FUSED, Op.SCALAR) for g in lowered.optimized for n in g.nodes)


def test_nan_to_num_leaves_integers_and_bools_as_they_are_in_a_new_tensor():
    for values in ([3, -7, 0], [True, False]):
        x = eager.tensor(values)
        out = eager.nan_to_num(x, nan=2.0)
        assert out.dtype == x.dtype and out.tolist() == values
        out[0] = out[1]
        assert x.tolist() == values  # a copy, not x itself


@pytest.mark.parametrize("name", ["floor", "ceil", "round", "trunc", "fix", "nan_to_num"])
def test_a_pointwise_op_that_keeps_integers_gives_a_new_tensor_never_its_input(name):
    x = eager.tensor([3, -7, 0])
    out = getattr(eager, name)(x)
    out[0] = 9
    assert x.tolist() == [3, -7, 0]


def test_nan_to_num_has_pytorchs_gradient_zero_where_the_input_is_not_finite():
    x = np.array([np.nan, np.inf, -np.inf, 2.0], np.float32)
    ours, theirs = (lib.tensor(x, requires_grad=True) for lib in (eager, torch))
    eager.nan_to_num(ours).sum().backward()
    torch.nan_to_num(theirs).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
    assert eager.nan_to_num(ours).grad_fn.name() == "NanToNumBackward0"


def test_inplace_forms_in_a_compiled_region_are_their_twins_without_a_graph_break():
    def step(x, y):
        z = x * 2
        z.eq_(y)  # a bool result written into a float: cast as eager writes it
        w = x * 1
        w.exp_().nan_to_num_(posinf=3.0).relu_()
        return z + w
    compiled = compiler.compile(step, backend="native")
    x, y = eager.tensor(VALUES), eager.tensor(VALUES * 2 - 0.7)
    for _ in range(3):  # capture, then replays
        np.testing.assert_allclose(compiled(x, y).numpy(), step(x, y).numpy(), rtol=1e-6)
    (entry,) = compiled.entries.values()
    assert not entry.breaks


def test_declaring_an_inplace_form_records_both_in_the_callers_module():
    assert RECORDS[Op.EXP_].inplace_of is Op.EXP
    assert RECORDS[Op.NEG_].aliases == ("negative_",)
    assert RECORDS[Op.EXP_].function == "exp_" and RECORDS[Op.SIGN_].function is None
    assert "eager.kernels.unary" in declaring_modules()
    assert "ir.records" not in declaring_modules()
