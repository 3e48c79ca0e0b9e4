"""A Python number (or an operand of another type) beside 16-bit float tensors: PyTorch's
CPU ops cast every operand to the op's common type first, so bfloat16 x + 1.7 adds
1.703125 and x > 1.7 compares with 1.703125; mul and div read a number at float32
(records.Pointwise.wide_scalar). 1.7 / x is reciprocal then mul, and bfloat16 x ** 3
is x * x * x, each product rounded. Checked against a numpy model of that rule (float64,
rounded once), against PyTorch bit for bit where it is installed, and compiled against
eager."""
import numpy as np
import pytest

import compiler
import eager
from ir import dtypes

N = 1.7


def _values(n, seed=0, low=0.3, high=3.0):
    """n values, the first two 1.7 rounded to bfloat16 and to float16 (where a comparison
    with 1.7 tells the rules apart)."""
    x = np.random.default_rng(seed).uniform(low, high, n).astype(np.float32)
    x[:2] = [_round(N, dtypes.bfloat16)[()], _round(N, dtypes.float16)[()]]
    return x


def _round(a, dt):
    """numpy array a (any float type) rounded to 16-bit type dt, as float64."""
    return dtypes.cast(np.asarray(a, np.float64), dt).astype(np.float64)


# name: (kiln/torch function, numpy model over x in float64 and the number as the op
# reads it, whether the op reads the number rounded)
MODELLED = {
    "add": (lambda m, x: x + N, lambda x, n: x + n, True),
    "rsub": (lambda m, x: N - x, lambda x, n: n - x, True),
    "sub": (lambda m, x: x - N, lambda x, n: x - n, True),
    "remainder": (lambda m, x: x % N, lambda x, n: x - np.floor(x / n) * n, True),
    "fmod": (lambda m, x: m.fmod(x, N), np.fmod, True),
    "rpow": (lambda m, x: N ** x, lambda x, n: n ** x, True),
    "gt": (lambda m, x: x > N, lambda x, n: x > n, True),
    "eq": (lambda m, x: x == N, lambda x, n: x == n, True),
    "mul": (lambda m, x: x * N, lambda x, n: x * n, False),
    "div": (lambda m, x: x / N, lambda x, n: x / n, False),
}


@pytest.mark.parametrize("dt", dtypes.HALF, ids=str)
@pytest.mark.parametrize("size", [100, 3072])  # numpy's path, the generated kernels'
@pytest.mark.parametrize("name", list(MODELLED))
def test_a_python_number_rounds_to_the_16_bit_type_first_except_in_mul_and_div(
        name, size, dt):
    fn, model, rounded = MODELLED[name]
    x = eager.tensor(_values(size)).to(getattr(eager, dt.name))
    xs = x.float().numpy().astype(np.float64)
    number = _round(N, dt)[()] if rounded else float(np.float32(N))
    expected = model(xs, number)
    if expected.dtype != bool:
        expected = _round(expected, dt)
    got = fn(eager, x)
    got = got.numpy() if got.dtype is eager.bool else got.float().numpy()
    np.testing.assert_array_equal(got, expected)
    # and the other rule, the number read as float32, gives other values: the test can fail
    other = model(xs, float(np.float32(N)) if rounded else _round(N, dt)[()])
    if other.dtype != bool:
        other = _round(other, dt)
    assert (other != expected).any()


def test_an_int16_tensor_beside_bfloat16_is_rounded_first():
    i = eager.arange(250, 4346, dtype=eager.int16)
    ones = eager.ones(4096, dtype=eager.bfloat16)
    got = (i + ones).float().numpy()
    expected = _round(_round(np.arange(250, 4346), dtypes.bfloat16) + 1, dtypes.bfloat16)
    np.testing.assert_array_equal(got, expected)


def test_a_number_divided_by_a_tensor_is_its_reciprocal_times_the_number():
    x = eager.tensor(_values(64), requires_grad=True)
    y = N / x
    assert y.grad_fn.name() == "MulBackward0"
    reciprocal = (np.float32(1) / x.detach().numpy()).astype(np.float32)
    np.testing.assert_array_equal(y.detach().numpy(), reciprocal * np.float32(N))
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), -N / x.detach().numpy().astype(np.float64) ** 2,
                               rtol=1e-6)


@pytest.mark.parametrize("dt", ["bfloat16", "float32", "float64"])
@pytest.mark.parametrize("size", [100, 3072])
def test_a_cube_and_an_inverse_square_are_products_each_rounded(dt, size):
    x = eager.tensor(_values(size)).to(getattr(eager, dt))
    xs = x.to(eager.float64).numpy()
    if dt == "bfloat16":
        def r(a):
            return _round(a, dtypes.bfloat16)
    else:
        def r(a):
            return a.astype(np.dtype(dt)).astype(np.float64)
    square = r(xs * xs)
    np.testing.assert_array_equal((x ** 3).to(eager.float64).numpy(), r(square * xs))
    np.testing.assert_array_equal((x ** -2).to(eager.float64).numpy(), r(1 / square))


def test_float16_cube_rounds_once():
    x = eager.tensor(_values(3072)).half()
    xs = x.float().numpy().astype(np.float64)
    np.testing.assert_array_equal((x ** 3).float().numpy(), _round(xs ** 3, dtypes.float16))


CASES = {
    **{name: fn for name, (fn, _, _) in MODELLED.items()},
    "radd": lambda m, x: N + x, "rdiv": lambda m, x: N / x, "pow": lambda m, x: x ** N,
    "cube": lambda m, x: x ** 3, "inverse_square": lambda m, x: x ** -2,
    "rremainder": lambda m, x: N % x, "xlogy": lambda m, x: m.xlogy(x, N),
    "rxlogy": lambda m, x: m.xlogy(N, x), "le": lambda m, x: x <= N,
    "ne": lambda m, x: x != N, "add_": lambda m, x: x.clone().add_(N),
    "sub_": lambda m, x: x.clone().sub_(N), "mul_": lambda m, x: x.clone().mul_(N),
    "zero_dim": lambda m, x: x + m.tensor(N), "zero_dim_mul": lambda m, x: x * m.tensor(N),
    "zero_dim_first_mul": lambda m, x: m.mul(m.tensor(N), x),
    "rfloordiv": lambda m, x: N // x, "floordiv": lambda m, x: x // N,
    "exp_add": lambda m, x: m.exp(x) + N, "where": lambda m, x: m.where(x > 1, x, N),
    "clamp": lambda m, x: m.clamp(x, 0.7, N),
    "softshrink": lambda m, x: m.nn.functional.softshrink(x - 1.5, 0.37),
    "hardshrink": lambda m, x: m.nn.functional.hardshrink(x - 1.5, 0.37),
    "threshold": lambda m, x: m.nn.functional.threshold(x, 1.37, N),
}


def _numpy_of(t):
    return t.numpy() if str(t.dtype).endswith("bool") else t.float().numpy()


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", list(CASES))
def test_16_bit_ops_with_numbers_are_pytorchs_bit_for_bit(name, dt):
    torch = pytest.importorskip("torch")
    fn = CASES[name]
    for size in (100, 3072):
        x = _values(size, seed=size)
        expected = _numpy_of(fn(torch, torch.tensor(x).to(getattr(torch, dt))))
        got = _numpy_of(fn(eager, eager.tensor(x).to(getattr(eager, dt))))
        np.testing.assert_array_equal(got, expected, err_msg=f"{name} {dt} {size}")


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["add", "rsub", "remainder", "gt", "eq", "mul", "div",
                                  "rdiv", "cube", "inverse_square", "xlogy", "rfloordiv",
                                  "zero_dim", "exp_add"])
def test_compiled_16_bit_ops_with_numbers_give_eagers_values(name, dt):
    fn = CASES[name]
    x = eager.tensor(_values(3072, seed=5)).to(getattr(eager, dt))
    compiled = compiler.compile(lambda x: fn(eager, x))
    compiled(x)
    compiler.wait_for_kernels(60)
    np.testing.assert_array_equal(_numpy_of(compiled(x)), _numpy_of(fn(eager, x)))


def test_the_compiled_graph_holds_the_rounded_number():
    x = eager.tensor(_values(64)).bfloat16()
    lowered = compiler.lower(lambda x: x + N, x)
    text = str(lowered.optimized[0])
    assert "1.703125" in text and "1.7)" not in text, text
