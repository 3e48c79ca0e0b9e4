"""The path a compiled function takes while background workers compile its kernels: each
fused node runs through the interpreter on its first call, natively on the next
(KILN_COMPILE_WORKERS=inline makes that deterministic: runtime/llvm/compile_service.py). Both
must give eager's values and types: a merged constant once made an integer `where`
interpreted as float and broke the char transformer's compiled training step."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_random_programs import program, run_program

import eager
from benchmarks import train
from compiler.backends.native.gemm_node import GemmNode
from runtime.llvm import compile_service


@pytest.fixture(autouse=True)
def interpreted_first(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "inline")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))  # nothing compiled on disk
    compile_service.reset()
    yield
    compile_service.reset()


def _same(got, expected, rtol=2e-5, atol=2e-6):
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=rtol, atol=atol)


@settings(max_examples=25, deadline=None)
@given(program, st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**16))
def test_random_programs_interpreted_then_native_give_the_eager_result(steps, rows, cols,
                                                                       seed):
    rng = np.random.default_rng(seed)
    inputs = [eager.tensor(rng.standard_normal((rows, cols)).astype(np.float32))
              for _ in range(2)]
    expected = run_program(steps, inputs)
    compiled = eager.compile(lambda a, b: run_program(steps, [a, b]))
    for _ in range(3):  # interpreted, then native (a GEMM's epilogue one call later)
        _same(compiled(*inputs), expected)


def _mixed(x, y, labels):
    """Integer and boolean values through fused nodes, beside float ones."""
    safe = eager.where(labels != -100, labels, 0)
    picked = x.gather(1, safe.unsqueeze(1)).squeeze(1)
    best = (x @ y).argmax(-1) + safe
    return picked * (labels != -100), best, (x > 0).sum(-1), eager.where(x > y.t(), 1, 0)


def test_integer_and_boolean_values_keep_their_types_interpreted_and_native():
    rng = np.random.default_rng(1)
    x = eager.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    y = eager.tensor(rng.standard_normal((4, 6)).astype(np.float32))
    labels = eager.tensor([1, -100, 3, 0, -100, 2])
    expected = _mixed(x, y, labels)
    compiled = eager.compile(_mixed)
    for _ in range(3):
        _same(compiled(x, y, labels), expected)


def test_an_interpretation_that_changes_a_type_raises_instead_of_going_on():
    import ir
    from compiler import interpreter
    graph = ir.parse("""
        graph(%x: i64[3], %m: b8[3]):
          %0: f32[] = scalar(value=0.0)
          %1: i64[3] = where(%m, %x, %0)
          return (%1)
        """)  # what the merged constant left: eager's where promotes to float
    inputs = [eager.tensor([1, 2, 3]), eager.tensor([True, False, True])]
    assert interpreter.prepare(graph)(inputs)[0].dtype == eager.float32
    with pytest.raises(interpreter.InterpreterError, match=r"gave f32\[3\], not its type i64"):
        interpreter.prepare_checked(graph)(inputs)


@pytest.mark.parametrize("cases", [train.mlp_cases, train.transformer_cases],
                         ids=["mlp", "char transformer"])
def test_compiled_training_steps_interpreted_then_native_match_eager(cases):
    case, = cases(quick=True)
    steps = {impl.label: impl.build() for impl in case.impls
             if impl.label in ("kiln eager", "kiln compiled", train.KILN_WHOLE_STEP)}
    assert len(steps) == 3
    for _ in range(3):  # every kernel interpreted, then (nearly) all native
        losses = {label: step().item() for label, step in steps.items()}
        reference = losses.pop("kiln eager")
        for label, loss in losses.items():
            assert loss == pytest.approx(reference, rel=2e-4), label
    assert compile_service.submitted() > 0


def test_gemm_nodes_count_their_interpreted_calls_until_their_kernels_are_ready():
    rng = np.random.default_rng(2)  # sizes no other test multiplies (kernels are kept)
    a = eager.tensor(rng.standard_normal((37, 53)).astype(np.float32))
    b = eager.tensor(rng.standard_normal((53, 41)).astype(np.float32))
    compiled = eager.compile(lambda a, b: (a @ b).relu())
    for _ in range(4):  # a product seen twice gets a kernel of its own: waited for too
        _same(compiled(a, b), (a @ b).relu())
    entry, = compiled.entries.values()
    (node,) = [k for k in entry.run.kernels.values() if isinstance(k, GemmNode)]
    waited = node.calls_while_compiling
    compiled(a, b)
    assert 1 <= waited < 4 and node.calls_while_compiling == waited
