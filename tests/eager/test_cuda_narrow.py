"""Eager CUDA elementwise kernels over float16, bfloat16, uint8, int8 and int16 against the
same ops on the CPU, bit for bit: the 16-bit floats compute in float32 and round once per
op, integers wrap at their width, casts convert as ir.dtypes.cast (NaN and inf into an
integer give 0, 200.7 into int8 -56). Over each dtype's special values (NaN of both signs,
infinities, -0.0, rounding ties, values past the range), unary, binary, compare and
where, numbers, alpha, casts between every pair, odd sizes, 0 elements, transposed,
sliced and broadcast inputs, in-place ops into views. A NaN only needs to be a quiet NaN
where the CPU has one: a GPU's arithmetic gives its canonical NaN, whatever the inputs'.
Reductions and other non-elementwise kernels refuse these dtypes, naming dtype and op.
On a GPU where the driver finds one, else on the emulated device (whose load_module has
ptxas assemble every kernel run here)."""
import numpy as np
import pytest

import eager
import test_cuda_tensors
from runtime.cuda import nvptx
from tests.eager.native.narrow_cases import HALVES, INTEGERS, NARROW, assert_same, bits, special

gpu = test_cuda_tensors.gpu  # the autouse fixture: a GPU, else an emulated device
WIDE = ("float32", "float64", "int32", "int64", "bool")


def _pair(dtype, extra=10):
    a = eager.tensor(special(dtype, extra=extra))
    b = eager.tensor(special(dtype, extra=extra, seed=1)[::-1].copy())
    return a, b


def both(fn, *tensors, ulps=0):
    """fn on CUDA equals fn on the CPU (within `ulps` units of a float result)."""
    want = fn(*tensors)
    got = fn(*(t.cuda() for t in tensors))
    assert got.is_cuda
    assert_same(got.cpu(), want, ulps)


UNARY = {  # name: (function, dtypes, ulps)
    "neg": (lambda x: -x, NARROW, 0),
    "abs": (lambda x: x.abs(), NARROW, 0),
    "relu": (lambda x: x.relu(), NARROW, 0),
    "sign": (lambda x: x.sign(), NARROW, 0),
    "square": (lambda x: x * x, NARROW, 0),
    "bitwise_not": (lambda x: ~x, INTEGERS, 0),
    "floor": (lambda x: x.floor(), HALVES, 0),
    "ceil": (lambda x: x.ceil(), HALVES, 0),
    "round": (lambda x: x.round(), HALVES, 0),
    "trunc": (lambda x: x.trunc(), HALVES, 0),
    "sqrt": (lambda x: x.sqrt(), HALVES, 0),
    "reciprocal": (lambda x: x.reciprocal(), HALVES, 0),
    "exp": (lambda x: x.exp(), HALVES, 1),  # float math: vmath against numpy's libm
    "tanh": (lambda x: x.tanh(), HALVES, 1),
    "sigmoid": (lambda x: x.sigmoid(), HALVES, 1),
}


@pytest.mark.parametrize("name, dtype", [(n, d) for n, c in UNARY.items() for d in c[1]],
                         ids=str)
def test_unary_ops_equal_the_cpu_bit_for_bit(name, dtype):
    fn, _, ulps = UNARY[name]
    both(fn, _pair(dtype)[0], ulps=ulps)


BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "maximum": lambda x, y: eager.maximum(x, y),
    "minimum": lambda x, y: eager.minimum(x, y),
    "add-alpha": lambda x, y: eager.add(x, y, alpha=3),
    "sub-alpha": lambda x, y: eager.sub(x, y, alpha=2),
    "numbers": lambda x, y: x * 3 + 1 - y * 2,
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "ge": lambda x, y: x >= y,
    "compare-number": lambda x, y: x > 2,
    "where": lambda x, y: eager.where(x > y, x, y),
    "where-number": lambda x, y: eager.where(x >= y, 7, y),
}


@pytest.mark.parametrize("name, dtype", [(n, d) for n in BINARY for d in NARROW], ids=str)
def test_binary_compare_and_where_equal_the_cpu_bit_for_bit(name, dtype):
    both(BINARY[name], *_pair(dtype))


HALF_ONLY = {
    "add-alpha-rounds": lambda x, y: eager.add(x, y, alpha=0.3),  # alpha is 0.30078125
    "float-number": lambda x, y: x * 0.1 + y,    # 0.1 as float32, not rounded to x's type
    "float-number-compare": lambda x, y: eager.where(x >= 0.1, y, 0.3),
    "sigmoid-chain": lambda x, y: (x.sigmoid() * y).relu() - x,
    "mixed-with-float32": lambda x, y: x * y.float(),
}


@pytest.mark.parametrize("name, dtype", [(n, d) for n in HALF_ONLY for d in HALVES], ids=str)
def test_16_bit_floats_take_numbers_and_alpha_as_the_cpu(name, dtype):
    both(HALF_ONLY[name], *_pair(dtype), ulps=1 if name == "sigmoid-chain" else 0)


def test_narrow_integers_wrap_around_and_promote_as_the_cpu():
    a = eager.tensor(np.array([127, -128, 100, -1, 0, 55], np.int8))
    b = eager.tensor(np.array([1, 254, 100, 200, 0, 255], np.uint8))
    for fn in (lambda x, y: x + x, lambda x, y: x * 3, lambda x, y: y + y, lambda x, y: y - 7,
               lambda x, y: x + y, lambda x, y: -y, lambda x, y: x.abs()):
        both(fn, a, b)
    assert (a.cuda() + b.cuda()).dtype is eager.int16  # uint8 and int8 meet at int16


@pytest.mark.parametrize("src", NARROW + WIDE)
def test_casts_between_every_pair_equal_the_cpu(src):
    if src in NARROW:
        x = eager.tensor(special(src, extra=6))
    else:
        values = [0.0, -0.0, 1.5, -2.5, 200.7, -129.6, 65519.0, 65520.0, 3.4e38, 1e10,
                  2.0 ** -25, 2.0 ** -24 * 1.5, np.nan, -np.inf, np.inf, 33000.0, -33000.5]
        with np.errstate(invalid="ignore", over="ignore"):
            x = eager.tensor(np.array(values).astype(src))
    targets = NARROW if src not in NARROW else NARROW + WIDE
    for dst in targets:
        dt, y = getattr(eager, dst), x
        if dst in ("int32", "int64") and x.dtype.is_floating_point:
            # NaN, inf and numbers past the range are undefined there (a GPU's cvt gives 0
            # or saturates, x86 the minimum); the narrow integers' casts define them
            y = x[eager.tensor(np.abs(x.float().numpy()) < 2.0 ** 31)]
        assert_same(y.cuda().to(dt).cpu(), y.to(dt))


@pytest.mark.parametrize("dtype", NARROW)
def test_round_trips_keep_every_bit(dtype):
    """.cuda() and .cpu() copy bytes: signalling NaNs and payloads too."""
    words = np.array([0x7C01, 0xFC01, 0x7FBF, 0xFF80, 0x8000, 0x0001, 0x7E00, 0xFFFF], np.uint16)
    a = words.view(np.float16 if dtype == "float16" else special("bfloat16").dtype) \
        if dtype in HALVES else special(dtype)
    x = eager.tensor(a)
    back = x.cuda().cpu()
    assert back.dtype is x.dtype
    np.testing.assert_array_equal(bits(back.numpy()), bits(a))
    np.testing.assert_array_equal(bits(x.cuda().clone().cpu().numpy()), bits(a))


@pytest.mark.parametrize("dtype", NARROW)
def test_odd_sizes_views_and_broadcasts_equal_the_cpu(dtype):
    rng = np.random.default_rng(3)
    grid = eager.tensor(special(dtype, extra=150)[:7 * 23].reshape(7, 23))
    row = eager.tensor(special(dtype, extra=20, seed=2)[:23])
    flat = eager.tensor(rng.permutation(special(dtype, extra=40))[:37])
    both(lambda g, r: g * r - g, grid, row)                 # broadcast rows
    both(lambda g: g.t() + g.t(), grid)                     # transposed
    both(lambda g: g[1::2, ::3] - g[:3, 1:16:2], grid)      # sliced
    both(lambda g, r: eager.maximum(g[:, :1], r), grid, row)  # broadcast columns
    both(lambda f: f * f + f, flat)                         # 37: a vector tail
    both(lambda f: f[1:] + f[:-1], flat)                    # not 16-byte aligned
    both(lambda f: f[:0] + 1, flat)                         # no elements
    both(lambda g: g.t().to(eager.float32) + 1, grid)       # a cast from a view


@pytest.mark.parametrize("dtype", NARROW)
def test_in_place_ops_and_copies_into_views_equal_the_cpu(dtype):
    a, b = _pair(dtype)

    def in_place(x, y):
        x = x.clone()
        x.add_(y)
        x[1::2] = y[:-1:2]
        x.mul_(2)
        return x
    both(in_place, a, b)

    def copy_across(x):
        out = eager.zeros(x.numel(), 2, dtype=eager.float32, device=x.device)
        out[:, 1].copy_(x)
        out.t()[0].fill_(-1.5)
        return out.to(x.dtype)
    both(copy_across, a)


def test_every_kernel_run_here_assembles(gpu):
    if gpu is None or nvptx.ptxas_path() is None:
        pytest.skip("a GPU's driver, or no ptxas: the emulated device assembles nothing")
    before = gpu.assembled
    x = eager.tensor(special("bfloat16")).cuda()
    (x.to(eager.float16) * 3 - x.to(eager.int8)).cpu()
    assert gpu.assembled > before


REFUSED = {  # kernels other than elementwise ones: (function, the op in the error)
    "sum": (lambda x: x.sum(), "sum"),
    "amax": (lambda x: x.amax(0), "amax"),
    "softmax": (lambda x: x.softmax(0), "softmax"),
    "cat": (lambda x: eager.cat([x, x]), "cat"),
    "floor_divide": (lambda x: eager.floor_divide(x, x), "floor_divide"),
}


@pytest.mark.parametrize("name", REFUSED)
@pytest.mark.parametrize("dtype", HALVES)
def test_reductions_and_other_kernels_refuse_naming_dtype_and_op(name, dtype):
    fn, op = REFUSED[name]
    x = eager.tensor(special(dtype)).cuda()
    with pytest.raises(NotImplementedError, match=rf"'aten::{op}' with arguments from the "
                       rf"'CUDA' backend: kiln's CUDA kernels have no {dtype} code"):
        fn(x)
