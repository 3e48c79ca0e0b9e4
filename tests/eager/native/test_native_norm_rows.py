"""Eager native_layer_norm (forward, and backward: grad_input over rows, grad_weight and
grad_bias over columns) and _softmax_backward_data / _log_softmax_backward_data of
float32 and float64 from NATIVE_ELEMENTS elements on run as generated row kernels
(eager/backends/native/rows.py run_graph): values against numpy float64 and
PyTorch, which kernel ran, the cases numpy keeps (KILN_EAGER_NATIVE=0, a kernel still
compiling, small tensors), gradcheck through the kernels, and the compiled path's one
fused kernel."""
import numpy as np
import pytest

import eager
from eager.backends.native import rows as eager_rows
from eager.autograd import gradcheck
from eager.kernels import reduction
from eager.tensor import ops
from ir.ops import Op
from runtime.llvm.jit import KernelPending

F = eager.nn.functional
# (input shape, normalized_shape): rows of 1, 3, 255 and 1025 elements, one and two dims
SHAPES = [((2000, 1), (1,)), ((700, 3), (3,)), ((9, 255), (255,)), ((3, 1025), (1025,)),
          ((6, 5, 51), (5, 51)), ((2, 3, 4, 129), (4, 129))]
TOLERANCE = {np.float32: (2e-4, 2e-5), np.float64: (1e-10, 1e-12)}


@pytest.fixture
def ran(monkeypatch):
    """The names of the row graphs that ran as kernels (None returned: not counted)."""
    names = []
    original = eager_rows.run_graph

    def spy(name, *args):
        out = original(name, *args)
        if out is not None:
            names.append(name if isinstance(name, (str, Op)) else name[0])
        return out
    monkeypatch.setattr(reduction.native_rows(), "run_graph", spy)
    return names


def _layout(a: np.ndarray, layout: str):
    if layout == "transposed":  # stored with the dims reversed, then permuted back
        return eager.tensor(np.ascontiguousarray(a.T)).permute(*reversed(range(a.ndim)))
    if layout == "sliced":  # every other row of a buffer twice as tall
        wide = np.zeros((2 * a.shape[0],) + a.shape[1:], a.dtype)
        wide[::2] = a
        return eager.tensor(wide)[::2]
    return eager.tensor(a)


def _reference(x, shape, w, b, g, eps=1e-5):
    """(out, grad_input, grad_weight, grad_bias) in float64."""
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    batch = tuple(range(x.ndim - len(shape)))
    mean = x.mean(dims, keepdims=True)
    rstd = 1 / np.sqrt(x.var(dims, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    out = xhat * (1 if w is None else w) + (0 if b is None else b)
    gw = g * (1 if w is None else w)
    gi = rstd * (gw - gw.mean(dims, keepdims=True) - xhat * (gw * xhat).mean(dims, keepdims=True))
    return out, gi, (g * xhat).sum(batch), g.sum(batch)


def _close(got, want, dtype, scale=1.0):
    """Within the dtype's tolerance; `scale`: how much the op magnifies its inputs'
    rounding (a row of one element has rstd 1/sqrt(eps), and float32's fused multiply-add
    leaves its rounding in g * w - mean(g * w), exactly 0 in float64)."""
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol,
                               atol=atol * max(1, np.abs(want).max(), scale))


@pytest.mark.parametrize("affine", ["none", "weight", "both"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape, normalized", SHAPES, ids=str)
def test_layer_norm_forward_and_backward_match_numpy_float64(shape, normalized, dtype, layout,
                                                             affine, ran):
    rng = np.random.default_rng(sum(shape))
    a, g = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    wa, ba = (rng.standard_normal(normalized).astype(dtype) for _ in range(2))
    wa, ba = (None, None) if affine == "none" else (wa, None if affine == "weight" else ba)
    x = _layout(a, layout).requires_grad_()
    w = None if wa is None else eager.tensor(wa, requires_grad=True)
    b = None if ba is None else eager.tensor(ba, requires_grad=True)
    y = F.layer_norm(x, normalized, w, b)
    y.backward(eager.tensor(g))
    out, gi, gw, gb = _reference(a.astype(np.float64), normalized,
                                 *(None if v is None else v.astype(np.float64)
                                   for v in (wa, ba, g)))
    _close(y.detach(), out, dtype)
    _close(x.grad, gi, dtype, scale=1 / np.sqrt(1e-5) if normalized == (1,) else 1.0)
    if w is not None:
        _close(w.grad, gw, dtype)
    if b is not None:
        _close(b.grad, gb, dtype)
    if layout == "transposed" and len(normalized) > 1:  # the normalised dims do not
        assert "layer_norm" not in ran and "layer_norm_backward" not in ran  # merge: numpy
        return
    assert "layer_norm" in ran and "layer_norm_backward" in ran
    batch_merges = layout != "sliced" or len(shape) - len(normalized) == 1
    assert ("layer_norm_parameters" in ran) == (w is not None and batch_merges)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_norm_and_softmax_backward_match_torch(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a, g = rng.standard_normal((4, 8, 257)), rng.standard_normal((4, 8, 257))
    wa, ba = rng.standard_normal(257), rng.standard_normal(257)
    mine = [eager.tensor(v, dtype=getattr(eager, dtype), requires_grad=True) for v in (a, wa, ba)]
    theirs = [torch.tensor(v, dtype=getattr(torch, dtype), requires_grad=True)
              for v in (a, wa, ba)]
    for lib, (x, w, b) in ((eager, mine), (torch, theirs)):
        h = lib.nn.functional.layer_norm(x, (257,), w, b)
        out = lib.softmax(h, -1) * lib.log_softmax(h * 0.5, 1).exp()
        out.backward(lib.tensor(g, dtype=h.dtype))
    rtol = 1e-4 if dtype == "float32" else 1e-9
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=rtol)


def test_layer_norm_of_an_empty_batch_and_small_rows_stay_with_numpy(ran):
    x = eager.randn(0, 300, requires_grad=True)
    w = eager.ones(300, requires_grad=True)
    y = F.layer_norm(x, (300,), w)
    assert y.shape == (0, 300)
    y.sum().backward()
    assert x.grad.shape == (0, 300) and (w.grad.numpy() == 0).all()
    F.layer_norm(eager.randn(4, 8), (8,))  # 32 elements: numpy
    assert ran == []


def test_layer_norm_errors_are_pytorchs():
    x = eager.randn(2, 3, 4)
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[5\], expected input with "
                                           r"shape \[\*, 5\], but got input of size\[2, 3, 4\]"):
        F.layer_norm(x, (5,))
    with pytest.raises(RuntimeError, match=r"Expected weight to be of same shape as "
                                           r"normalized_shape, but got weight of shape \[3\] and "
                                           r"normalized_shape = \[4\]"):
        F.layer_norm(x, (4,), eager.ones(3))
    with pytest.raises(RuntimeError, match=r"Expected bias to be of same shape"):
        F.layer_norm(x, (4,), eager.ones(4), eager.ones(2))
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):
        F.layer_norm(x, ())


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [-1, 0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_softmax_backward_runs_native_and_matches_numpy(log, dim, dtype, ran):
    rng = np.random.default_rng(7)
    a, g = rng.standard_normal((33, 40, 3)).astype(dtype), rng.standard_normal((33, 40, 3))
    x = eager.tensor(a, requires_grad=True)
    y = F.log_softmax(x, dim) if log else F.softmax(x, dim)
    assert y.grad_fn.name() == ("LogSoftmaxBackward0" if log else "SoftmaxBackward0")
    y.backward(eager.tensor(g.astype(dtype)))
    z = a.astype(np.float64)
    s = np.exp(z - z.max(dim, keepdims=True))
    s /= s.sum(dim, keepdims=True)
    want = g - s * g.sum(dim, keepdims=True) if log else s * (g - (g * s).sum(dim, keepdims=True))
    _close(x.grad, want, dtype)
    assert ran.count("log_softmax_backward" if log else "softmax_backward") == 1


def test_gradcheck_through_the_native_kernels(monkeypatch, ran):
    monkeypatch.setattr(reduction, "NATIVE_ELEMENTS", 1)  # small float64 inputs too
    rng = np.random.default_rng(11)

    def leaf(*shape):
        return eager.tensor(rng.uniform(-1, 1, shape), requires_grad=True)
    assert gradcheck(lambda x, w, b: F.layer_norm(x, (5,), w, b), (leaf(4, 5), leaf(5), leaf(5)))
    assert gradcheck(lambda x, w: F.layer_norm(x, (2, 3), w), (leaf(3, 2, 3), leaf(2, 3)))
    assert gradcheck(lambda x: F.layer_norm(x.t(), (3,)), (leaf(3, 4),))
    assert gradcheck(lambda x: F.softmax(x, 1) * 2, (leaf(3, 4),))
    assert gradcheck(lambda x: F.log_softmax(x, 0), (leaf(3, 4),))
    assert {"layer_norm", "layer_norm_backward", "layer_norm_parameters", "softmax_backward",
            "log_softmax_backward"} <= set(ran)


def test_kiln_eager_native_0_keeps_numpy(monkeypatch, ran):
    x = eager.randn(64, 64, requires_grad=True)
    monkeypatch.setenv("KILN_EAGER_NATIVE", "0")
    monkeypatch.setattr(reduction, "_native_rows", None)  # read the variable again
    F.layer_norm(x, (64,)).sum().backward()
    F.softmax(x, 1).sum().backward()
    assert ran == [] and reduction._native_rows is False
    monkeypatch.setattr(reduction, "_native_rows", None)


def test_a_kernel_still_compiling_leaves_the_call_to_numpy(monkeypatch, ran):
    from runtime.llvm.jit import host_jit

    def pending(*args, **kwargs):
        raise KernelPending("compiling in a worker")
    monkeypatch.setattr(eager_rows, "_kernels", {})
    monkeypatch.setattr(eager_rows, "layouts", {})
    monkeypatch.setattr(host_jit(), "load_spec", pending)
    a = np.random.default_rng(2).standard_normal((40, 77))
    x = eager.tensor(a, requires_grad=True)
    y = F.layer_norm(x, (77,))
    y.backward(eager.ones(40, 77, dtype=eager.float64))
    out, gi, _, _ = _reference(a, (77,), None, None, np.ones((40, 77)))
    _close(y.detach(), out, np.float64)
    _close(x.grad, gi, np.float64)
    assert ran == [] and eager_rows.layouts == {}


def test_profiler_and_autograd_name_the_ops_as_pytorch():
    x = eager.randn(2, 4, requires_grad=True)
    w = eager.ones(4, requires_grad=True)
    with eager.profiler.profile() as prof:
        y = F.layer_norm(x, (4,), w)
    assert y.grad_fn.name() == "NativeLayerNormBackward0"
    assert "aten::native_layer_norm" in {e.name for e in prof.events()}
    with eager.profiler.profile() as prof:
        y.sum().backward()
    assert "aten::native_layer_norm_backward" in {e.name for e in prof.events()}
    with eager.profiler.profile() as prof:
        F.softmax(x, 1).sum().backward()
        F.log_softmax(x, 1).sum().backward()
    names = {e.name for e in prof.events()}
    assert {"aten::_softmax_backward_data", "aten::_log_softmax_backward_data"} <= names


def test_compiled_layer_norm_is_still_one_fused_row_kernel():
    import compiler
    from compiler.passes import optimize
    from compiler.passes.memory import traffic
    x, w, b = eager.randn(64, 96), eager.randn(96), eager.randn(96)
    cf = compiler.compile(lambda x, w, b: F.layer_norm(x, (96,), w, b), backend="eager")
    cf(x, w, b)
    g = next(iter(cf.entries.values())).regions[0]
    assert [n.op for n in g.nodes] == [Op.NATIVE_LAYER_NORM]  # captured whole
    o = optimize(g, verify=True)
    assert traffic(o).kernels == 1 and o.nodes[0].attr["kind"] == "reduction"
    native = compiler.compile(lambda x, w, b: F.layer_norm(x, (96,), w, b))
    np.testing.assert_allclose(native(x, w, b).numpy(), F.layer_norm(x, (96,), w, b).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_ops_have_cpu_and_meta_kernels_that_agree_on_shapes():
    x = eager.randn(3, 4, 5)
    out, mean, rstd = ops.native_layer_norm(x, [4, 5], None, None, 1e-5)
    m = [ops.native_layer_norm(x.to("meta"), [4, 5], None, None, 1e-5)]
    assert [t.shape for t in (out, mean, rstd)] == [t.shape for t in m[0]]
    assert mean.shape == (3, 1, 1)
    grads = ops.native_layer_norm_backward(x, x, [4, 5], mean, rstd, None, None,
                                           [True, False, False])
    assert grads[0].shape == x.shape and grads[1] is None and grads[2] is None


def test_an_expanded_weight_and_a_strided_bias_are_read_in_place(ran):
    a = np.random.default_rng(3).standard_normal((64, 256))
    w = eager.tensor(np.array([1.5])).expand(256)  # inner stride 0
    b = eager.tensor(np.random.default_rng(4).standard_normal(512))[::2]  # inner stride 2
    y = F.layer_norm(eager.tensor(a), (256,), w, b)
    want = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5) * 1.5
    _close(y, want + b.numpy(), np.float64)
    assert ran == ["layer_norm"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_layer_norm_and_softmax_backward_run_natively_in_float32(dtype, ran):
    """Over 16-bit floats the row kernels read and write them and compute in float32 (the
    count and eps too), rounding each result once: eager's numpy kernels' values within a
    16-bit ulp (or float32's error, where a sum cancels), forward, the three gradients and
    softmax's backward, each run as a kernel."""
    from tests.eager.native.narrow_cases import numpy_kernels
    rng = np.random.default_rng(9)
    dt = getattr(eager, dtype)
    a, g = (rng.standard_normal((2, 37, 129)).astype(np.float32) * 3 for _ in range(2))
    wa, ba = (rng.standard_normal(129).astype(np.float32) for _ in range(2))

    def run():
        x, w, b = (eager.tensor(v).to(dt).requires_grad_() for v in (a, wa, ba))
        h = F.layer_norm(x, (129,), w, b)
        out = F.softmax(h, -1)  # (over dim 1 its gradient would sum to 0 in grad_bias)
        out.backward(eager.tensor(g).to(dt))
        return [h.detach(), out.detach(), x.grad, w.grad, b.grad]

    with numpy_kernels():
        want = run()
    del ran[:]
    ulp = 2.0 ** (-7 if dtype == "bfloat16" else -10)
    for got, expected in zip(run(), want):
        assert got.dtype == dt
        w = expected.float().numpy()
        np.testing.assert_allclose(got.float().numpy(), w, rtol=ulp,
                                   atol=1e-5 * np.abs(w).max())
    assert {"layer_norm", "layer_norm_backward", "layer_norm_parameters",
            "softmax_backward"} <= set(ran), ran
