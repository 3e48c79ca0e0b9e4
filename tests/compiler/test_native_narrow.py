"""Compiled elementwise graphs in bfloat16, float16, uint8, int8 and int16 run as generated
kernels (every node fused, none interpreted) and give eager's numpy kernels' values bit
for bit: a 16-bit float rounds after every op inside a fused kernel, where eager rounds
(exp(x) * 2 rounds exp's result first), integers wrap, and casts convert as
ir.dtypes.cast (200.7 -> int8 -56, NaN -> 0, int16 2049 -> float16 2048); over special
values, odd, empty, transposed, sliced, broadcast sizes and a size run on threads."""
import numpy as np
import pytest

import compiler
import eager
from eager.tensor import ops as tensor_ops
from ir.ops import Op
from tests.eager.native.narrow_cases import (HALVES, INTEGERS, NARROW, assert_same,
                                             numpy_kernels, special)


def _compiled_natively(fn, *args):
    """fn compiled on the native backend, its result, after checking that every node of
    every graph ran as generated code."""
    compiled = compiler.compile(fn, backend="native")
    got = compiled(*args)
    lowered = compiler.lower(compiled, *args)
    interpreted = [str(n) for g in lowered.optimized for n in g.nodes
                   if n.op not in (Op.FUSED, Op.SCALAR) and not n.op.schema.is_view]
    assert not interpreted and not lowered.interpreted, (interpreted, lowered.interpreted)
    assert lowered.kernels or got.numel() == 0  # (an empty result needs no kernel)
    return got


def check(fn, *args, ulps=0):
    with numpy_kernels():
        want = fn(*args)
    assert_same(_compiled_natively(fn, *args), want, ulps)


CHAINS = {  # name: (function of two tensors of one dtype, dtypes, ulps)
    "arithmetic": (lambda x, y: (x + y) * x - y, NARROW, 0),
    "numbers": (lambda x, y: (x * 3 + 1) - y * 2, NARROW, 0),
    "max_abs_neg": (lambda x, y: eager.maximum(-x, y).abs() + eager.minimum(x, y), NARROW, 0),
    "compare_where": (lambda x, y: eager.where(x > y, x - y, y * x), NARROW, 0),
    "relu_sign": (lambda x, y: x.relu() * y.sign() + x, NARROW, 0),
    "bitwise": (lambda x, y: (x & y) ^ (x + y), INTEGERS, 0),
    "rounding": (lambda x, y: (x * 0.3).floor() + (y / 3).round(), HALVES, 0),
    "divide": (lambda x, y: x / y + x, NARROW, 0),
    "alpha": (lambda x, y: eager.sub(x, y, alpha=3) * 2, NARROW, 0),
    "alpha_rounds": (lambda x, y: eager.add(x, y, alpha=0.3), HALVES, 0),  # 0.30078125
    "number_compare": (lambda x, y: eager.where(x > 2, x, 3) + (y <= 1), NARROW, 0),
    "float_number_compare": (lambda x, y: eager.where(x >= 0.1, y, 0.3), HALVES, 0),
    "exp_then_double": (lambda x, y: x.exp() * 2 - y, HALVES, 1),
    "sigmoid_chain": (lambda x, y: x.sigmoid() * y + x.tanh(), HALVES, 1),
}


@pytest.mark.parametrize("name, dtype", [(n, d) for n, c in CHAINS.items() for d in c[1]],
                         ids=str)
def test_fused_chains_round_where_eager_does(name, dtype):
    fn, _, ulps = CHAINS[name]
    a = special(dtype, extra=30)
    b = special(dtype, extra=30, seed=1)[::-1].copy()
    check(fn, eager.tensor(a), eager.tensor(b), ulps=ulps)
    check(fn, eager.tensor(a[:, None]), eager.tensor(b[None, :]), ulps=ulps)  # broadcast


def test_a_bfloat16_product_rounds_before_the_next_op():
    """(x * y) + z with every value exact in bfloat16: the product 1 + 2**-7 + 2**-14 rounds
    to 1 + 2**-7 before z = 2**-14 is added (one float32 FMA would keep the bit)."""
    x = eager.tensor([1 + 2 ** -7], dtype=eager.bfloat16)
    y = eager.tensor([1 + 2 ** -7], dtype=eager.bfloat16)
    z = eager.tensor([-(2 ** -7)], dtype=eager.bfloat16)
    fn = lambda x, y, z: x * y + z  # noqa: E731
    check(fn, x, y, z)
    assert _compiled_natively(fn, x, y, z).item() == 1 + 2 ** -7


CAST_SOURCES = ("float32", "float64", "bfloat16", "float16", "int16", "int8", "uint8",
                "int32", "int64", "bool")
_CAST_VALUES = [0.0, -0.0, 0.5, -0.5, 1.9, -1.9, 127.9, 128.5, -128.7, 200.7, -200.7, 255.5,
                256.0, 300.2, 2049.0, 2051.0, 32767.9, 32768.5, -40000.0, 65504.0, 70000.0,
                1e10, -1e10, 3e9, np.nan, -np.nan, np.inf, -np.inf, 1 + 2.0 ** -8,
                1 + 3 * 2.0 ** -8, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 16777217.0]


def _cast_source(dtype: str) -> eager.Tensor:
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype in NARROW:
            return eager.tensor(special(dtype, extra=20))
        values = np.array(_CAST_VALUES, np.float64)
        if dtype == "bool":
            return eager.tensor(np.arange(20) % 3 == 0)
        if dtype.startswith("int"):
            return eager.tensor(np.nan_to_num(values).clip(-2e9, 2e9).astype(dtype))
        return eager.tensor(values.astype(dtype))


@pytest.mark.parametrize("target", NARROW + ("float32", "float64", "int32", "bool"))
@pytest.mark.parametrize("source", CAST_SOURCES)
def test_casts_convert_as_dtypes_cast(source, target):
    if source == target or (source not in NARROW and target not in NARROW):
        pytest.skip("not a narrow type's cast")
    x = _cast_source(source)
    dt = getattr(eager, target)
    check(lambda x: x.to(dt), x)
    if source != "bool" and target != "bool":
        check(lambda x: (x * 1).to(dt) + 1, x)  # a cast between two ops of one kernel


LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")
SHAPES = [(0,), (1,), (7,), (2, 0, 3), (13, 17), (4, 1, 33), (70001,)]


def _layout(a: np.ndarray, layout: str) -> eager.Tensor:
    if layout == "transposed" and a.ndim >= 2:
        return eager.tensor(np.ascontiguousarray(a.swapaxes(-1, -2))).transpose(-1, -2)
    if layout == "sliced" and a.ndim:
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        return eager.tensor(wide)[..., ::2]
    if layout == "expanded" and a.ndim and a.shape[-1]:
        return eager.tensor(a[..., :1]).expand(a.shape)
    return eager.tensor(a)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", NARROW)
def test_odd_empty_strided_and_threaded_layouts(dtype, shape, layout):
    """Masked tails never read or write past an operand (a 16-bit or 8-bit element's
    masked load), and every layout's values are numpy's."""
    n = int(np.prod(shape))
    a = np.resize(special(dtype, extra=50), n).reshape(shape)
    b = np.resize(special(dtype, extra=50, seed=2)[::-1], n).reshape(shape)
    x, y = _layout(a, layout), eager.tensor(b)
    check(lambda x, y: eager.where(x < y, x * y, x - y) + 1, x, y)


ROW_KERNELS = {
    "sum_last": lambda x: (x.float() * 2).sum(-1),
    "amax_first": lambda x: x.float().amax(0),  # rows in the lanes (column mode)
    "softmax": lambda x: eager.softmax(x.double(), -1),
}


@pytest.mark.parametrize("name", sorted(ROW_KERNELS))
@pytest.mark.parametrize("dtype", NARROW)
def test_row_kernels_read_narrow_operands(dtype, name):
    """A reduction kernel over a wide float reads the narrow operand through the same
    loads (a reduction over 16-bit floats is widened to one: below)."""
    a = np.resize(special(dtype, extra=60), 13 * 29).reshape(13, 29)
    if dtype in HALVES:
        a = np.nan_to_num(a.astype(np.float32), posinf=7, neginf=-7).astype(a.dtype)
    with numpy_kernels(), np.errstate(invalid="ignore"):  # (inf - inf in a sum)
        want = ROW_KERNELS[name](eager.tensor(a))
    got = _compiled_natively(ROW_KERNELS[name], eager.tensor(a))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-3)


HALF_ROWS = {  # name: (function of x (13, 29), w (29,), b (29,)), ulps
    "sum": (lambda x, w, b: (x * 2).sum(-1), 1),
    "sum_columns": (lambda x, w, b: x.sum(0) + 1, 1),
    "mean_all": (lambda x, w, b: x.mean(), 1),
    "amax_amin": (lambda x, w, b: x.amax(-1) - x.amin(0).sum(), 1),
    "argmax": (lambda x, w, b: x.argmax(-1) - x.argmin(1), 0),
    "softmax": (lambda x, w, b: eager.softmax(x * 2, -1), 1),
    "log_softmax_columns": (lambda x, w, b: eager.log_softmax(x, 0), 1),
    "var": (lambda x, w, b: x.var(-1), 1),
    "layer_norm": (lambda x, w, b: eager.nn.functional.layer_norm(x, (29,), w, b), 1),
    "softmax_backward": (lambda x, w, b: tensor_ops._softmax_backward_data(
        x, eager.softmax(x, -1), -1, x.dtype), 1),
}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("name", HALF_ROWS)
def test_half_reductions_and_row_ops_compute_in_float32_registers(dtype, name):
    """A reduction or row op over 16-bit floats runs as a native row kernel: its operands
    widened to float32 in registers, the op computed (decomposed) in float32, its result
    rounded once, as eager (and PyTorch) compute it: within a 16-bit ulp of eager's numpy
    kernels (a float32 sum in another order, rounded), and no node interpreted."""
    fn, ulps = HALF_ROWS[name]
    rng = np.random.default_rng(7)
    x, w, b = (eager.tensor(rng.standard_normal(shape).astype(np.float32) * 3).to(
        getattr(eager, dtype)) for shape in ((13, 29), (29,), (29,)))
    with numpy_kernels():
        want = fn(x, w, b)
    assert_same(_compiled_natively(fn, x, w, b), want, ulps)


def test_a_bfloat16_quotient_by_a_rows_value_rounds_to_nearest():
    """x / (a value per row) in a row kernel is x times the row's reciprocal, and a
    bfloat16 quotient is rounded to nearest there as everywhere (it was stored unrounded,
    and bfloat16's store drops the low bits: half of the quotients were a unit below
    eager's; float16's store rounds): F.normalize's x / norm. Eager divides; the
    reciprocal's own rounding may move a quotient across a rounding boundary, which these
    values never meet."""
    rng = np.random.default_rng(3)
    x = eager.tensor(rng.standard_normal((64, 64)).astype(np.float32) * 3).bfloat16()
    for fn in (lambda x: x / x.sum(-1, keepdim=True),
               lambda x: eager.nn.functional.normalize(x, dim=-1)):
        with numpy_kernels():
            want = fn(x)
        assert_same(_compiled_natively(fn, x), want, 0)


PRODUCTS = {  # name: (function of x (m, k), w (n, k), bias (n,)), bmm?
    "mm": (lambda x, w, bias: x @ w.t(), False),
    "linear_relu_scale": (lambda x, w, bias: (x @ w.t() + bias).relu() * 2, False),
    "prologue": (lambda x, w, bias: (x * 0.3) @ (w - 1).t(), False),
    "bmm_gelu": (lambda x, w, bias: eager.nn.functional.gelu(
        eager.bmm(x.reshape(2, -1, x.shape[1]), w.t().expand(2, *w.t().shape))), True),
}


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("name", PRODUCTS)
@pytest.mark.parametrize("m,k,n", [(128, 96, 64), (6, 5, 3)])
def test_half_products_run_on_kiln_gemm_and_round_as_eager(dtype, name, m, k, n):
    """A product of 16-bit operands is a gemm kernel (kiln's GEMM, widening or vdpbf16ps:
    runtime/cpu/gemm), its result rounded by the GEMM's store, then each epilogue op
    rounded as eager rounds it: bit for bit where eager's product runs on kiln's GEMM too
    (eager's GEMM_MACS and over), within a 16-bit ulp where eager's runs on numpy's (a
    float32 sum in another order, rounded)."""
    fn, batched = PRODUCTS[name]
    rng = np.random.default_rng(m + k + n)
    x, w, bias = (eager.tensor(rng.standard_normal(shape).astype(np.float32)).to(
        getattr(eager, dtype)) for shape in ((m, k), (n, k), (n,)))
    with numpy_kernels():
        want = fn(x, w, bias)
    compiled = compiler.compile(fn, backend="native")
    got = compiled(x, w, bias)
    lowered = compiler.lower(compiled, x, w, bias)
    kinds = [n.attr["kind"] for g in lowered.optimized for n in g.nodes if n.op is Op.FUSED]
    assert "gemm" in kinds and not lowered.interpreted, (kinds, lowered.interpreted)
    from eager.kernels.linalg import GEMM_MACS
    assert_same(got, want, ulps=0 if m * k * n >= GEMM_MACS // 2 else 1)


@pytest.mark.parametrize("dtype", HALVES)
def test_a_compiled_half_training_step_gives_eagers_gradients(dtype):
    """A model in a 16-bit float (linear, layer norm, gelu, log_softmax) trained one step
    compiled: forward and backward run as native kernels, and the loss and every
    gradient are eager's within two 16-bit units (gelu's backward computes erf and exp
    in float32 as vmath's or numpy's, a float32 unit apart at times: at a 16-bit tie one
    float16 unit, which layer norm's backward and the first product spread to two; on an
    AVX2 target the float32 loss's exp differs from libm's in its last bit). Layer norm's backward
    computes in float32 and rounds each gradient once, as its kernel does: rounding after
    each op put gradients hundreds of units off."""
    nn, F = eager.nn, eager.nn.functional
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(),
                          nn.Linear(64, 10)).to(getattr(eager, dtype))
    x, y = eager.randn(16, 32).to(getattr(eager, dtype)), eager.randint(0, 10, (16,))

    def step(x, y):
        loss = F.cross_entropy(eager.log_softmax(model(x), -1).float(), y)
        loss.backward()
        return loss

    def gradients(fn):
        for p in model.parameters():
            p.grad = None
        return [fn(x, y).detach()] + [p.grad for p in model.parameters()]

    with numpy_kernels():
        want = gradients(step)
    compiled = compiler.compile(step, backend="native")
    gradients(compiled)
    got = gradients(compiled)
    lowered = compiler.lower(compiled, x, y)
    interpreted = [str(n) for g in lowered.optimized for n in g.nodes
                   if n.op not in (Op.FUSED, Op.SCALAR) and not n.op.schema.is_view]
    assert not interpreted, interpreted
    for g, w in zip(got, want):
        assert_same(g, w, ulps=2)


@pytest.mark.parametrize("dtype", HALVES)
def test_a_half_addmm_is_not_widened_and_rounds_once_as_eager(dtype):
    """linear's addmm over 16-bit floats stays one node (kiln's GEMM takes the 16-bit
    operands, vdpbf16ps where the CPU has it, and rounds once after the bias), not
    float32 copies of its operands multiplied in float32."""
    rng = np.random.default_rng(3)
    x, w, b = (eager.tensor(rng.standard_normal(s).astype(np.float32)).to(getattr(eager, dtype))
               for s in ((128, 96), (64, 96), (64,)))
    fn = lambda x, w, b: eager.nn.functional.linear(x, w, b).relu()  # noqa: E731
    with numpy_kernels():
        want = fn(x, w, b)
    compiled = compiler.compile(fn, backend="native")
    assert_same(compiled(x, w, b), want, ulps=1)
    lowered = compiler.lower(compiled, x, w, b)
    nodes = [n for g in lowered.optimized for n in g.nodes]
    bodies = [m for n in nodes if n.op is Op.FUSED for m in n.attr["body"].nodes]
    (addmm,) = [n for n in nodes if n.op is Op.ADDMM]
    assert all(v.type.dtype.name == dtype for v in addmm.input_values())
    assert not any(n.op is Op.TO_COPY for n in nodes + bodies)
