"""float_power (pow in float64, a composite as PyTorch's) and heaviside (an op record):
values against PyTorch and numpy float64, errors as PyTorch's, float_power's gradient by
finite differences."""
import numpy as np
import pytest

import eager
from eager.testing import assert_close

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


@pytest.mark.parametrize("dtype", ["float32", "int64", "float64"])
def test_float_power_of_tensors_and_numbers_is_pytorchs_in_float64(dtype):
    rng = np.random.default_rng(0)
    base = (rng.random((3, 4)) * 3 + 0.1).astype(dtype) if dtype != "int64" else \
        rng.integers(1, 5, (3, 4))
    exponent = rng.standard_normal(4).astype("float32")
    for ours, theirs in (
            (eager.float_power(eager.tensor(base), eager.tensor(exponent)),
             torch.float_power(torch.tensor(base), torch.tensor(exponent))),
            (eager.tensor(base).float_power(2.5), torch.tensor(base).float_power(2.5)),
            (eager.float_power(2, eager.tensor(exponent)),
             torch.float_power(2, torch.tensor(exponent)))):
        assert ours.dtype is eager.float64 and theirs.dtype is torch.float64
        # (within an ulp: numpy's float64 power, which eager's kernel runs, is its SIMD
        # one on AVX-512 machines, an ulp from C's pow that PyTorch calls at some inputs)
        np.testing.assert_array_max_ulp(ours.numpy(), theirs.numpy(), maxulp=1)


def test_float_power_errors_are_pytorchs():
    with pytest.raises(RuntimeError, match="the base given to float_power_ has dtype Float"):
        eager.ones(2).float_power_(2)
    x = eager.full((2,), 3.0, dtype=eager.float64)
    assert x.float_power_(2).tolist() == [9.0, 9.0]
    with pytest.raises(TypeError, match="float_power"):
        eager.float_power(2, 3)


def test_float_power_gradient_by_finite_differences():
    x = eager.tensor([0.5, 1.5, 2.0], dtype=eager.float64, requires_grad=True)
    e = eager.tensor([1.5, -0.5, 2.0], dtype=eager.float64, requires_grad=True)
    assert eager.autograd.gradcheck(eager.float_power, (x, e))


def test_heaviside_values_and_errors_are_pytorchs():
    x = np.array([-2.0, -0.0, 0.0, 3.0, np.nan, np.inf, -np.inf], np.float32)
    v = np.array([0.5, 0.25, 0.75, 0.5, 0.5, 0.5, 0.5], np.float32)
    ours = eager.heaviside(eager.tensor(x), eager.tensor(v))
    theirs = torch.heaviside(torch.tensor(x), torch.tensor(v))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    compiled = eager.compile(lambda a, b: eager.heaviside(a * 1, b))(eager.tensor(x),
                                                                      eager.tensor(v))
    np.testing.assert_array_equal(compiled.numpy(), theirs.numpy())
    ints = eager.heaviside(eager.tensor([-3, 0, 4]), eager.tensor([7, 7, 7]))
    assert ints.tolist() == [0, 7, 1] and ints.dtype is eager.int64
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for tensors "
                                           "with different dtypes"):
        eager.heaviside(eager.ones(2), eager.ones(2, dtype=eager.float64))
    y = eager.tensor([-1.0, 0.0, 2.0])
    y.heaviside_(eager.tensor([9.0]))
    assert_close(y, eager.tensor([0.0, 9.0, 1.0]))


def test_heaviside_backward_is_not_implemented_as_in_pytorch():
    x = eager.tensor([-1.0, 2.0], requires_grad=True)
    out = eager.heaviside(x, eager.tensor([0.5, 0.5]))
    with pytest.raises(RuntimeError, match="the derivative for 'heaviside' is not implemented"):
        out.sum().backward()
