"""Native kernels (generated LLVM, run through ctypes) against eager, op by op, over
awkward shapes and layouts: 0-sized and size-1 dims, primes, broadcasting, transposed,
strided and expanded inputs, sizes that span threads; and reductions over any dim."""
import math

import numpy as np
import pytest

import compiler
import eager
from compiler import guards, interpreter
from compiler.backends import native
from compiler.passes import optimize
from ir.ops import Op

SHAPES = [(0,), (1,), (7,), (3, 5), (13, 17), (2, 0, 3), (4, 1, 33), (129,), (70001,)]
LAYOUTS = ("contiguous", "transposed", "strided", "expanded")

UNARY = {
    "neg": lambda x: -x, "abs": lambda x: x.abs(), "relu": lambda x: x.relu(),
    "sign": lambda x: x.sign(), "clamp": lambda x: x.clamp(-0.5, 0.7),
    "square_plus": lambda x: x * x + 1, "cast_double": lambda x: x.double() * 2,
    "cast_int": lambda x: (x * 3).int(), "compare": lambda x: (x > 0.25).logical_and(x < 2),
    "where": lambda x: eager.where(x > 0, x, x * 0.5),
    "sub_alpha": lambda x: eager.sub(x, 1.5, alpha=2),
    "exp": lambda x: x.exp(), "log": lambda x: x.abs().log(), "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(), "sqrt": lambda x: x.abs().sqrt(),
    "rsqrt": lambda x: (x.abs() + 0.1).rsqrt(), "erf": lambda x: x.erf(),
    "gelu": lambda x: eager.gelu(x), "gelu_tanh": lambda x: eager.gelu(x, approximate="tanh"),
    "silu": lambda x: eager.silu(x), "pow": lambda x: x.abs() ** 1.7,
    "div": lambda x: x / (x.abs() + 1),
}
MATH = {"exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "erf", "gelu", "gelu_tanh", "silu",
        "pow"}
REDUCTIONS = {
    "sum_last": lambda x: x.sum(-1), "sum_first": lambda x: x.sum(0, keepdim=True),
    "sum_all": lambda x: x.sum(), "mean_last": lambda x: x.mean(-1, keepdim=True),
    "amax_last": lambda x: x.amax(-1), "amin_first": lambda x: x.amin(0),
    "var_last": lambda x: x.var(-1), "softmax": lambda x: eager.softmax(x, -1),
    "log_softmax_first": lambda x: eager.log_softmax(x, 0),
    "layer_norm": lambda x: eager.nn.functional.layer_norm(x, x.shape[-1:]),
    "centre": lambda x: x - x.mean(-1, keepdim=True),
}


def _layout(a: np.ndarray, layout: str):
    t = eager.tensor(a)
    if layout == "transposed" and a.ndim >= 2:
        return eager.tensor(np.ascontiguousarray(a.swapaxes(-1, -2))).transpose(-1, -2)
    if layout == "strided":
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],) if a.ndim else (), a.dtype)
        if a.ndim:
            wide[..., ::2] = a
            return eager.tensor(wide)[..., ::2]
    if layout == "expanded" and a.ndim >= 1:
        return eager.tensor(a[..., :1]).expand(a.shape) if a.shape[-1] else t
    return t


def _native_vs_eager(fn, x):
    """The native backend's answer equals eager's, from generated code: no node of the
    graph and no layout of a kernel ran through the interpreter."""
    expected = fn(x)
    compiled = compiler.compile(fn, backend="native")
    got = compiled(x)
    _assert_ran_natively(compiled)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tol = 1e-5 if expected.dtype in (eager.float32,) else 1e-12
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=tol, atol=tol)


def _assert_ran_natively(compiled) -> None:
    for run in compiled.region_cache.values():
        interpreted = [str(n) for i, n in enumerate(run.graph.nodes)
                       if n.op not in (Op.SCALAR,) and not n.op.schema.is_view
                       and i not in run.kernels]
        assert not interpreted and not run.native_reasons, (interpreted, run.native_reasons)
        assert all(k.fallback_reason == "" for k in run.kernels.values())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_elementwise_float32(name, shape, layout):
    a = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32) * 2
    _native_vs_eager(UNARY[name], _layout(a, layout))


_ANY_DTYPE = ["neg", "abs", "relu", "square_plus", "compare", "cast_double", "div"]
_FLOAT_ONLY = ["clamp", "where", "sub_alpha"] + sorted(MATH)  # float scalars or float math


@pytest.mark.parametrize("name, dtype", [(n, d) for d in ("float64", "int32", "int64")
                                         for n in _ANY_DTYPE + (_FLOAT_ONLY if d == "float64"
                                                                else [])])
def test_elementwise_other_dtypes(name, dtype):
    a = (np.random.default_rng(1).standard_normal((9, 33)) * 5).astype(dtype)
    _native_vs_eager(UNARY[name], eager.tensor(a))


_EMPTY_OK = {"sum_last", "sum_first", "sum_all"}  # the others raise or give NaN eagerly
REDUCTION_CASES = [(name, shape) for name in sorted(REDUCTIONS)
                   for shape in [(1, 1), (3, 5), (13, 129), (2, 3, 17), (300, 257)] +
                   ([(0, 4), (4, 0)] if name in _EMPTY_OK else [])]


@pytest.mark.parametrize("name, shape", REDUCTION_CASES, ids=str)
def test_reductions(name, shape):
    a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    _native_vs_eager(REDUCTIONS[name], eager.tensor(a))


@pytest.mark.parametrize("name", ["amax_last", "softmax", "mean_last"])
def test_empty_reductions_behave_as_eager(name):
    x = eager.zeros(4, 0)
    try:
        expected = REDUCTIONS[name](x)
    except (RuntimeError, IndexError) as e:
        with pytest.raises(type(e)):
            compiler.compile(REDUCTIONS[name], backend="native")(x)
        return
    got = compiler.compile(REDUCTIONS[name], backend="native")(x)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_nan_and_inf_propagate_as_in_eager():
    a = eager.tensor(np.array([[np.nan, 1.0, -np.inf], [2.0, np.inf, -0.0]], np.float32))
    for fn in (lambda x: x.amax(-1), lambda x: x.amin(0), lambda x: eager.maximum(x, x * 0),
               lambda x: x.relu(), lambda x: x.clamp(-1, 1), lambda x: x.sign()):
        expected = fn(a).numpy()
        got = compiler.compile(fn, backend="native")(a).numpy()
        np.testing.assert_array_equal(got, expected)


def _captured(fn, *args):
    cf = compiler.compile(fn, backend="eager")
    cf(*args)
    entry = next(iter(cf.entries.values()))
    return entry.regions[0], [guards.resolve(s, args) for s in entry.sources]


def test_kernels_run_natively_and_say_why_when_not():
    g, inputs = _captured(lambda x, w: (x * w + 1).relu().sum(-1), eager.randn(5, 8),
                          eager.randn(8))
    run = native.prepare(optimize(g))
    assert run.native_reasons == {}
    np.testing.assert_allclose(run(inputs)[0].numpy(), interpreter.run(g, inputs)[0].numpy(),
                               rtol=1e-5)
    g, inputs = _captured(lambda x: (x * 2).short().sum(-1) + 1,  # int16: elementwise only
                          eager.randn(4, 3))
    run = native.prepare(optimize(g))
    assert any("int16" in r for r in run.native_reasons.values())


def test_no_lane_reads_or_writes_past_the_end():
    base = np.full(64, np.nan, np.float32)
    base[8:8 + 21] = np.arange(21, dtype=np.float32)
    x = eager.from_numpy(base)[8:8 + 21]
    out = compiler.compile(lambda x: x * 2 + 1, backend="native")(x)
    np.testing.assert_array_equal(out.numpy(), np.arange(21, dtype=np.float32) * 2 + 1)
    assert np.isnan(base[:8]).all() and np.isnan(base[29:]).all()


@pytest.mark.parametrize("fn", [lambda x: (x * x).sum(-1), lambda x: x.exp() * 2,
                                lambda x: eager.softmax(x, -1)])
def test_kernels_large_enough_to_span_threads(fn, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    a = eager.tensor(np.random.default_rng(3).standard_normal((1100, 1001)).astype(np.float32))
    compiled = compiler.compile(fn, backend="native")
    first = compiled(a).numpy()
    np.testing.assert_allclose(first, fn(a).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(compiled(a).numpy(), first)  # the same split, same bits
    run = next(iter(compiled.region_cache.values()))
    launches = [launch for k in run.kernels.values() for launch in k._layouts.values()]
    assert launches and all(launch.threads == 2 for launch in launches)
    assert math.isfinite(float(first.sum()))


def pool_available() -> bool:
    from runtime import pool
    return pool.available()


def test_one_long_row_splits_its_inner_range_over_the_pool():
    """A 1-D elementwise kernel from launch.PARALLEL_ELEMENTS on runs one inner range per
    thread as runtime.pool items: every element once, the bits of one thread."""
    from runtime import pool
    from runtime.threads import num_threads
    x = eager.tensor(np.random.default_rng(4).standard_normal(300_001).astype(np.float32))
    compiled = compiler.compile(lambda x: (x * 1.5).exp() - x, backend="native")
    got = compiled(x).numpy()
    run = next(iter(compiled.region_cache.values()))
    (launch,) = [launch for k in run.kernels.values() for launch in k._layouts.values()]
    expected_threads = num_threads() if pool.available() else 1
    assert launch.threads == expected_threads
    if launch.threads > 1:
        assert launch.split_inner and launch.parallel
        lows, highs = launch._records[:, 6], launch._records[:, 7]
        assert lows[0] == 0 and highs[-1] == 300_001 and (lows[1:] == highs[:-1]).all()
    launch.fast = launch._plain_through_ctypes  # the same kernel on this thread alone
    np.testing.assert_array_equal(compiled(x).numpy(), got)
    np.testing.assert_allclose(got, np.exp(x.numpy() * 1.5) - x.numpy(), rtol=1e-5)


def test_strided_and_broadcast_operands_split_over_the_pool():
    """A strided view and a strided broadcast row, 401 x 500 (odd rows): each thread its
    rows, every element right."""
    rng = np.random.default_rng(6)
    base = eager.tensor(rng.standard_normal((402, 1000)).astype(np.float32))
    x, row = base[1:, 1::2], eager.tensor(rng.standard_normal(1000).astype(np.float32))[::2]
    compiled = compiler.compile(lambda x, r: (x - r).abs().sqrt() * 2, backend="native")
    got = compiled(x, row).numpy()
    np.testing.assert_allclose(got, np.sqrt(np.abs(x.numpy() - row.numpy())) * 2, rtol=1e-6)
    run = next(iter(compiled.region_cache.values()))
    launches = [launch for k in run.kernels.values() for launch in k._layouts.values()]
    assert launches and all(launch.parallel for launch in launches) or not pool_available()


def test_python_threads_may_share_a_kernel_on_the_pool():
    """Callers that find a launch's items taken run the kernel alone: every result right."""
    import threading
    compiled = compiler.compile(lambda x: x * 2 + 1, backend="native")
    inputs = [eager.tensor(np.full(200_000, i, np.float32)) for i in range(6)]
    compiled(inputs[0])
    results = [None] * len(inputs)

    def work(index):
        for _ in range(20):
            results[index] = compiled(inputs[index]).numpy()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, result in enumerate(results):
        assert (result == 2 * i + 1).all()


def _rows_sum_on_two_threads(monkeypatch):
    """A compiled sum of 513 x 257 rows on two threads (a Launch between PARALLEL_ELEMENTS
    and FASTCALL_ELEMENTS), the Launch, and its input."""
    from runtime.cpu import launch as launch_module
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    x = eager.tensor(np.random.default_rng(8).random((513, 257)).astype(np.float32))
    assert launch_module.PARALLEL_ELEMENTS <= x.numel() <= launch_module.FASTCALL_ELEMENTS
    compiled = compiler.compile(lambda x: x.sum(-1), backend="native")
    first = compiled(x).numpy()
    run = next(iter(compiled.region_cache.values()))
    (launch,) = [launch for k in run.kernels.values() for launch in k._layouts.values()]
    return compiled, launch, x, first


def test_a_small_kernel_on_the_pool_is_handed_to_it_by_a_builtin(monkeypatch):
    """A small one-output kernel on threads runs alone through ctypes at its first call
    (the builtin that hands runtime.pool its job is made at the second), on the pool
    after: the same bits as one thread's, every row."""
    from runtime import fastcall
    if not (pool_available() and fastcall.available()):
        pytest.skip("needs runtime.pool (Linux on x86-64) and runtime.fastcall (CPython)")
    compiled, launch, x, first = _rows_sum_on_two_threads(monkeypatch)
    assert launch.parallel and launch.plain and launch.threads == 2
    assert launch.fast == launch._plain_through_ctypes  # one call: alone, no launcher loaded
    second, third = compiled(x).numpy(), compiled(x).numpy()
    assert getattr(launch.fast, "__name__", "") == "kiln_launch_parallel"
    np.testing.assert_array_equal(second, first)
    np.testing.assert_array_equal(third, first)
    np.testing.assert_allclose(first, x.numpy().astype(np.float64).sum(-1), rtol=1e-5)
    assert launch._records[0, 4] == 0 and launch._records[-1, 5] == 513  # both halves ran


def _pool_launch_in_child(queue, compiled, x, expected) -> None:
    try:
        queue.put(bool((compiled(x).numpy() == expected).all()))
    except BaseException as e:  # reported to the parent, which asserts
        queue.put(repr(e))


def test_a_pool_launch_builtin_runs_alone_in_a_forked_child(monkeypatch):
    """The builtin reads the pool at runtime.pool's current cell at each call: in a
    forked child, which has none of the parent's workers, it runs the job alone."""
    import multiprocessing

    from runtime import fastcall
    if not (pool_available() and fastcall.available()):
        pytest.skip("needs runtime.pool (Linux on x86-64) and runtime.fastcall (CPython)")
    compiled, launch, x, first = _rows_sum_on_two_threads(monkeypatch)
    compiled(x), compiled(x)
    assert getattr(launch.fast, "__name__", "") == "kiln_launch_parallel"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_pool_launch_in_child, args=(queue, compiled, x, first))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get(timeout=5) is True


def test_row_kernels_tell_row_operands_from_broadcast_rows():
    x, w, b = eager.randn(37, 53), eager.randn(53), eager.randn(53)
    ln = compiler.compile(lambda x: eager.nn.functional.layer_norm(x, (53,), w, b))
    np.testing.assert_allclose(ln(x).numpy(),
                               eager.nn.functional.layer_norm(x, (53,), w, b).numpy(),
                               rtol=1e-4, atol=1e-5)
    r = eager.randn(37)  # one value per row, added to a reduced row
    per_row = compiler.compile(lambda x, r: x.sum(-1) + r)
    np.testing.assert_allclose(per_row(x, r).numpy(), (x.sum(-1) + r).numpy(), rtol=1e-4,
                               atol=1e-5)


def test_an_operand_as_long_as_a_row_broadcasts_against_a_rows_value_along_the_row():
    """y of shape (n,) beside a row's value of shape (n, 1) in a square (n, n) kernel:
    y * x.sum(-1, keepdim=True) is y along each row (numpy's broadcast), not one value of
    y per row as y's shape alone would say (it gave values of 1e24, read past y)."""
    x, y = eager.randn(64, 64), eager.randn(64)
    for fn in (lambda x, y: y * x.sum(-1, keepdim=True),
               lambda x, y: x + y / x.abs().sum(-1, keepdim=True)):
        np.testing.assert_allclose(compiler.compile(fn, backend="native")(x, y).numpy(),
                                   fn(x, y).numpy(), rtol=1e-5, atol=1e-5)
        assert compiler.lower(fn, x, y).kernels


@pytest.mark.parametrize("fn", [lambda x: x.argmax(-1), lambda x: x.argmin(0),
                                lambda x: x.argmax(), lambda x: x.argmax(1, keepdim=True) + 1,
                                lambda x: eager.softmax(x, -1).argmin(-1)])
def test_argmax_and_argmin_keep_the_first_best_and_pick_nan(fn):
    rows = np.random.default_rng(5).standard_normal((37, 53)).astype(np.float32)
    rows[3, 10] = rows[3, 20] = 50.0  # a tie: the first index wins
    rows[5, 7] = rows[5, 9] = np.nan  # NaN beats everything, the first NaN wins
    x = eager.tensor(rows)
    np.testing.assert_array_equal(compiler.compile(fn, backend="native")(x).numpy(),
                                  fn(x).numpy())
    assert compiler.lower(fn, x).kernels, "argmax/argmin should run as native code"


GEMM_PROGRAMS = {
    "mlp": lambda x, w, r: (x @ w.t()).relu() @ w,
    "bias_relu_scale_residual": lambda x, w, r: (eager.nn.functional.linear(x, w, r[0])
                                                 .relu() * 0.5 + r),
    "tanh_then_gelu": lambda x, w, r: eager.gelu((x @ w).tanh()),
    "attention": lambda x, w, r: eager.softmax(x @ x.t() * 0.125, -1) @ x,
    "batched": lambda x, w, r: (x.view(3, 11, 32) @ w.view(1, 32, 32)).sigmoid(),
}


@pytest.mark.parametrize("name", sorted(GEMM_PROGRAMS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gemm_kernels_with_their_epilogues(name, dtype):
    rng = np.random.default_rng(7)
    x, w, r = (eager.tensor(rng.standard_normal(s).astype(dtype)) for s in
               ((33, 32), (32, 32), (33, 32)))
    fn = GEMM_PROGRAMS[name]
    expected = fn(x, w, r)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(compiler.compile(fn, backend="native")(x, w, r).numpy(),
                               expected.numpy(), rtol=tol, atol=tol)
    lowered = compiler.lower(fn, x, w, r)
    assert not lowered.interpreted, lowered.interpreted


def test_a_transposed_gemm_operand_is_read_in_place_with_its_flag():
    """linear's w.t() and attention's x.t() become the GEMM's transpose flags: no view
    is made per call (x @ x.t() transposes only its second operand)."""
    import compiler.backends.native.gemm_node as runner
    seen = []
    original = runner.GemmNode.__call__

    def spy(kernel, inputs):
        seen.append(kernel.plan.transposes)
        return original(kernel, inputs)

    rng = np.random.default_rng(8)
    x, w = (eager.tensor(rng.standard_normal(s).astype("float32")) for s in ((9, 7), (5, 7)))
    for fn, flags in ((lambda x, w: eager.nn.functional.linear(x, w), (False, True)),
                      (lambda x, w: x @ x.t(), (False, True)),
                      (lambda x, w: w.t().t() @ x.t(), (False, True)),
                      (lambda x, w: x.view(3, 3, 7).permute(1, 0, 2).reshape(9, 7)[1:]
                       @ w.t(), (False, True))):  # the other operand keeps its view chain
        seen.clear()
        runner.GemmNode.__call__ = spy
        try:
            got = compiler.compile(fn, backend="native")(x, w)
        finally:
            runner.GemmNode.__call__ = original
        np.testing.assert_allclose(got.numpy(), fn(x, w).numpy(), rtol=1e-5, atol=1e-5)
        assert seen and seen[0] == flags


def gemm_kernels_called(monkeypatch) -> list:
    """A list that gets every GEMM kernel of the native backend as it is called."""
    import compiler.backends.native.gemm_node as runner
    kernels, original = [], runner.GemmNode.__call__

    def spy(kernel, inputs):
        kernels.append(kernel)
        return original(kernel, inputs)

    monkeypatch.setattr(runner.GemmNode, "__call__", spy)
    return kernels


def test_a_gemm_kernel_on_inputs_alone_reads_them_by_index(monkeypatch):
    """linear + relu + residual, every operand a graph input (w through the transpose
    flag): the kernel takes them by position, bias and residual included."""
    kernels = gemm_kernels_called(monkeypatch)
    rng = np.random.default_rng(9)
    x, w, b, r = (eager.tensor(rng.standard_normal(s).astype("float32"))
                  for s in ((10, 6), (4, 6), (4,), (10, 4)))
    fn = lambda x, w, b, r: eager.nn.functional.linear(x, w, b).relu() + r  # noqa: E731
    compiled = compiler.compile(fn, backend="native")
    for _ in range(3):
        np.testing.assert_allclose(compiled(x, w, b, r).numpy(), fn(x, w, b, r).numpy(),
                                   rtol=1e-5, atol=1e-5)
    assert kernels and all(k.plan.input_positions is not None and k.plan.store.nodes
                            for k in kernels)


def test_debug_levels_3_and_4_print_llvm_ir_and_assembly(capsys):
    with compiler.debug(4):
        compiler.compile(lambda x: x * 7.125 - 0.375, backend="native")(eager.randn(9))
    err = capsys.readouterr().err
    assert "LLVM IR: kiln_elementwise" in err and "define void @\"kiln_elementwise" in err
    assert "assembly: kiln_elementwise" in err and "ret" in err


def test_a_kernel_keeps_no_ir_text_yet_shows_the_ir_it_was_compiled_from(monkeypatch):
    """lower() and the dumps make the IR again on request: it is exactly what was
    compiled, and no kernel holds its text (about 30 KB each)."""
    from runtime.llvm.jit import HostJit
    loaded, build = [], HostJit._build

    def spy(jit, text, *level):
        loaded.append(text)
        return build(jit, text, *level)

    monkeypatch.setattr(HostJit, "_build", spy)
    (kernel,) = compiler.lower(lambda x: (x * 3.0625 - 0.8125).tanh(), eager.randn(9)).kernels
    assert kernel.llvm_ir == loaded[-1] and "define void" in loaded[-1]
    assert not [value for value in vars(kernel).values() if isinstance(value, str)
                and len(value) > 100]


@pytest.mark.parametrize("shape", [(512, 256), (37, 53), (4, 5, 6), (129, 17)], ids=str)
@pytest.mark.parametrize("fn", [lambda x: x.sum(0), lambda x: eager.softmax(x, 0),
                                lambda x: x.argmin(0), lambda x: x - x.amax(0, keepdim=True)])
def test_reductions_over_a_leading_dim_put_rows_in_the_lanes(fn, shape):
    x = eager.tensor(np.random.default_rng(9).standard_normal(shape).astype(np.float32))
    np.testing.assert_allclose(compiler.compile(fn, backend="native")(x).numpy(),
                               fn(x).numpy(), rtol=1e-5, atol=1e-6)
    names = [k.name for k in compiler.lower(fn, x).kernels]
    assert names and all(n.startswith("kiln_columns") for n in names), names


def test_a_layout_the_kernel_cannot_run_is_planned_once(monkeypatch):
    """The interpreter runs it, from the first call on, without planning it again."""
    from compiler.backends.native import pointwise
    from runtime.layout import CannotLower

    def refuse(*args, **kwargs):
        raise CannotLower("a layout refused for the test")
    monkeypatch.setattr(pointwise, "segmented_rows_layout", refuse)
    planned, original = [], pointwise.PointwiseNode._plan_launch

    def spy(kernel, arrays):
        planned.append(kernel)
        return original(kernel, arrays)

    monkeypatch.setattr(pointwise.PointwiseNode, "_plan_launch", spy)
    x = eager.tensor(np.random.default_rng(10).standard_normal((4, 5, 6)).astype("float32"))
    fn = lambda t: (t * 2).sum(dim=(0, 2))  # noqa: E731
    compiled = compiler.compile(fn, backend="native")
    for _ in range(4):
        np.testing.assert_allclose(compiled(x).numpy(), fn(x).numpy(), rtol=1e-5)
    assert len(planned) == 1
    assert [k.fallback_reason for run in compiled.region_cache.values()
            for k in run.kernels.values()] == ["a layout refused for the test"]


@pytest.mark.parametrize("name, fn", [
    ("gelu", lambda y: eager.gelu(y)),
    ("gelu_tanh", lambda y: eager.gelu(y, approximate="tanh")),
    ("silu", lambda y: eager.silu(y)),
])
def test_gelu_and_silu_after_a_linear_are_the_gemm_store_s_activation(name, fn, monkeypatch):
    """gelu and silu stay whole through the passes: the GEMM's store applies them, no
    elementwise kernel follows."""
    kernels = gemm_kernels_called(monkeypatch)
    rng = np.random.default_rng(12)
    x, w, b = (eager.tensor(rng.standard_normal(s).astype("float32"))
               for s in ((10, 6), (4, 6), (4,)))
    layer = lambda x, w, b: fn(eager.nn.functional.linear(x, w, b))  # noqa: E731
    compiled = compiler.compile(layer, backend="native")
    for _ in range(3):
        np.testing.assert_allclose(compiled(x, w, b).numpy(), layer(x, w, b).numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert kernels and all(k.plan.store.activation == name and k.plan.rest is None
                            for k in kernels)


def test_static_gemm_sizes_get_specialised_kernels_and_dynamic_ones_the_generic():
    """A graph compiled for fixed sizes runs its product on a gemm_small kernel made for
    them (from the second call on); with dynamic=True the sizes are symbols and the
    shape-generic kernels serve every size, nothing compiled per size."""
    from runtime.cpu.gemm import small as gemm_small
    rng = np.random.default_rng(11)
    w = eager.tensor(rng.standard_normal((12, 5)).astype("float32"))
    fn = lambda x, w: (x @ w).relu()  # noqa: E731
    static = compiler.compile(fn, backend="native")
    x = eager.tensor(rng.standard_normal((9, 12)).astype("float32"))
    before = set(gemm_small._kernels)
    for _ in range(3):
        np.testing.assert_allclose(static(x, w).numpy(), fn(x, w).numpy(), rtol=1e-5,
                                   atol=1e-5)
    made = [key for key in set(gemm_small._kernels) - before]
    assert [(key.m, key.n, key.k) for key in made] == [(9, 5, 12)]

    dynamic = compiler.compile(fn, backend="native", dynamic=True)
    before = set(gemm_small._kernels)
    for rows in (7, 8, 10, 7, 8, 10):
        x = eager.tensor(rng.standard_normal((rows, 12)).astype("float32"))
        np.testing.assert_allclose(dynamic(x, w).numpy(), fn(x, w).numpy(), rtol=1e-5,
                                   atol=1e-5)
    assert len(dynamic.entries) == 3 and set(gemm_small._kernels) == before


@pytest.mark.parametrize("compare", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_comparing_bools_natively_orders_false_before_true(compare):
    a = eager.tensor([True, False, True, False] * 5)
    b = eager.tensor([False, True, True, False] * 5)
    fn = lambda x, y: getattr(x, compare)(y)  # noqa: E731
    compiled = compiler.compile(fn, backend="native")
    assert compiled(a, b).tolist() == fn(a, b).tolist()
    _assert_ran_natively(compiled)


@pytest.mark.parametrize("op", ["maximum", "minimum", "add"])
def test_bool_maximum_minimum_and_add_natively_are_eager_s(op):
    """max(True, False) is True (an i1 compared signed is -1) and True + True is True
    (an i1 add wraps to False): the CUDA emulator tests found both."""
    a = eager.tensor([True, False, True, False] * 5)
    b = eager.tensor([False, True, True, False] * 5)
    fn = lambda x, y: getattr(eager, op)(x, y)  # noqa: E731
    compiled = compiler.compile(fn, backend="native")
    assert compiled(a, b).tolist() == fn(a, b).tolist()
    _assert_ran_natively(compiled)



def _view_chain(n: int):
    import textwrap
    import ir
    m = len(range(1, n, 2))
    return ir.parse(textwrap.dedent(f"""
        graph(%x: f32[{n},4]):
          %0: f32[4,{n}] = t(%x)
          %1: f32[4,{m}] = slice.Tensor(%0, dim=1, start=1, end={n}, step=2)
          %2: f32[2,4,{m}] = expand(%1, size=[2, 4, {m}], implicit=False)
          %3: f32[{m},4] = transpose.int(%1, dim0=0, dim1=1)
          return (%2, %3, %x)
        """))


def _same_views(got, want):
    for g, w in zip(got, want):
        assert (g.shape, g.stride(), g.storage_offset(), g.data_ptr()) == \
            (w.shape, w.stride(), w.storage_offset(), w.data_ptr())
        np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("n", [6, 7, 0])
def test_leading_views_made_directly_are_the_eager_views(n):
    """From a layout's second call the views are made without eager ops: the same shapes,
    strides, offsets and memory as eager's views, per layout of the input (contiguous,
    transposed, at an offset in a wider tensor)."""
    from compiler.backends.views import LeadingViews
    graph = _view_chain(n)
    views = LeadingViews(graph)
    grid = np.arange((n + 1) * 8, dtype=np.float32).reshape(n + 1, 8)
    layouts = [eager.tensor(grid[:n, :4].copy()), eager.tensor(grid[:4, :n].copy()).t(),
               eager.tensor(grid)[1:, 2:6]]
    for x in layouts + layouts:  # each layout twice, alternating
        got = views([x])
        _same_views(got, interpreter.run(graph, [x]))
        assert got[2] is x


@pytest.mark.parametrize("fn, kernels", [
    (lambda x: x.mean(-1), 1), (lambda x: x.mean(0), 1),
    (lambda x: (x.sum(-1) * 2).exp(), 1),
    (lambda x: x + x.sum(-1), 2),  # s broadcasts along the last dim of a square x: not a row
    (lambda x: x + x.sum(0), 1)])  # ... along the kept dim: a row value
def test_a_reduced_value_without_its_reduced_dims_is_finished_in_the_row_kernel(fn, kernels):
    x = eager.tensor(np.random.default_rng(11).standard_normal((33, 33)).astype(np.float32))
    _native_vs_eager(fn, x)
    assert len(compiler.lower(fn, x).kernels) == kernels


@pytest.mark.parametrize("fn", [lambda x: x.amax(-1), lambda x: x.amin(-1), lambda x: x.amax(0),
                                lambda x: x.amin(0, keepdim=True),
                                lambda x: eager.softmax(x, -1), lambda x: x.amax(-1).exp()])
@pytest.mark.parametrize("shape", [(7, 257), (70, 67), (19, 3)], ids=str)
def test_a_nan_anywhere_in_a_row_makes_its_max_nan(fn, shape):
    """Rows keep partial maxima in several parts, plain maxima with a NaN flag: a NaN in
    any part, in the masked last step, first or last, still wins."""
    a = np.random.default_rng(12).standard_normal(shape).astype(np.float32)
    for r, i in [(0, 0), (1, shape[1] - 1), (2, 17), (3, 33), (4, 50), (5, 64), (6, 1)]:
        a[r % shape[0], i % shape[1]] = np.nan
    a[-1, :] = -np.inf
    _native_vs_eager(fn, eager.tensor(a))


@pytest.mark.parametrize("columns", [1, 15, 16, 17, 63, 64, 65, 100, 130, 255, 256, 337])
@pytest.mark.parametrize("fn", [lambda x: x.sum(0), lambda x: eager.softmax(x, 0),
                                lambda x: x.amin(0) * x.mean(0), lambda x: x.argmax(0)])
def test_column_kernels_take_groups_of_vectors_and_the_rows_left(fn, columns):
    """Rows in the lanes go 16 (AVX-512) or 8 (AVX2) vectors at a time, then 4, then one
    vector at a time, then a masked one (pointwise.column_groups): every count of
    adjacent rows around those sizes, on either ISA (337 = 256 + 64 + 16 + 1 float32
    rows with AVX-512, 5 x 64 + 16 + 1 with AVX2)."""
    a = np.random.default_rng(13).standard_normal((23, columns)).astype(np.float32)
    _native_vs_eager(fn, eager.tensor(a))
    _native_vs_eager(fn, eager.tensor(a[:, :1]).expand(23, columns))  # one column, read again
    _native_vs_eager(lambda x: fn(x + eager.tensor(a[:1])), eager.tensor(a))  # a broadcast row


@pytest.mark.parametrize("columns", [127, 128, 129, 337])
def test_float64_column_kernels_take_their_groups_too(columns):
    a = np.random.default_rng(14).standard_normal((19, columns))
    _native_vs_eager(lambda x: x.sum(0), eager.tensor(a))
    _native_vs_eager(lambda x: x.sum(0) + x.amax(0), eager.tensor(a))


def test_column_groups_keep_the_accumulators_in_half_the_registers():
    from types import SimpleNamespace as Fake

    from runtime.cpu.kernel_ir import column_groups
    from ir.ops import Op

    def spec(*ops, dtype=eager.float32):
        value = Fake(type=Fake(dtype=dtype))
        return Fake(nodes=[Fake(op=op, inputs=[value]) for op in ops])
    assert column_groups(spec(Op.SUM), 16) == [16, 4] and column_groups(spec(Op.SUM), 8) == [8, 4]
    assert column_groups(spec(Op.SUM, Op.SUM), 16) == [8, 4]
    assert column_groups(spec(Op.AMAX), 16) == [8, 4]  # maxima and NaN flags
    assert column_groups(spec(Op.AMAX, dtype=eager.int64), 16) == [16, 4]  # no flags
    assert column_groups(spec(Op.ARGMAX), 16) == [5, 4]  # values and int64 indices
    assert column_groups(spec(Op.SUM, Op.AMAX), 8) == [2]


def test_softmax_keeps_its_exponentials_in_its_output_between_passes():
    """The last pass of softmax reads exp(x - max) back from the output's memory rather
    than computing it again; log_softmax's x - max is one op, computed again."""
    from runtime.cpu.kernel_ir import RowPasses
    x = eager.tensor(np.random.default_rng(14).standard_normal((37, 53)).astype(np.float32))
    stashes = {}
    for name, fn in [("softmax", lambda t: eager.softmax(t, -1)),
                     ("log_softmax", lambda t: eager.log_softmax(t, -1)),
                     ("layer_norm", REDUCTIONS["layer_norm"])]:
        (kernel,) = compiler.lower(fn, x).kernels
        plan = RowPasses(kernel.spec, stash=True)
        stashes[name] = None if plan.stash is None else plan.producer[plan.stash[0]].op
    assert stashes == {"softmax": Op.EXP, "log_softmax": None, "layer_norm": None}


@pytest.mark.parametrize("fn, specialised", [
    (lambda x: eager.softmax(x, -1), True),
    (lambda x: eager.log_softmax(x, -1), True),
    (lambda x: eager.softmax(x, 0), True),  # rows in the lanes
    (lambda x: (x - x.amax(-1, keepdim=True)).exp().sum(-1), True),
    (lambda x: (x * 2 - x.amax(-1, keepdim=True)).exp().sum(-1), False),  # another's max
    (lambda x: (x - x.amin(-1, keepdim=True)).exp().sum(-1), False),
    (lambda x: (x.amax(-1, keepdim=True) - x).exp().sum(-1), False),
    (lambda x: eager.sub(x, x.amax(-1, keepdim=True), alpha=0.5).exp().sum(-1), False),
    (lambda x: (x - x.amax(-1, keepdim=True)).double().exp().sum(-1), False)])
def test_row_kernels_take_exp_nonpositive_only_for_a_value_minus_its_row_max(fn, specialised):
    """x - max(x) over the kernel's rows is <= 0 or nan: its exp is vmath's
    exp_nonpositive; any other exp argument keeps the exp of every argument."""
    x = eager.tensor(np.random.default_rng(16).standard_normal((19, 70)).astype(np.float32))
    (kernel,) = compiler.lower(fn, x).kernels
    assert ("kiln.vmath.exp_nonpositive" in kernel.llvm_ir) == specialised
    _native_vs_eager(fn, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_exponentials_are_exps_bit_for_bit(dtype):
    """Rows whose sum is exactly 1 (one 0 and exponentials far below it, subnormal ones
    and zeros among them): softmax's output is exp(x - max) as the elementwise kernel's
    exp gives it, bit for bit."""
    rng = np.random.default_rng(17)
    low, high = (-120.0, -20.0) if dtype is np.float32 else (-760.0, -40.0)
    a = rng.uniform(low, high, (37, 53)).astype(dtype)
    a[:, 5] = 0.0
    a[::3, 40:] = -np.inf
    shifted = a - a.max(-1, keepdims=True)
    softmax = compiler.compile(lambda x: eager.softmax(x, -1), backend="native")
    exp = compiler.compile(lambda x: x.exp(), backend="native")
    got, want = softmax(eager.tensor(a)).numpy(), exp(eager.tensor(shifted)).numpy()
    _assert_ran_natively(softmax)
    _assert_ran_natively(exp)
    assert ((want > 0) & (want < np.finfo(dtype).tiny)).any() and (want == 0).any()
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("fn", [
    lambda x: eager.softmax(x, -1).double(),  # an output of another type: no stash
    lambda x: (eager.softmax(x, -1), (x - x.amax(-1, keepdim=True)).exp()),
    lambda x: (x.exp() / x.exp().sum(-1, keepdim=True)) * 3,
    lambda x: x / x.sum(-1, keepdim=True).double()])
def test_row_kernels_stash_and_divide_only_where_they_may(fn):
    x = eager.tensor(np.random.default_rng(15).standard_normal((19, 70)).astype(np.float32))
    compiled = compiler.compile(fn, backend="native")
    got, expected = compiled(x), fn(x)
    for g, e in zip(got if isinstance(got, tuple) else [got],
                    expected if isinstance(expected, tuple) else [expected]):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-6)
    _assert_ran_natively(compiled)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_abs_clears_the_sign_of_negative_zero_and_nan_as_numpy_does(dtype):
    """A float's |x| is its sign bit cleared (-0.0 -> 0.0, -nan -> nan without sign, as
    numpy and PyTorch give them); an integer's is 0 - x where negative."""
    if np.dtype(dtype).kind == "f":
        values = np.array([-np.nan, np.nan, -0.0, 0.0, -3.5, 2.0, -np.inf, np.inf] * 5, dtype)
    else:
        values = np.array([-7, 0, 5, np.iinfo(dtype).max, -np.iinfo(dtype).max] * 8, dtype)
    got = compiler.compile(lambda x: x.abs(), backend="native")(eager.tensor(values)).numpy()
    want = np.abs(values)
    assert got.dtype == want.dtype
    assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
