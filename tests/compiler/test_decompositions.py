"""Every composite op's formula is written once, on its record (ir/formula.py), and every
implementation of the op agrees with it: for each record with a decomposition, on random
inputs of odd sizes (with -inf and NaN where the op defines them), in float32 and
float64, the op's eager kernel (numpy below NATIVE_ELEMENTS elements, the generated row
or pointwise kernel from there on), the formula run in eager ops, the compiled function
(decompose, fusion, native kernels) and, on small inputs, the CUDA kernels (on the
emulated device where there is no GPU) against a float64 numpy reference written here.
A formula kept twice and drifting apart fails one of these. The row kernels' graphs,
built from the formulas, are pinned as text: the kernels eager generated before."""
import importlib
import inspect
import math
import re

import numpy as np
import pytest

import eager
from eager.backends import row_ops
from eager.backends.cuda import composed
from eager.backends.native import pointwise as native_pointwise
from eager.kernels import reduction
from eager.kernels.decomposed import EAGER
from eager.tensor import ops
from ir import dtypes
from ir.ops import Op
from ir.parser import parse
from ir.records import RECORDS, decompositions
from runtime.cuda.current import unless_gpu

decompose_pass = importlib.import_module("compiler.passes.decompose")  # (the package's
# `decompose` attribute is the pass function)

SMALL, LARGE = (2, 3, 7), (4, 5, 61)  # below and above reduction.NATIVE_ELEMENTS (1024)
TOLERANCE = {np.float32: (1e-4, 1e-5), np.float64: (1e-10, 1e-12)}
_erf = np.vectorize(math.erf)


# float64 references -------------------------------------------------------------------
def _softmax(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


def _log_softmax(x, dim):
    shifted = x - x.max(dim, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(dim, keepdims=True))


def _layer_norm(x, shape, w, b, eps):
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    mean = x.mean(dims, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(dims, keepdims=True) + eps)
    return (x - mean) * rstd * w + b, mean, rstd


def _layer_norm_backward(g, x, shape, mean, rstd, w, b, mask):
    dims = tuple(range(x.ndim - len(shape), x.ndim))
    batch = tuple(range(x.ndim - len(shape)))
    xhat, gw = (x - mean) * rstd, g * w
    grad_input = rstd * (gw - gw.mean(dims, keepdims=True) -
                         xhat * (gw * xhat).mean(dims, keepdims=True))
    return grad_input, (g * xhat).sum(batch), g.sum(batch)


def _group_norm(x, w, b, n, c, hw, group, eps):
    grouped = x.reshape(n, group, -1)
    mean, var = grouped.mean(2, keepdims=True), grouped.var(2, keepdims=True)
    out = ((grouped - mean) / np.sqrt(var + eps)).reshape(x.shape)
    out = out * w.reshape(1, c, 1) + b.reshape(1, c, 1)
    return out, mean.reshape(n, group), (1 / np.sqrt(var + eps)).reshape(n, group)


def _group_norm_backward(g, x, mean, rstd, w, n, c, hw, group, mask):
    """The gradients of the group's xhat = (x - mean) rstd, as layer norm's over a group."""
    shape = (n, group, c // group, hw)
    g4, x4, w4 = g.reshape(shape), x.reshape(shape), w.reshape(1, group, -1, 1)
    m, r = mean.reshape(n, group, 1, 1), rstd.reshape(n, group, 1, 1)
    xhat, gw = (x4 - m) * r, g4 * w4
    dims = (2, 3)
    grad_input = r * (gw - gw.mean(dims, keepdims=True) -
                      xhat * (gw * xhat).mean(dims, keepdims=True))
    return grad_input.reshape(x.shape), (g4 * xhat).sum((0, 3)).reshape(c), g.sum((0, 2))


def _group_norm_args(rng, shape):
    """Two groups of the shape's channels where they divide into two, else one."""
    n, c, hw = shape
    return (_normal(rng, *shape), _normal(rng, c), _normal(rng, c), n, c, hw,
            2 if c % 2 == 0 else 1, 1e-5), {}


def _group_norm_backward_args(rng, shape):
    (x, w, b, n, c, hw, group, eps), _ = _group_norm_args(rng, shape)
    _, mean, rstd = _group_norm(x, w, b, n, c, hw, group, eps)
    return (_normal(rng, *shape), x, mean, rstd, w, n, c, hw, group, [True, True, True]), {}


def _gelu_backward(g, x, approximate="none"):
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        t = np.tanh(k * (x + 0.044715 * x ** 3))
        return g * (0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * k * (1 + 3 * 0.044715 * x ** 2))
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    return g * (0.5 * (1 + _erf(x / math.sqrt(2))) + x * pdf)


# cases: (op, arguments from (rng, shape), reference, the kind of eager's generated kernel
# that runs it on LARGE inputs) ----------------------------------------------------------
def _specials(x):
    """A row of -inf, a NaN in another, one -inf in a third."""
    x[0, 0, :] = -np.inf
    x[0, 1, 2] = np.nan
    x[1, 0, 0] = -np.inf
    return x


def _normal(rng, *shape):
    return rng.standard_normal(shape)


def _backward_of(ref):
    def make(rng, shape):
        x = _normal(rng, *shape)
        return (_normal(rng, *shape), ref(x, -1), -1, "dtype"), {}
    return make


def _layer_norm_backward_args(rng, shape):
    x, g = _normal(rng, *shape), _normal(rng, *shape)
    w, b = _normal(rng, *shape[1:]), _normal(rng, *shape[1:])
    _, mean, rstd = _layer_norm(x, shape[1:], w, b, 1e-5)
    return (g, x, list(shape[1:]), mean, rstd, w, b, [True, True, True]), {}


CASES = {
    "softmax": (Op.SOFTMAX, lambda rng, s: ((_specials(_normal(rng, *s)), -1), {}),
                lambda x, d: _softmax(x, d), "rows"),
    "log_softmax": (Op.LOG_SOFTMAX, lambda rng, s: ((_specials(_normal(rng, *s)), -1), {}),
                    lambda x, d: _log_softmax(x, d), "rows"),
    "mean": (Op.MEAN, lambda rng, s: ((_normal(rng, *s), [1, 2], True), {}),
             lambda x, d, k: x.mean(tuple(d), keepdims=k), "rows"),
    "mean-nan": (Op.MEAN, lambda rng, s: ((_specials(_normal(rng, *s))[:, :, 1:], [-1]), {}),
                 lambda x, d: x.mean(tuple(d)), "rows"),
    "var": (Op.VAR, lambda rng, s: ((_normal(rng, *s), [-1]), {}),
            lambda x, d: x.var(tuple(d), ddof=1), "rows"),
    "var-biased": (Op.VAR, lambda rng, s: ((_normal(rng, *s), [1, 2]), {"correction": 0}),
                   lambda x, d, correction: x.var(tuple(d), ddof=correction), "rows"),
    "var_mean": (Op.VAR_MEAN, lambda rng, s: ((_normal(rng, *s), [-1]), {}),
                 lambda x, d: (x.var(tuple(d), ddof=1), x.mean(tuple(d))), None),
    "std_mean": (Op.STD_MEAN, lambda rng, s: ((_normal(rng, *s), [1, 2]),
                                              {"correction": 0, "keepdim": True}),
                 lambda x, d, correction, keepdim: (
                     x.std(tuple(d), ddof=correction, keepdims=keepdim),
                     x.mean(tuple(d), keepdims=keepdim)), None),
    "std": (Op.STD, lambda rng, s: ((_normal(rng, *s), [1, 2]), {"keepdim": True}),
            lambda x, d, keepdim: x.std(tuple(d), ddof=1, keepdims=keepdim), None),
    "glu": (Op.GLU, lambda rng, s: ((_normal(rng, s[0], s[1], 2 * s[2]), -1), {}),
            lambda x, d: np.split(x, 2, d)[0] / (1 + np.exp(-np.split(x, 2, d)[1])), None),
    **{f"vector_norm-{p}": (Op.LINALG_VECTOR_NORM, (lambda p: lambda rng, s: (
        (_normal(rng, *s), p, [-1]), {}))(p), lambda x, p, d: np.linalg.norm(
            x, p, axis=d[0]), None) for p in (2, 1, 3, 0.5, math.inf, -math.inf, 0)},
    "vector_norm-all": (Op.LINALG_VECTOR_NORM, lambda rng, s: ((_normal(rng, *s),),
                                                                {"keepdim": True}),
                        lambda x, keepdim: np.sqrt((x * x).sum(keepdims=True)), None),
    "native_layer_norm": (
        Op.NATIVE_LAYER_NORM, lambda rng, s: ((_normal(rng, *s), list(s[1:]), _normal(
            rng, *s[1:]), _normal(rng, *s[1:]), 1e-5), {}), _layer_norm, "rows"),
    "native_layer_norm_backward": (Op.NATIVE_LAYER_NORM_BACKWARD, _layer_norm_backward_args,
                                   _layer_norm_backward, "rows"),
    "native_group_norm": (Op.NATIVE_GROUP_NORM, _group_norm_args, _group_norm, None),
    "native_group_norm_backward": (Op.NATIVE_GROUP_NORM_BACKWARD, _group_norm_backward_args,
                                   _group_norm_backward, None),
    "_softmax_backward_data": (
        Op.SOFTMAX_BACKWARD_DATA, _backward_of(_softmax),
        lambda g, y, d, _: y * (g - (g * y).sum(d, keepdims=True)), "rows"),
    "_log_softmax_backward_data": (
        Op.LOG_SOFTMAX_BACKWARD_DATA, _backward_of(_log_softmax),
        lambda g, y, d, _: g - np.exp(y) * g.sum(d, keepdims=True), "rows"),
    "gelu_backward": (Op.GELU_BACKWARD, lambda rng, s: ((_normal(rng, *s), 3 * _normal(
        rng, *s)), {}), _gelu_backward, "pointwise"),
    "gelu_backward-tanh": (Op.GELU_BACKWARD, lambda rng, s: ((_normal(rng, *s), 3 * _normal(
        rng, *s)), {"approximate": "tanh"}), _gelu_backward, "pointwise"),
    "addmm": (Op.ADDMM, lambda rng, s: ((_normal(rng, s[2]), _normal(rng, s[1] * 4, s[0] + 15),
                                         _normal(rng, s[0] + 15, s[2])),
                                        {"beta": 0.5, "alpha": 2}),
              lambda b, m1, m2, beta, alpha: beta * b + alpha * (m1 @ m2), None),
}


def _arguments(name, shape, dt, device="cpu"):
    """(args with eager tensors in dt, kwargs, the float64 reference's result)."""
    op, make, reference, _ = CASES[name]
    args, kwargs = make(np.random.default_rng(len(name) + shape[-1]), shape)
    args = [a.astype(dt).astype(np.float64) if isinstance(a, np.ndarray) else a for a in args]
    with np.errstate(invalid="ignore"):  # (a row of -inf: inf - inf)
        expected = reference(*args, **kwargs)  # of the inputs as rounded to dt
    tensors = [eager.tensor(a.astype(dt)).to(device) if isinstance(a, np.ndarray) else
               (dtypes.from_numpy(dt) if a == "dtype" else a) for a in args]
    return tensors, kwargs, expected


def _same(got, expected, dt, what):
    got = got if isinstance(got, (tuple, list)) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    rtol, atol = TOLERANCE[dt]
    for g, e in zip(got, expected, strict=True):
        assert g.dtype is dtypes.from_numpy(dt), what
        np.testing.assert_allclose(g.cpu().numpy(), np.broadcast_to(e, tuple(g.shape)), rtol,
                                   atol, equal_nan=True, err_msg=what)


@pytest.fixture
def native_ran(monkeypatch):
    """The kinds of eager's generated kernels that ran ("rows", "pointwise"; a call that
    returned None was left to numpy)."""
    ran = []
    for kind, module, name in (("rows", reduction.native_rows(), "run"),
                               ("rows", reduction.native_rows(), "run_graph"),
                               ("pointwise", native_pointwise, "run")):
        def spy(*args, _original=getattr(module, name), _kind=kind):
            out = _original(*args)
            if out is not None:
                ran.append(_kind)
            return out
        monkeypatch.setattr(module, name, spy)
    return ran


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [SMALL, LARGE], ids=["numpy", "native"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_implementation_of_a_decomposed_op_agrees(name, shape, dt, native_ran):
    op, _, _, native = CASES[name]
    args, kwargs, expected = _arguments(name, shape, dt)
    kernel = getattr(ops, op.schema.name)
    _same(kernel(*args, **kwargs), expected, dt, f"{name}: eager's kernel")
    assert set(native_ran) == ({native} if native and shape == LARGE else set()), native_ran
    _same(RECORDS[op].formula(EAGER, *args, **kwargs), expected, dt,
          f"{name}: its formula in eager ops")
    positions = [i for i, a in enumerate(args) if isinstance(a, eager.Tensor)]

    def call(*tensors):
        given = list(args)
        for i, t in zip(positions, tensors):
            given[i] = t
        return kernel(*given, **kwargs)
    compiled = eager.compile(call)
    _same(compiled(*[args[i] for i in positions]), expected, dt, f"{name}: compiled")


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_cuda_kernels_agree(name, dt):
    """On the emulated device where there is no GPU: small inputs (Python per thread)."""
    op = CASES[name][0]
    with unless_gpu(memory=64 << 20):
        args, kwargs, expected = _arguments(name, SMALL, dt, "cuda")
        got = getattr(ops, op.schema.name)(*args, **kwargs)
        assert all(g.device.type == "cuda" for g in (got if isinstance(got, tuple) else (got,)))
        _same(got, expected, dt, f"{name}: CUDA")


@pytest.mark.parametrize("name", sorted(CASES))
def test_float16_kernels_compute_in_float32_and_round_once(name):
    """numpy's kernels run the formula on float32 arrays (not a chain of float16 ops, which
    the decompose pass therefore leaves whole)."""
    op = CASES[name][0]
    args, kwargs, expected = _arguments(name, SMALL, np.float16)
    got = getattr(ops, op.schema.name)(*args, **kwargs)
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert g.dtype is dtypes.float16
        np.testing.assert_allclose(g.numpy().astype(np.float64), np.broadcast_to(
            e, tuple(g.shape)), 2e-3, 2e-3, equal_nan=True, err_msg=name)


def test_every_composite_op_has_its_formula_on_its_record_and_nowhere_beside():
    assert {case[0] for case in CASES.values()} == set(decompositions())  # each tested here
    tables = [v for v in vars(decompose_pass).values() if isinstance(v, dict) and
              any(isinstance(k, Op) and callable(f) for k, f in v.items())]
    assert tables == []  # the pass reads the records: no table of formulas beside them
    assert set(row_ops._ROW_ARGUMENTS) <= set(decompositions())
    source = inspect.getsource(row_ops)  # the row graphs spell no arithmetic of their own
    outside = source.replace(inspect.getsource(row_ops._RowFormula), "")
    assert not re.search(r"Op\.(ADD|SUB|MUL|DIV|EXP|LOG|RSQRT)\b", outside)
    assert "ops." not in inspect.getsource(composed)  # CUDA's composed kernels: formulas


def test_the_decompose_pass_runs_the_records_formula(monkeypatch):
    record, calls = RECORDS[Op.SOFTMAX], []
    formula = record.formula
    monkeypatch.setattr(record, "formula", lambda *a, **k: calls.append(a) or formula(*a, **k))
    graph = decompose_pass.decompose(parse("graph(%x: f32[4,5]):\n"
                                           "  %0: f32[4,5] = softmax.int(%x, dim=-1, dtype=None)\n"
                                           "  return (%0)\n"))
    assert len(calls) == 1 and Op.SOFTMAX not in [n.op for n in graph.nodes]


ROW_GRAPHS = {
    "softmax": (lambda: row_ops.row_op_graph(Op.SOFTMAX, dtypes.float32, dtypes.float32), """\
graph(%x: f32[rows,n]):
  %0: f32[rows,1] = amax(%x)
  %1: f32[rows,n] = sub(%x, %0)
  %2: f32[rows,n] = exp(%1)
  %3: f32[rows,1] = sum(%2)
  %4: f32[rows,n] = div(%2, %3)
  return (%4)
""", ["0", "3"]),
    "log_softmax": (lambda: row_ops.row_op_graph(Op.LOG_SOFTMAX, dtypes.float32,
                                                 dtypes.float32), """\
graph(%x: f32[rows,n]):
  %0: f32[rows,1] = amax(%x)
  %1: f32[rows,n] = sub(%x, %0)
  %2: f32[rows,n] = exp(%1)
  %3: f32[rows,1] = sum(%2)
  %4: f32[rows,1] = log(%3)
  %5: f32[rows,n] = sub(%1, %4)
  return (%5)
""", ["0", "3", "4"]),
    "mean": (lambda: row_ops.row_op_graph(Op.MEAN, dtypes.float64, dtypes.float64), """\
graph(%x: f64[rows,n], %count: f64[]):
  %0: f64[rows,1] = sum(%x)
  %1: f64[rows,1] = div(%0, %count)
  return (%1)
""", ["0", "1", "count"]),
    "var": (lambda: row_ops.row_op_graph(Op.VAR, dtypes.float32, dtypes.float32,
                                         ("count", "corrected_count")), """\
graph(%x: f32[rows,n], %count: f32[], %corrected_count: f32[]):
  %0: f32[rows,1] = sum(%x)
  %1: f32[rows,1] = div(%0, %count)
  %2: f32[rows,n] = sub(%x, %1)
  %3: f32[rows,n] = mul(%2, %2)
  %4: f32[rows,1] = sum(%3)
  %5: f32[rows,1] = div(%4, %corrected_count)
  return (%5)
""", ["0", "1", "4", "5", "corrected_count", "count"]),
    "layer_norm": (lambda: row_ops.layer_norm_graph(dtypes.float32, True, True), """\
graph(%x: f32[rows,n], %weight: f32[rows,n], %bias: f32[rows,n], %count: f32[], %eps: f32[]):
  %0: f32[rows,1] = sum(%x)
  %1: f32[rows,1] = div(%0, %count)
  %2: f32[rows,n] = sub(%x, %1)
  %3: f32[rows,n] = mul(%2, %2)
  %4: f32[rows,1] = sum(%3)
  %5: f32[rows,1] = div(%4, %count)
  %6: f32[rows,1] = add(%5, %eps)
  %7: f32[rows,1] = rsqrt(%6)
  %8: f32[rows,n] = mul(%2, %7)
  %9: f32[rows,n] = mul(%8, %weight)
  %10: f32[rows,n] = add(%9, %bias)
  return (%10, %1, %7)
""", ["0", "1", "4", "5", "6", "7", "count", "eps"]),
    "layer_norm_backward": (lambda: row_ops.layer_norm_backward_graph(dtypes.float32, True), """\
graph(%grad: f32[rows,n], %x: f32[rows,n], %mean: f32[rows,1], %rstd: f32[rows,1], \
%weight: f32[rows,n], %count: f32[]):
  %0: f32[rows,n] = sub(%x, %mean)
  %1: f32[rows,n] = mul(%0, %rstd)
  %2: f32[rows,n] = mul(%grad, %weight)
  %3: f32[rows,1] = sum(%2)
  %4: f32[rows,1] = div(%3, %count)
  %5: f32[rows,n] = mul(%2, %1)
  %6: f32[rows,1] = sum(%5)
  %7: f32[rows,1] = div(%6, %count)
  %8: f32[rows,n] = sub(%2, %4)
  %9: f32[rows,n] = mul(%1, %7)
  %10: f32[rows,n] = sub(%8, %9)
  %11: f32[rows,n] = mul(%10, %rstd)
  return (%11)
""", ["3", "4", "6", "7", "count", "mean", "rstd"]),
    "layer_norm_parameters": (lambda: row_ops.layer_norm_parameters_graph(dtypes.float32, True,
                                                                          True), """\
graph(%grad: f32[rows,n], %x: f32[rows,n], %mean: f32[rows,n], %rstd: f32[rows,n]):
  %0: f32[rows,n] = sub(%x, %mean)
  %1: f32[rows,n] = mul(%0, %rstd)
  %2: f32[rows,n] = mul(%grad, %1)
  %3: f32[rows,1] = sum(%2)
  %4: f32[rows,1] = sum(%grad)
  return (%3, %4)
""", ["3", "4"]),
    "softmax_backward": (lambda: row_ops.softmax_backward_graph(dtypes.float32, False), """\
graph(%grad: f32[rows,n], %output: f32[rows,n]):
  %0: f32[rows,n] = mul(%grad, %output)
  %1: f32[rows,1] = sum(%0)
  %2: f32[rows,n] = sub(%grad, %1)
  %3: f32[rows,n] = mul(%output, %2)
  return (%3)
""", ["1"]),
    "log_softmax_backward": (lambda: row_ops.softmax_backward_graph(dtypes.float32, True), """\
graph(%grad: f32[rows,n], %output: f32[rows,n]):
  %0: f32[rows,1] = sum(%grad)
  %1: f32[rows,n] = exp(%output)
  %2: f32[rows,n] = mul(%1, %0)
  %3: f32[rows,n] = sub(%grad, %2)
  return (%3)
""", ["0"]),
}


@pytest.mark.parametrize("name", sorted(ROW_GRAPHS))
def test_the_row_kernels_built_from_the_formulas_are_the_graphs_eager_generated(name):
    build, text, per_row = ROW_GRAPHS[name]
    graph, rows = build()
    assert str(graph) == text
    assert sorted(v.name for v in rows) == per_row
