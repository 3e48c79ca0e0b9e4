"""Property test: random small programs give the same results compiled (the "eager"
backend, through capture and the interpreter, and the "native" one, through the passes
and generated kernels) as run eagerly; their captured graphs
print, parse back and verify; and the optimised graph (every pass, verified after
each) computes what the captured one does."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
import eager
import ir
from compiler import guards, interpreter
from compiler.passes import optimize

UNARY = [lambda a: a.exp().tanh(), lambda a: a.relu(), lambda a: a.sigmoid(),
         lambda a: -a, lambda a: a.abs().sqrt(), lambda a: eager.gelu(a),
         lambda a: a.clamp(-0.5, 0.5), lambda a: eager.softmax(a, -1),
         lambda a: a - a.mean(-1, keepdim=True), lambda a: a * 2.5 + 1,
         lambda a: a.t().reshape(-1).reshape(a.shape),  # views over a copy
         lambda a: a.t().contiguous().t() * a, lambda a: a.sum(0, keepdim=True) + a,
         lambda a: a[:, ::2].sum(-1, keepdim=True) - a, lambda a: a.argmax(-1, keepdim=True) + a]
BINARY = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b,
          lambda a, b: eager.maximum(a, b), lambda a, b: eager.where(a > b, a, b),
          lambda a, b: a / (b.abs() + 1), lambda a, b: a @ b.t() @ b]

program = st.lists(st.tuples(st.booleans(), st.integers(0, 14), st.integers(0, 6),
                             st.integers(0, 10), st.integers(0, 10)), min_size=1, max_size=8)


def run_program(steps, inputs):
    values = list(inputs)
    for binary, u, b, i, j in steps:
        if binary:
            values.append(BINARY[b](values[i % len(values)], values[j % len(values)]))
        else:
            values.append(UNARY[u](values[i % len(values)]))
    return values[-1].sum(0), values[-1]



@settings(max_examples=60, deadline=None)
@given(program, st.integers(1, 4), st.integers(1, 5), st.integers(0, 2**16))
def test_random_programs_compile_to_the_eager_result(steps, rows, cols, seed):
    rng = np.random.default_rng(seed)
    inputs = [eager.tensor(rng.standard_normal((rows, cols)).astype(np.float32))
              for _ in range(2)]
    expected = run_program(steps, inputs)
    compiled = compiler.compile(lambda a, b: run_program(steps, [a, b]), backend="eager")
    native = compiler.compile(lambda a, b: run_program(steps, [a, b]), backend="native")
    for _ in range(2):  # the capture call, then a replay
        for got in (compiled(*inputs), native(*inputs)):
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=2e-5, atol=2e-6)
    for entry in compiled.entries.values():
        assert entry.mode == "replay"
        region_inputs = [guards.resolve(source, inputs) for source in entry.sources]
        for graph in entry.regions:
            assert ir.parse(str(graph)) == graph
            ir.verify(graph)
            optimized = optimize(graph, verify=True)
            assert ir.parse(str(optimized)) == optimized
            for a, b in zip(interpreter.run(optimized, region_inputs),
                            interpreter.run(graph, region_inputs)):
                np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
