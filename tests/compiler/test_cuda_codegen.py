"""CUDA kernels of fused graphs (runtime/cpu/cuda, compiler/backends/cuda), tested
without a GPU: every kernel made here assembles with `ptxas -arch=sm_90` (skipped, with
the reason, where ptxas is missing), and its IR runs on the host emulator
(runtime/cuda/emulator/launch.py) against eager's CPU result and numpy float64 references:
every pointwise op of the records, odd sizes, no elements, broadcast and non-contiguous
inputs, gathers, reductions over rows shorter and longer than a block, softmax,
log_softmax and layer_norm rows. Emulated sizes stay small: the emulator runs Python
per thread."""
import importlib.util
import math
import sys
from pathlib import Path

import llvmlite.ir as ir
import numpy as np
import pytest

import compiler
import eager
from compiler.backends import cuda as cuda_backend
from compiler.backends import native
from compiler.backends.fused import FusedKernel
from runtime.cpu import values as V
from runtime.cpu import vmath
from runtime.cuda.codegen import CudaKernel
from runtime.cuda.codegen.rows import threads_for
from ir.ops import Op
from ir.records import RECORDS
from runtime.llvm import toolkit as llvm_ir
from runtime.cuda import current, nvptx

sys.path.insert(0, str(Path(__file__).parents[1] / "eager"))  # the op table lives there
import op_table  # noqa: E402
from op_cases import Maker  # noqa: E402

F = eager.nn.functional
HAS_EMULATOR = importlib.util.find_spec("runtime.cuda.emulator.launch") is not None
needs_emulator = pytest.mark.skipif(not HAS_EMULATOR,
                                    reason="runtime/cuda/emulator/launch.py is not on this branch")


# helpers --------------------------------------------------------------------------------
def _report(launch, arch="sm_90", spills=False):
    """ptxas's report on the launch's kernel: it assembles, and (unless `spills`: a
    block size chosen by a test, not the generator) does not spill."""
    try:
        report = launch.report(arch)
    except nvptx.PtxasMissing as missing:
        pytest.skip(str(missing))
    assert report.registers > 0
    if not spills:
        assert (report.spill_stores, report.spill_loads) == (0, 0), report
    return report


def _lowered(fn, *tensors):
    lowered = compiler.lower(fn, *tensors, target="cuda")
    assert lowered.not_cuda == {}
    return lowered


def _flat(a: np.ndarray) -> np.ndarray:
    """The memory an operand's kernel pointer walks: a 1-D array from its first element
    to its last (a broadcast or strided view keeps its strides this way)."""
    if a.size == 0:
        return np.empty(0, a.dtype)
    extent = 1 + sum((n - 1) * s // a.itemsize for n, s in zip(a.shape, a.strides))
    return np.lib.stride_tricks.as_strided(a, (extent,), (a.itemsize,))


def _emulate(fn, *tensors, threads=None, blocks=None, lowered=None):
    """fn's one fused node as a CUDA kernel for these tensors' layouts, run on the
    emulator: (its outputs, the status word or None, the launch). `lowered`: fn already
    lowered for these tensors, not lowered again, and its kernel run as it is unless
    `threads` asks for another block (a kernel made here is assembled by ptxas first)."""
    (graph,) = (lowered or compiler.lower(fn, *tensors, target="cuda")).optimized
    fused = [n for n in graph.nodes if n.op is Op.FUSED]
    assert len(fused) == 1, graph
    node, env = fused[0], dict(zip(graph.inputs, tensors))
    operands = [t._np() for t in FusedKernel(node).operands_of(
        [env[v] for v in node.inputs[0]])]
    outputs = [np.full(v.type.shape, 7, v.type.dtype.np) for v in node.outputs]
    if lowered is not None and threads is None:
        (launch,) = lowered.cuda_kernels  # (its ptxas report is lower()'s)
    else:
        launch = cuda_backend.kernel_for(node, operands + outputs, threads)
        _report(launch, spills=threads is not None)
    status = np.zeros(1, np.int64) if launch.checked else None
    args = [_flat(a) for a in operands + outputs] + ([status] if status is not None else [])
    grid = (blocks, 1, 1) if blocks else launch.grid
    if grid[0]:
        launch.kernel.emulate(grid, args)
    return outputs, status, launch


def _same(got, want, dtype):
    """The emulated result against eager's CPU kernels (same polynomials, so only fused
    multiply-adds may round differently): NaNs where eager has them."""
    want = np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype.kind == "f":
        rtol = 1e-5 if got.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


# every pointwise op of the records ------------------------------------------------------
def _on_cuda(op: Op) -> bool:
    return op in V.native_ops() and not (op in RECORDS and RECORDS[op].pointwise is not None
                                         and RECORDS[op].pointwise.not_on_cuda)


def _pointwise_cases():
    params = []
    for case in op_table.ELEMENTWISE:
        if all(_on_cuda(op) for op in case.ops):
            params += [pytest.param(case, dtype, id=f"{case.name}-{dtype}")
                       for dtype in case.dtypes if dtype in V.SUPPORTED]
    return params


def _small_samples(case, dtype):
    """The case's largest sample with every array non-empty and at most 40 elements, and
    its last (for floats the special values: nan, infinities, -0.0), as (tensors, fn)."""
    fitting = [s for s in case.samples(Maker(dtype))
               if all(0 < a.size <= 40 for a in s.args if isinstance(a, np.ndarray))]
    picked = [max(fitting, key=lambda s: max(np.size(a) for a in s.args))]
    if fitting[-1] is not picked[0]:
        picked.append(fitting[-1])
    for sample in picked:
        arrays = [i for i, a in enumerate(sample.args) if isinstance(a, np.ndarray)]

        def fn(*ts, sample=sample, arrays=arrays):
            args = list(sample.args)
            for i, t in zip(arrays, ts):
                args[i] = t
            return case.fn(eager, *args, **sample.kwargs)
        yield [eager.tensor(sample.args[i]) for i in arrays], fn


def test_an_op_whose_emitter_has_no_cuda_form_stays_out_of_cuda_kernels(monkeypatch):
    """An op whose record says Pointwise.not_on_cuda (sin made one here: no op has one
    at present) runs interpreted; the ops around it still fuse."""
    record = RECORDS[Op.SIN]
    monkeypatch.setattr(record, "pointwise", record.pointwise._replace(not_on_cuda="a test"))
    x = eager.tensor(np.linspace(-3, 3, 12, dtype=np.float32))
    lowered = compiler.lower(lambda t: (t * 2).sin() + 1, x, target="cuda")
    outside = [n.op for g in lowered.optimized for n in g.nodes
               if n.op not in (Op.FUSED, Op.SCALAR)]
    assert outside == [Op.SIN] and len(lowered.cuda_kernels) == 2


def test_sin_fuses_into_one_cuda_kernel_with_the_ops_around_it():
    x = eager.tensor(np.linspace(-3, 3, 12, dtype=np.float32))
    lowered = compiler.lower(lambda t: (t * 2).sin() + 1, x, target="cuda")
    outside = [n.op for g in lowered.optimized for n in g.nodes
               if n.op not in (Op.FUSED, Op.SCALAR)]
    assert outside == [] and len(lowered.cuda_kernels) == 1


def test_the_op_table_covers_every_pointwise_op_kernels_emit():
    covered = {op for case in op_table.ELEMENTWISE for op in case.ops}
    assert V.native_ops() - V.COPIES <= covered


@pytest.fixture(scope="module")
def lowered_samples():
    """_small_samples(case, dtype) that eager runs, as (tensors, fn, eager's result, fn
    lowered for the tensors): lowered once for both tests of each op below (a lowering
    runs LLVM and ptxas; lowering three times took half of these tests' time)."""
    made = {}

    def samples(case, dtype):
        if (case.name, dtype) not in made:
            found = []
            for tensors, fn in _small_samples(case, dtype):
                try:
                    want = fn(*tensors)
                except (RuntimeError, TypeError, ValueError):
                    continue  # eager refuses it (negating bools): so does capture
                found.append((tensors, fn, want, _lowered(fn, *tensors)))
            made[case.name, dtype] = found
        return made[case.name, dtype]
    return samples


@pytest.mark.parametrize("case, dtype", _pointwise_cases())
def test_every_pointwise_op_makes_a_kernel_that_ptxas_assembles(case, dtype, lowered_samples):
    for _, _, _, lowered in lowered_samples(case, dtype):
        outside = [n for g in lowered.optimized for n in g.nodes
                   if n.op not in (Op.FUSED, Op.SCALAR) and not n.op.schema.is_view]
        assert all(not native.emits(n) for n in outside), outside  # (pow of integers)
        assert lowered.cuda_kernels or outside
        for launch in lowered.cuda_kernels:
            _report(launch)


@needs_emulator
@pytest.mark.parametrize("case, dtype", _pointwise_cases())
def test_every_pointwise_op_emulated_matches_eager(case, dtype, lowered_samples):
    for tensors, fn, want, lowered in lowered_samples(case, dtype):
        if not lowered.cuda_kernels:
            continue  # no kernel holds it (pow of integers, checked above)
        (got,), _, _ = _emulate(fn, *tensors, lowered=lowered)
        _same(got, want.numpy(), dtype)


# layouts and sizes ----------------------------------------------------------------------
def _chain(x, y):
    return ((x * y + 1.5).sigmoid() - y).abs()


def _reference_chain(x, y):
    x, y = x.astype(np.float64), y.astype(np.float64)
    return np.abs(1 / (1 + np.exp(-(x * y + 1.5))) - y)


def _layouts():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 11)).astype(np.float32)
    b = rng.standard_normal((11,)).astype(np.float32)
    wide = rng.standard_normal((6, 22)).astype(np.float32)
    return {
        "odd size, one block of 32 over 37 elements": (
            eager.tensor(rng.standard_normal(37).astype(np.float32)),
            eager.tensor(rng.standard_normal(37).astype(np.float32))),
        "broadcast row": (eager.tensor(a), eager.tensor(b)),
        "transposed": (eager.tensor(np.ascontiguousarray(a.T)).t(), eager.tensor(a)),
        "strided": (eager.tensor(wide)[:, ::2], eager.tensor(a)),
        "expanded column": (eager.tensor(a[:, :1]).expand(6, 11), eager.tensor(b)),
        "0-d": (eager.tensor(np.float32(0.25)), eager.tensor(b)),
        "float64": (eager.tensor(a.astype(np.float64)), eager.tensor(b.astype(np.float64))),
    }


@pytest.mark.parametrize("layout", list(_layouts()))
def test_an_elementwise_chain_assembles_for_every_layout(layout):
    x, y = _layouts()[layout]
    (launch,) = _lowered(_chain, x, y).cuda_kernels
    report = _report(launch)
    assert report.shared_bytes == 0


@needs_emulator
@pytest.mark.parametrize("layout", list(_layouts()))
def test_an_elementwise_chain_emulated_matches_numpy_for_every_layout(layout):
    x, y = _layouts()[layout]
    (got,), _, _ = _emulate(_chain, x, y, threads=32, blocks=1)
    want = _reference_chain(x.numpy(), y.numpy())
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@needs_emulator
def test_no_elements_launch_nothing_and_the_kernel_writes_nothing():
    x, y = (eager.tensor(np.zeros((0, 3), np.float32)) for _ in range(2))
    (got,), _, launch = _emulate(_chain, x, y)
    assert launch.grid == (0, 1, 1) and got.shape == (0, 3)
    out = np.full(4, 7, np.float32)
    launch.kernel.emulate((1, 1, 1), [np.zeros(4, np.float32)] * 2 + [out])
    assert (out == 7).all()


def test_the_grid_covers_the_elements_up_to_a_cap():
    x = eager.tensor(np.zeros(1000, np.float32))
    (launch,) = _lowered(_chain, x, x).cuda_kernels
    assert "_vector_" in launch.name  # 4 elements a thread: 250 threads
    assert launch.block == (256, 1, 1) and launch.grid == (1, 1, 1)
    (strided,) = _lowered(_chain, x[::2], x[::2]).cuda_kernels
    assert "_vector_" not in strided.name and strided.grid == (2, 1, 1)
    assert cuda_backend.blocks_for(10 ** 9, 256) == cuda_backend.MAX_BLOCKS
    assert cuda_backend.blocks_for(0, 256) == 0


# gathers --------------------------------------------------------------------------------
def _embedding_rows(table, index):
    return table[index] * 2


@needs_emulator
def test_a_gather_reads_indexed_rows_and_negative_indices_count_from_the_end():
    table = eager.tensor(np.arange(15, dtype=np.float32).reshape(5, 3))
    index = eager.tensor(np.array([4, 0, -1, 2]))
    (got,), status, launch = _emulate(_embedding_rows, table, index, threads=32)
    assert launch.checked and status[0] == 0
    np.testing.assert_array_equal(got, table.numpy()[[4, 0, -1, 2]] * 2)


@needs_emulator
def test_an_index_out_of_range_sets_the_status_word_and_reads_nothing_outside():
    table = eager.tensor(np.arange(15, dtype=np.float32).reshape(5, 3))
    good = eager.tensor(np.array([1, 2]))
    lowered = _lowered(_embedding_rows, table, good)
    (launch,) = lowered.cuda_kernels
    status, out = np.zeros(1, np.int64), np.zeros(6, np.float32)
    launch.kernel.emulate(launch.grid, [table.numpy().ravel(), np.array([1, 5]), out, status])
    assert status[0] == 1
    np.testing.assert_array_equal(out[:3], table.numpy()[1] * 2)


def test_index_select_and_gather_make_kernels_that_ptxas_assembles():
    table = eager.tensor(np.arange(15, dtype=np.float64).reshape(5, 3))
    index = eager.tensor(np.array([[0, 2, 1]], dtype=np.int32))
    for fn in (lambda t, i: eager.index_select(t, 1, i[0]).exp(),
               lambda t, i: eager.gather(t, 0, i.long()) + 1):
        for launch in _lowered(fn, table, index).cuda_kernels:
            _report(launch)


# reductions and rows --------------------------------------------------------------------
def _softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def _layer_norm(a):
    centred = a - a.mean(-1, keepdims=True)
    return centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-5)


ROWS = {  # name: (function, numpy float64 reference)
    "sum_last": (lambda x: x.sum(-1), lambda a: a.sum(-1)),
    "mean_last_keepdim": (lambda x: x.mean(-1, keepdim=True), lambda a: a.mean(-1, keepdims=True)),
    "amax_last": (lambda x: x.amax(-1), lambda a: a.max(-1)),
    "amin_first": (lambda x: x.amin(0), lambda a: a.min(0)),
    "sum_all": (lambda x: x.sum(), lambda a: a.sum()),
    "argmax_last": (lambda x: x.argmax(-1), lambda a: a.argmax(-1)),
    "argmin_first": (lambda x: x.argmin(0), lambda a: a.argmin(0)),
    "var_last": (lambda x: x.var(-1), lambda a: a.var(-1, ddof=1)),
    "softmax": (lambda x: eager.softmax(x, -1), lambda a: _softmax(a, -1)),
    "log_softmax_first": (lambda x: eager.log_softmax(x, 0), lambda a: np.log(_softmax(a, 0))),
    "layer_norm": (lambda x: F.layer_norm(x, x.shape[-1:]), _layer_norm),
    "centre": (lambda x: x - x.mean(-1, keepdim=True), lambda a: a - a.mean(-1, keepdims=True)),
}


def _rows_input(shape, dtype, seed=5):
    """Values rounded to tenths, so argmax and argmin meet ties."""
    a = np.round(np.random.default_rng(seed).standard_normal(shape) * 10) / 10
    return eager.tensor(a.astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(ROWS))
def test_every_row_kernel_assembles_without_spills(name, dtype):
    fn, _ = ROWS[name]
    lowered = _lowered(fn, _rows_input((300, 9) if "first" in name else (9, 300), dtype))
    reductions = [k for k in lowered.cuda_kernels if k.kind == "reduction"]
    assert reductions
    for launch in lowered.cuda_kernels:
        # a double var divides twice (the mean, then the row's result): ptxas's double
        # division routine, twice in one kernel, spills 8 bytes around its calls
        report = _report(launch, spills=(name, dtype) == ("var_last", "float64"))
        if launch.kind == "reduction":
            assert 0 < report.shared_bytes <= 32 * 8 * 4  # warps' partial results
            assert launch.block == (256, 1, 1)


@needs_emulator
@pytest.mark.parametrize("shape", [(3, 7), (2, 100)], ids=["rows_shorter_than_a_block",
                                                          "rows_longer_than_a_block"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(ROWS))
def test_row_kernels_emulated_match_numpy(name, dtype, shape):
    """Blocks of two warps, fewer blocks than rows (a block takes several rows)."""
    fn, reference = ROWS[name]
    x = _rows_input(shape if "first" not in name else shape[::-1], dtype)
    (got,), _, launch = _emulate(fn, x, threads=64, blocks=2)
    want = reference(x.numpy().astype(np.float64))
    if name.startswith("arg"):
        np.testing.assert_array_equal(got, want)
    else:
        tolerance = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)


def test_a_row_kernel_takes_whole_warps():
    x = _rows_input((2, 5), "float32")
    (graph,) = _lowered(lambda t: t.sum(-1), x).optimized
    with pytest.raises(ValueError, match="whole warps"):
        cuda_backend.kernel_for(graph.nodes[0], threads=48)
    launch = cuda_backend.kernel_for(graph.nodes[0])
    assert launch.block == (32, 1, 1) and launch.grid == (2, 1, 1)
    assert [threads_for(n) for n in (0, 32, 33, 200, 5000)] == [32, 32, 128, 224, 256]


def test_a_reduction_over_no_elements_is_refused_with_its_reason():
    x = eager.tensor(np.zeros((0, 3), np.float32))
    lowered = compiler.lower(lambda t: t.sum(0), x, target="cuda")
    assert lowered.cuda_kernels == []
    assert "no elements" in " ".join(lowered.not_cuda.values())


# math on NVPTX --------------------------------------------------------------------------
def _math_kernel(name, ty):
    """out[i] = vmath name(x[i] (, y[i])) for i < n, as a grid-stride kernel."""
    module = nvptx.new_module(f"kiln_vmath_{name}")
    pointer = ir.PointerType(ty, 1)
    arity = vmath._BODIES[name][1]
    fn, b = nvptx.kernel(module, f"kiln_vmath_{name}", [pointer] * (arity + 1) + [llvm_ir.I64])
    *ins, out, n = fn.args
    start, step = llvm_ir.Target.of(module).grid_stride(b)
    with llvm_ir.for_range(b, start, n, step) as i:
        args = [b.load(llvm_ir.at(b, x, i)) for x in ins]
        b.store(vmath.emit(b, name, *args), llvm_ir.at(b, out, i))
    b.ret_void()
    return CudaKernel(module, f"kiln_vmath_{name}", (32, 1, 1))


FLOAT_TYPES = {"float32": ir.FloatType(), "float64": ir.DoubleType()}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", vmath.NAMES)
def test_vmath_compiles_for_nvptx_with_no_library_call(name, dtype):
    kernel = _math_kernel(name, FLOAT_TYPES[dtype])
    ptx = kernel.ptx()
    assert "call" not in ptx  # every helper inlined; no libm, no llvm.exp/log libcall
    try:
        report = nvptx.ptxas_report(ptx)[kernel.name]
    except nvptx.PtxasMissing as missing:
        pytest.skip(str(missing))
    assert (report.spill_stores, report.spill_loads) == (0, 0)


_erf = np.vectorize(math.erf, otypes=[np.float64])
MATH_REFERENCES = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": _erf, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "pow": np.power,
    "expm1": np.expm1, "log1p": np.log1p, "exp2": np.exp2, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "atan": np.arctan,
    "atan2": np.arctan2, "asin": np.arcsin, "acos": np.arccos, "sin": np.sin, "cos": np.cos,
    "tan": np.tan}


@needs_emulator
@pytest.mark.parametrize("name, dtype", [
    pytest.param(name, dtype, id=f"{name}-{dtype}")
    for name in vmath.NAMES for dtype in ("float32", "float64")])
def test_vmath_emulated_on_nvptx_ir_matches_numpy(name, dtype):
    """The CPU's polynomials at scalar width, special values included, within the
    accuracy vmath's table states (under 2 ulp)."""
    values = np.array([np.nan, -np.inf, -30.5, -2.5, -1.0, -0.3, -0.0, 0.0, 1e-30, 0.2, 0.9,
                       1.0, 1.7, 3.0, 20.0, 100.0, 800.0, np.inf], dtype)
    if name == "pow":
        values = np.abs(values)
    exponents = np.resize(np.array([0.5, 2.0, -1.5, 3.0, 0.0, -2.0], dtype), values.size)
    kernel = _math_kernel(name, FLOAT_TYPES[dtype])
    arity = vmath._BODIES[name][1]
    out = np.zeros_like(values)
    kernel.emulate((1, 1, 1), [values, exponents][:arity] + [out, values.size])
    with np.errstate(all="ignore"):
        want = MATH_REFERENCES[name](*[a.astype(np.float64) for a in
                                        [values, exponents][:arity]]).astype(dtype)
    np.testing.assert_allclose(out, want, rtol=2.5e-7 if dtype == "float32" else 5e-16,
                               atol=0, equal_nan=True)


# compiler.lower(target="cuda") ----------------------------------------------------------
def test_lower_for_cuda_gives_each_kernel_its_ir_ptx_report_and_launch():
    x = eager.tensor(np.random.default_rng(1).standard_normal((4, 40)).astype(np.float32))
    lowered = compiler.lower(lambda t: eager.softmax(t * 2, -1) + 1, x, target="cuda")
    assert lowered.target == "cuda" and lowered.arch == current.device_arch()
    assert lowered.kernels == [] and lowered.not_cuda == {}
    (launch,) = lowered.cuda_kernels
    assert launch.kind == "reduction" and launch.grid == (4, 1, 1)
    assert launch.block == (128, 1, 1)
    assert "nvvm.shfl.sync.down" in launch.llvm_ir and "addrspace(3)" in launch.llvm_ir
    ptx = lowered.ptx[launch.name]
    assert f".target {lowered.arch}" in ptx and "shfl.sync.down" in ptx and "bar.sync" in ptx
    if lowered.ptxas_missing:
        pytest.skip(lowered.ptxas_missing)
    report = lowered.ptxas[launch.name]
    assert report.registers > 0 and report.shared_bytes > 0
    assert f"CUDA kernel {launch.name}" in str(lowered) and "registers" in str(lowered)


def test_lower_for_cuda_names_the_nodes_without_a_kernel_and_why():
    a = eager.tensor(np.ones((4, 8), np.float32))
    b = eager.tensor(np.ones((8, 3), np.float32))
    lowered = compiler.lower(lambda x, y: (x.exp() @ y).relu(), a, b, target="cuda")
    assert lowered.cuda_kernels == []
    assert ["prologue" in why for why in lowered.not_cuda.values()] == [True]


def test_lower_for_cuda_makes_kernels_for_the_layouts_the_arguments_have():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    transposed = eager.tensor(np.ascontiguousarray(a.T)).t()
    (launch,) = _lowered(lambda t: t * 2, transposed).cuda_kernels
    assert "urem" in launch.llvm_ir  # two dims walked: a contiguous copy would be one
    (contiguous,) = _lowered(lambda t: t * 2, eager.tensor(a)).cuda_kernels
    assert "urem" not in contiguous.llvm_ir


def test_lower_keeps_the_cpu_target_by_default_and_refuses_others():
    x = eager.tensor(np.ones(5, np.float32))
    lowered = compiler.lower(lambda t: t.exp(), x)
    assert lowered.target == "cpu" and lowered.kernels and lowered.cuda_kernels == []
    with pytest.raises(ValueError, match="unknown lowering target 'rocm'"):
        compiler.lower(lambda t: t.exp(), x, target="rocm")
