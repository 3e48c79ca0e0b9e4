"""A row kernel's ops with the reduced dims dropped (`x.sum(3) * w`, group norm's
backward over (N, G, D, H*W) views) read their operands lined up, as broadcasting lines
them up, with the dims that are not reduced: compiled natively against numpy float64,
over odd and empty sizes, several outputs of different shapes, and a training step.
Before, such an operand (and such an op's output) was laid out over all the dims of the
rows, and the kernel read and wrote outside them: wrong values, or a corrupted heap
(`malloc(): invalid size`). So the cases run in a child process, one JSON line each as
it ends, and a case that kills the child fails here with the child's last words."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import compiler
import eager

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


ROW_TIMES = {  # x's shape (N, G, D, HW), w's shape: x.sum(3) * w
    "w_1GD": ((3, 2, 3, 5), (1, 2, 3)), "w_GD": ((3, 2, 3, 5), (2, 3)),
    "w_D": ((3, 2, 3, 7), (3,)), "w_G1": ((3, 3, 2, 7), (3, 1)),
    "w_NG1": ((3, 2, 3, 5), (3, 2, 1)), "w_N1D": ((5, 2, 3, 7), (5, 1, 3)),
    "w_scalar": ((3, 2, 3, 5), ()), "w_NGD": ((3, 2, 3, 5), (3, 2, 3)),
    "equal_sizes": ((2, 2, 2, 2), (1, 2, 2)), "equal_sizes_3": ((3, 3, 3, 3), (3, 1)),
    "one_element_rows": ((3, 2, 3, 1), (2, 3)), "long_rows": ((2, 3, 2, 131), (3, 2)),
    "many_rows": ((7, 5, 11, 3), (5, 11)),
}
ROW_TIMES_EMPTY = {"no_samples": ((0, 2, 3, 5), (2, 3)), "empty_rows": ((3, 2, 3, 0), (2, 3))}

GROUP_NORM = [  # (N, C, G, H, W)
    (3, 6, 2, 1, 5), (3, 6, 3, 7, 1), (3, 6, 2, 3, 3), (1, 4, 2, 1, 1), (2, 12, 3, 3, 5),
    (5, 9, 3, 7, 11), (2, 12, 4, 1, 1), (2, 8, 2, 2, 2), (0, 6, 2, 5, 1),
]


def _group_norm_backward(lib, dy, x, mean, rstd, gamma, groups):
    """Group norm's input, weight and bias gradients over (N, G, D, H*W) views: sums of
    products over H*W, then over D, in eager ops or numpy (`lib`)."""
    n, c, h, w = x.shape
    d, hw = c // groups, h * w
    dyv, xv = dy.reshape(n, groups, d, hw), x.reshape(n, groups, d, hw)
    ds, db = (dyv * xv).sum(3), dyv.sum(3)
    g = gamma.reshape(1, groups, d)
    dsg, dbg = (ds * g).sum(2), (db * g).sum(2)
    scale = 1.0 / max(d * hw, 1)
    c2 = (dbg * mean - dsg) * rstd * rstd * rstd * scale
    c3 = -c2 * mean - dbg * rstd * scale
    dx = rstd.reshape(n, groups, 1, 1) * g.reshape(1, groups, d, 1) * dyv + \
        c2.reshape(n, groups, 1, 1) * xv + c3.reshape(n, groups, 1, 1)
    dgamma = ((ds - db * mean.reshape(n, groups, 1)) * rstd.reshape(n, groups, 1)).sum(0)
    return dx.reshape(n, c, h, w), dgamma.reshape(c), db.sum(0).reshape(c)


def _sums_of_products(g, x, groups):
    """The bug report's first form: four outputs of two shapes from two row sums."""
    n, c, h, w = x.shape
    view = (n, groups, c // groups, h * w)
    a, b = (g * x).reshape(*view).sum(3), g.reshape(*view).sum(3)
    return a.sum(2), b.sum(2), a * 2, b + 1


def _compiled_against_numpy(fn, reference, arrays, dtype, native=True):
    from tests.compiler.test_native import _assert_ran_natively
    expected = reference(*arrays)
    compiled = compiler.compile(fn, backend="native")
    for _ in range(2):  # the second call through the launch kept for the layout
        got = compiled(*[eager.tensor(a.astype(dtype)) for a in arrays])
        got = got if isinstance(got, tuple) else (got,)
        expected = expected if isinstance(expected, tuple) else (expected,)
        for o, e in zip(got, expected, strict=True):
            assert o.shape == e.shape, (o.shape, e.shape)
            tol = 1e-4 if dtype == np.float32 else 1e-10
            np.testing.assert_allclose(o.numpy(), e, rtol=tol, atol=tol)
    if native:
        _assert_ran_natively(compiled)


def _cases():
    """{name: a function that checks one case, raising on a difference}."""
    rng = np.random.default_rng(0)
    cases = {}
    for dtype in (np.float64, np.float32):
        tag = np.dtype(dtype).name
        for name, (xs, ws) in {**ROW_TIMES, **ROW_TIMES_EMPTY}.items():
            x, w = rng.standard_normal(xs), rng.standard_normal(ws)
            cases[f"row_times_{name}_{tag}"] = lambda x=x, w=w, dtype=dtype: \
                _compiled_against_numpy(lambda a, b: a.sum(3) * b, lambda a, b: a.sum(3) * b,
                                        [x, w], dtype, native=x.size > 0)
        for n, c, groups, h, w in GROUP_NORM:
            shape = (n, c, h, w)
            arrays = [rng.standard_normal(shape), rng.standard_normal(shape),
                      rng.standard_normal((n, groups)),
                      np.abs(rng.standard_normal((n, groups))) + 0.5, rng.standard_normal(c)]
            cases[f"group_norm_backward_{n}x{c}x{h}x{w}_g{groups}_{tag}"] = \
                lambda arrays=arrays, groups=groups, dtype=dtype, native=n > 0: \
                _compiled_against_numpy(
                    lambda *t: _group_norm_backward(eager, *t, groups),
                    lambda *a: _group_norm_backward(np, *a, groups), arrays, dtype, native)
            cases[f"sums_of_products_{n}x{c}x{h}x{w}_g{groups}_{tag}"] = \
                lambda arrays=arrays[:2], groups=groups, dtype=dtype, native=n > 0: \
                _compiled_against_numpy(lambda g, x: _sums_of_products(g, x, groups),
                                        lambda g, x: _sums_of_products(g, x, groups),
                                        arrays, dtype, native)
    for n, c, groups, h, w in GROUP_NORM[:6]:
        cases[f"training_step_{n}x{c}x{h}x{w}_g{groups}"] = \
            lambda shape=(n, c, groups, h, w): _training_step(*shape)
    return cases


def _training_step(n, c, groups, h, w):
    """A training step over an (N, G, D, H*W) view: its sums over H*W times a weight of
    (G, D), centred over D, with backward inside compiler.compile, against eager in
    float64 (the weight's gradient sums products over the samples)."""
    d, hw = c // groups, h * w

    def step(x, gamma):
        y = x.view(n, groups, d, hw).sum(3) * gamma
        centred = y - y.mean(2, keepdim=True)
        loss = (centred * centred.sin()).sum()
        loss.backward()
        return loss.detach()

    rng = np.random.default_rng(n * 100 + c)
    arrays = [rng.standard_normal((n, c, h, w)), rng.standard_normal((groups, d))]
    results = []
    for run in (step, compiler.compile(step, backend="native")):
        leaves = [eager.tensor(a).requires_grad_() for a in arrays]
        loss = run(*leaves)
        results.append([loss.numpy()] + [t.grad.numpy() for t in leaves])
        if run is not step:
            _assert_training_ran_natively(run)
    for got, want in zip(*reversed(results)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def _assert_training_ran_natively(compiled) -> None:
    """Every graph of `compiled`, a training region's forward and backward included,
    ran as native kernels (test_native's check, on each graph)."""
    from compiler.compiled_backward import TrainingRegion
    from tests.compiler.test_native import _assert_ran_natively
    regions = list(compiled.region_cache.values())
    assert any(isinstance(r, TrainingRegion) for r in regions)
    for region in regions:
        graphs = [region.forward, region.backward] if isinstance(region, TrainingRegion) \
            else [region]
        _assert_ran_natively(type("Runs", (), {"region_cache": dict(enumerate(graphs))}))


def run_cases() -> None:
    """Run every case, printing one JSON line as each ends (the child's entry point)."""
    for name, check in _cases().items():
        try:
            check()
            error = None
        except Exception as e:  # reported to the parent, which fails that case
            error = f"{type(e).__name__}: {e}"
        print(json.dumps({"case": name, "error": error}), flush=True)


@pytest.fixture(scope="module")
def child_results():
    """Each case's error (None when it passed), from one child process; the cases after
    one that killed the child carry its exit status and the end of its stderr."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run([sys.executable, "-c", "from tests.compiler."
                          "test_rows_without_reduced_dims import run_cases; run_cases()"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    results = {}
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            results[record["case"]] = record["error"]
    died = f"the child process ended with status {out.returncode}: {out.stderr[-2000:]}"
    return {name: results.get(name, died) for name in _cases()}


@pytest.mark.parametrize("case", list(_cases()))
def test_compiled_rows_without_reduced_dims_match_numpy(case, child_results):
    assert child_results[case] is None, child_results[case]
