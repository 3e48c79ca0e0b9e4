"""Eager CUDA elementwise kernels over float16, bfloat16, uint8, int8 and int16 against the
same ops on the CPU, bit for bit: the 16-bit floats compute in float32 and round once per
op, integers wrap at their width, casts convert as ir.dtypes.cast (NaN and inf into an
integer give 0, 200.7 into int8 -56). Over each dtype's special values (NaN of both signs,
infinities, -0.0, rounding ties, values past the range), unary, binary, compare and
where, numbers, alpha, casts between every pair, odd sizes, 0 elements, transposed,
sliced and broadcast inputs, in-place ops into views; integer division (sdiv and srem
with the floor correction). A NaN only needs to be a quiet NaN where the CPU has one: a
GPU's arithmetic gives its canonical NaN, whatever the inputs'.

The other kernels take these dtypes too (eager/backends/cuda/widened.py): reductions,
softmax, layer norm and products compute in float32 or int32 and round once, so they
equal the CPU's values, or are within an ulp where float32 sums in another order;
index ops and joins move the words. Over 7x23 grids with the dtype's special values
first, 0-sized dims, transposed and step-sliced inputs; bfloat16 gradients through
autograd. What PyTorch refuses CUDA refuses in PyTorch's words; what kiln's CUDA kernels
lack (integer products, ops that round each step in 16 bits) raises NotImplementedError
naming dtype and op. On a GPU where the driver finds one, else on the emulated device
(whose load_module has ptxas assemble every kernel run here)."""
import re

import numpy as np
import pytest

import eager
from eager.tensor import ops
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


# the kernels that reduce, multiply, index and join: the narrow dtypes widened on the device
COLS = 23
"""Odd rows, and no longer than a warp: a row kernel's block is then one warp, which the
emulator runs in a fifth of the time of the block that a longer row takes (widened, the
kernels are float32's and int32's, whose longer rows test_cuda_rows.py covers)."""


def _grid(dtype, rows=7, cols=COLS, seed=0, specials=True):
    """rows x cols of the dtype: its special values first (rows 0 and 1), random ones
    after; random ones only where not `specials` (a NaN gradient tells nothing)."""
    n = rows * cols
    values = special(dtype, extra=n, seed=seed)
    return eager.tensor((values[:n] if specials else values[-n:]).reshape(rows, cols))


def _within(dtype, ulps):
    """ulps for a float result (summed in float32 in another order), none for integers."""
    return ulps if dtype in HALVES else 0


def _each(got, want):
    return zip(got if isinstance(got, tuple) else (got,),
               want if isinstance(want, tuple) else (want,))


def both_of(fn, *tensors, ulps=0):
    """fn on CUDA equals fn on the CPU, every output of it."""
    want = fn(*tensors)
    got = fn(*(t.cuda() for t in tensors))
    for g, w in _each(got, want):
        assert g.is_cuda
        assert_same(g.cpu(), w, ulps)


REDUCTIONS = {  # name: (function, ulps of a 16-bit float result)
    # (rows 0 and 1 hold the specials: whether row 1's +-3.3e38 cancel in a sum depends on
    # its order, so sums skip that row)
    "sum-rows": (lambda x: x[::2].sum(1), 1),
    "sum-all-transposed": (lambda x: x[2:].t().sum(), 1),
    "sum-columns-of-a-step-slice": (lambda x: x[:, ::3].sum(0), 1),
    "sum-into-float16": (lambda x: x[2:].sum(0, dtype=eager.float16), 1),
    "sum-0-sized-dim": (lambda x: x[:, :0].sum(1), 0),
    "mean-into-bfloat16": (lambda x: x[2:].mean(1, dtype=eager.bfloat16), 1),
    "amax": (lambda x: x.amax(1), 0),
    "amin-transposed": (lambda x: x.t().amin(1), 0),
    "amax-0-sized-rows": (lambda x: x[:0].amax(1), 0),
    "argmax": (lambda x: x.argmax(1), 0),
    "argmin-flat": (lambda x: x[:, 1::2].argmin(), 0),
    "max-dim": (lambda x: eager.max(x, 0), 0),
    "min-dim-transposed": (lambda x: eager.min(x.t(), 1, keepdim=True), 0),
}
FLOAT_REDUCTIONS = {
    "mean": (lambda x: x[::2].mean(1), 1),
    "var": (lambda x: x[:, ::2].var(1), 1),
    "softmax": (lambda x: x.softmax(1), 1),
    # (CUDA keeps a row's sum and its log in float32, as PyTorch's CUDA kernel; the CPU
    # rounds them to the 16-bit type, as PyTorch's CPU kernel: CUDA is the CPU's float32
    # log_softmax rounded once)
    "log_softmax-transposed": (lambda x: x.t().log_softmax(1) if x.is_cuda else
                               x.t().float().log_softmax(1).to(x.dtype), 1),
    "softmax-0-sized": (lambda x: x[:0].softmax(1), 0),
    "softmax-of-float32-into-bfloat16": (lambda x: x.float().softmax(0, eager.bfloat16), 1),
}


@pytest.mark.parametrize("dtype", NARROW)
def test_reductions_equal_the_cpu(dtype):
    x = _grid(dtype)
    cases = {**REDUCTIONS, **(FLOAT_REDUCTIONS if dtype in HALVES else {})}
    for name, (fn, ulps) in cases.items():
        both_of(fn, x, ulps=_within(dtype, ulps))
    if dtype in INTEGERS:
        assert x.cuda().sum().dtype is eager.int64


def test_uint8_extrema_start_from_its_own_bounds():
    """Not int8's: amax of small values is not 128, amin of large ones not 127."""
    small, large = eager.tensor([1, 2, 3], dtype=eager.uint8), eager.tensor([200, 250],
                                                                           dtype=eager.uint8)
    assert small.cuda().amax().item() == 3 and large.cuda().amin().item() == 200
    assert eager.max(large.cuda(), 0)[0].item() == 250


@pytest.mark.parametrize("dtype", INTEGERS)
def test_what_pytorch_refuses_for_narrow_integers_cuda_refuses_in_its_words(dtype):
    x = _grid(dtype)
    for fn in (lambda t: t.softmax(1), lambda t: t.var(1), lambda t: t.mean(),
               lambda t: eager.nn.functional.layer_norm(t, (COLS,))):
        with pytest.raises((RuntimeError, NotImplementedError)) as on_cpu:
            fn(x)
        with pytest.raises(on_cpu.type, match=re.escape(str(on_cpu.value))):
            fn(x.cuda())


@pytest.mark.parametrize("dtype", HALVES)
def test_layer_norm_and_products_round_once_as_the_cpu(dtype):
    x, y = _grid(dtype, 6, seed=1, specials=False), _grid(dtype, 5, seed=2, specials=False)
    w, b = y[0], y[1]
    both_of(lambda x, w, b: ops.native_layer_norm(x, (COLS,), w, b, 1e-5), x, w, b, ulps=1)
    both_of(lambda x: ops.native_layer_norm(x.t(), (6,), None, None, 1e-5), x, ulps=1)
    both_of(lambda x, y: x @ y.t(), x, y, ulps=1)                        # a transposed operand
    both_of(lambda x, y: x[:, ::2] @ y[:, ::2].t(), x, y, ulps=1)        # copied contiguous
    both_of(lambda x, y: eager.bmm(x[None], y.t()[None]), x, y, ulps=1)
    both_of(lambda x, y: eager.addmm(y[0, :5], x, y.t(), beta=0.5, alpha=2), x, y, ulps=1)
    both_of(lambda x, y: eager.mv(x, y[2]), x, y, ulps=1)
    both_of(lambda x, y: eager.dot(x[3], y[4]), x, y, ulps=1)
    both_of(lambda x, y: x[:, :0] @ y[:, :0].t(), x, y)                  # k = 0: zeros
    both_of(lambda x, y: x[:0] @ y.t(), x, y)                            # no rows


@pytest.mark.parametrize("dtype", INTEGERS)
def test_integer_dot_wraps_and_integer_products_refuse_naming_dtype_and_op(dtype):
    x = _grid(dtype)
    both_of(lambda x: eager.dot(x[1], x[2]), x)
    with pytest.raises(NotImplementedError, match=rf"'aten::mm' with arguments from the "
                       rf"'CUDA' backend: kiln's CUDA GEMM is float32 or float64 .*not {dtype}"):
        x.cuda() @ x.cuda().t()


def _indexed(fn, x, *indices, ulps=0):
    """fn(x, *indices) on CUDA (the indices moved with x) equals it on the CPU."""
    want = fn(x, *indices)
    got = fn(x.cuda(), *(i.cuda() for i in indices))
    assert_same(got.cpu(), want, ulps)


@pytest.mark.parametrize("dtype", NARROW)
def test_index_ops_move_and_add_as_the_cpu(dtype):
    x = _grid(dtype)
    rows, cols = eager.tensor([4, -1, 0, 2]), eager.tensor([COLS - 1, 0, 5])
    take = eager.tensor(np.random.default_rng(4).integers(0, COLS, (7, 5)))
    put = eager.tensor([[6, 0, 2], [1, 3, 5]])
    _indexed(lambda t, i: t[i], x, rows)
    _indexed(lambda t, i: t.t()[:, i], x, rows)                        # a transposed input
    _indexed(lambda t, i: t[:, ::2][i], x, rows[:0])                   # no indices
    _indexed(lambda t, i: eager.index_put(t, (i,), t[:4]), x, rows)
    _indexed(lambda t, i: eager.index_put(t, (i,), t[:4], True), x, rows)  # adds, no repeat
    _indexed(lambda t, i: t.clone().t().index_put_((i,), t[0, :7]), x, cols)  # into a view
    _indexed(lambda t, i: eager.gather(t, 1, i), x, take)
    _indexed(lambda t, i: eager.scatter(t, 1, i, t[4:, 10:]), x, put)
    _indexed(lambda t, i: eager.scatter_add(t, 1, i, t[4:, 10:]), x, put)
    _indexed(lambda t, i: eager.index_select(t.t(), 1, i), x, rows.abs())
    _indexed(lambda t, i: eager.index_add(t, 1, i, t[:, 20:23], alpha=2), x, cols)
    _indexed(lambda t, i: eager.nn.functional.embedding(i, t), x, put)


@pytest.mark.parametrize("dtype", NARROW)
def test_repeated_indices_add_in_the_compute_type_and_round_once(dtype):
    """A 16-bit float adds in float32 and rounds once (as the CPU's scatter_add and its
    index_add along dim 0 do, PyTorch's; the CPU's index_put rounds each add, as PyTorch's
    CPU kernel: an ulp or two apart); an integer wraps, which is the CPU's result in any
    order."""
    x, repeated = _grid(dtype, specials=False), eager.tensor([[2, 2, 0, 2], [5, 0, 0, 1]])
    wide = eager.float32 if dtype in HALVES else eager.int32
    for fn in (lambda t, i: eager.scatter_add(t, 0, i, t[:2, :4]),
               lambda t, i: eager.index_add(t, 0, i[0], t[:4]),
               lambda t, i: eager.index_put(t, (i[1],), t[:4], True)):
        got = fn(x.cuda(), repeated.cuda())
        assert_same(got.cpu(), fn(x.to(wide), repeated).to(x.dtype))


@pytest.mark.parametrize("dtype", NARROW)
def test_joins_equal_the_cpu(dtype):
    x = _grid(dtype)
    both_of(lambda x: eager.cat([x, x.t()[:5].t(), x[:, ::3]], 1), x)
    both_of(lambda x: eager.cat([x[:0], x[1:3]]), x)
    both_of(lambda x: eager.cat([x, x.to(eager.int8)]), x)            # promotes
    both_of(lambda x: ops.select_backward(x[:, ::2], [7, 5, 12], 1, 3), x)
    both_of(lambda x: ops.slice_backward(x.t(), [30, 7], 0, 1, 24, 1), x)


def _gradients(device, fn, *tensors):
    leaves = [t.detach().to(device).requires_grad_() for t in tensors]
    out = fn(*leaves)
    weights = eager.tensor(np.random.default_rng(5).standard_normal(tuple(out.shape)),
                           dtype=out.dtype).to(device)
    (out * weights).sum().backward()
    return [t.grad for t in leaves]


GRADIENTS = {  # bfloat16 through autograd on CUDA
    "softmax": (lambda x, y: x.softmax(1) + y.log_softmax(1)),
    "layer_norm": (lambda x, y: eager.nn.functional.layer_norm(x, (COLS,), y[0], y[1])),
    "mm": (lambda x, y: x @ y.t()),
    "index": (lambda x, y: x[eager.tensor([2, 0, 2], device=x.device)] * y[:3]),
}


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradients_in_bfloat16_equal_the_cpu(name):
    x, y = (_grid("bfloat16", 5, seed=seed, specials=False) for seed in (1, 2))
    want = _gradients("cpu", GRADIENTS[name], x, y)
    got = _gradients("cuda", GRADIENTS[name], x, y)
    for g, w in zip(got, want):
        assert g.is_cuda and g.dtype is eager.bfloat16
        assert_same(g.cpu(), w, 1)


@pytest.mark.parametrize("dtype", INTEGERS + ("int32",))
def test_integer_division_floors_and_wraps_as_the_cpu(dtype):
    """Integers divide as integers (sdiv, srem; never frem), floor_divide one less where
    the signs differ; the minimum over -1 wraps to itself."""
    info = np.iinfo(dtype)
    a = np.concatenate([[info.min, info.max, 0, 7, 7, -7, info.min],
                        np.random.default_rng(6).integers(info.min, info.max, 30)])
    b = np.concatenate([[-1, 2, 3, -2, 2, 2, 1],
                        np.random.default_rng(7).integers(info.min, info.max, 30)])
    b[b == 0] = 5  # (a zero divisor: the CPU raises, CUDA gives an unspecified value)
    x, y = eager.tensor(a.astype(dtype)), eager.tensor(b.astype(dtype))
    for fn in (eager.floor_divide, eager.remainder, eager.fmod,
               lambda p, q: eager.div(p, q, rounding_mode="trunc")):
        both(fn, x, y)


REFUSED = {  # (function, the op in the error)
    "floor_divide": (lambda x: eager.floor_divide(x, x), "floor_divide"),
    "div-floor": (lambda x: eager.div(x, x, rounding_mode="floor"), "div"),
}


@pytest.mark.parametrize("name", REFUSED)
@pytest.mark.parametrize("dtype", HALVES)
def test_ops_that_round_each_step_in_16_bits_refuse_naming_dtype_and_op(name, dtype):
    fn, op = REFUSED[name]
    x = eager.tensor(special(dtype)).cuda()
    with pytest.raises(NotImplementedError, match=rf"'aten::{op}' with arguments from the "
                       rf"'CUDA' backend: kiln's CUDA kernels have no {dtype} code"):
        fn(x)
