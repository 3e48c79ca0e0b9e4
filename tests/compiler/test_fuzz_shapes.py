"""A differential fuzzer for shapes: one compiled function is called several times in a
row with changing sizes, ranks, dtypes, layouts (transposed, strided, broadcast) and
requires_grad, and every call must give what eager gives (values, shape, dtype and,
where the input requires grad, its gradient), or raise the error eager raises.

A compiled function whose guards let a call through that its graph was not captured for
(a size read in Python, a rank or layout the graph did not see), or whose symbolic graph
computes with a size of an earlier call, fails here."""
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compiler
import eager
import eager.nn.functional as F


def _halves(a):
    return a[..., :max(1, a.shape[-1] // 2)] + 1


def _branch(a):
    return a * 2 if a.shape[0] > 2 else a - 3


# name -> the function of one tensor
PROGRAMS = {
    "affine": lambda a: a * 2 + 1,
    "exp relu": lambda a: (a.exp() - a).relu(),
    "where": lambda a: eager.where(a > 0, a, a * 0.1),
    "softmax": lambda a: eager.softmax(a, -1),
    "log_softmax 0": lambda a: eager.log_softmax(a, 0),
    "mean 0": lambda a: a.mean(0),
    "var -1": lambda a: a.var(-1),
    "sum by size": lambda a: a.sum(-1, keepdim=True) / a.shape[-1],
    "amax minus": lambda a: a.amax(-1, keepdim=True) - a,
    "layer_norm": lambda a: F.layer_norm(a, a.shape[-1:]),
    "halves": _halves,
    "branch on size": _branch,
    "flatten relu": lambda a: a.flatten().relu(),
    "gram": lambda a: a @ a.transpose(-2, -1),
    "rows sum": lambda a: a.reshape(-1, a.shape[-1]).sum(0),
    "transpose": lambda a: a.transpose(0, -1) * 3,
    "select": lambda a: a[0] * 2,
    "view": lambda a: a.view(a.shape[0], -1).tanh(),
    "cat": lambda a: eager.cat([a, a * 2], -1).sum(-1),
    "gather last": lambda a: a[..., eager.tensor([0, -1])] * 2,
}

# A pool of shapes, so that kernels compiled for one sequence serve others: sizes and
# ranks that change, size 1 (broadcast) and 0 (empty) among them
SHAPES = [(4,), (7,), (0,), (3, 5), (6, 5), (1, 5), (3, 1), (2, 0), (2, 3, 4), (5, 3, 4),
          (2, 3, 1)]
calls = st.lists(st.tuples(
    st.sampled_from(SHAPES),
    st.sampled_from(["float32", "float64", "int64"]),       # dtype
    st.sampled_from(["contiguous", "transposed", "strided", "broadcast"]),
    st.booleans(),                                          # requires_grad
    st.integers(0, 2**16)), min_size=2, max_size=6)        # seed


def _input(shape, dtype, layout, requires_grad, seed):
    """A leaf of `shape`'s values and the tensor handed to the function (a view of it in
    `layout`); requires_grad only for floats."""
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    if layout == "transposed":
        base_shape = shape[::-1]
    elif layout == "strided":
        base_shape = shape[:-1] + (2 * shape[-1],)
    elif layout == "broadcast":
        base_shape = (1,) + shape[1:]
    else:
        base_shape = shape
    values = rng.standard_normal(base_shape) * 2
    base = eager.tensor(values.round() if dtype == "int64" else values,
                        dtype=getattr(eager, dtype))
    grad = requires_grad and dtype != "int64"
    if grad:
        base.requires_grad_(True)
    if layout == "transposed":
        view = base.permute(*reversed(range(len(shape))))
    elif layout == "strided":
        view = base[..., ::2]
    elif layout == "broadcast":
        view = base.expand(*shape)
    else:
        view = base
    return base, view


def _outcome(fn, x):
    try:
        return fn(x), None
    except Exception as e:  # noqa: BLE001 - compared with the compiled call's
        return None, e


def _gradient(base, out):
    """The gradient at `base` of a weighted sum of `out` (None without one)."""
    if base.grad_fn is not None or not base.requires_grad or not out.requires_grad:
        return None
    weights = eager.arange(out.numel(), dtype=out.dtype).reshape(out.shape) * 0.25 + 1
    (out * weights).sum().backward()
    return base.grad


def _tolerance(dtype):
    return (2e-4, 2e-5) if dtype == eager.float32 else (1e-7, 1e-9)


def _same(got, want, where: str) -> None:
    assert tuple(got.shape) == tuple(want.shape), \
        f"{where}: shape {tuple(got.shape)}, eager {tuple(want.shape)}"
    assert got.dtype == want.dtype, f"{where}: dtype {got.dtype}, eager {want.dtype}"
    rtol, atol = _tolerance(want.dtype)
    np.testing.assert_allclose(got.detach().numpy().astype(np.float64),
                               want.detach().numpy().astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True, err_msg=where)


def check_call(compiled, program, call, where: str) -> None:
    base, x = _input(*call)
    want, error = _outcome(program, x)
    base_c, x_c = _input(*call)
    got, got_error = _outcome(compiled, x_c)
    if error is not None:
        assert got_error is not None and type(got_error) is type(error), \
            f"{where}: eager raised {error!r}, compiled {got_error!r}"
        return
    assert got_error is None, f"{where}: compiled raised {got_error!r}"
    _same(got, want, where)
    want_grad, got_grad = _gradient(base, want), _gradient(base_c, got)
    assert (want_grad is None) == (got_grad is None), f"{where}: gradients differ"
    if want_grad is not None:
        _same(got_grad, want_grad, where + " (gradient)")


def run_sequence(name, sequence, **options):
    program = PROGRAMS[name]
    compiled = compiler.compile(program, **options)
    for k, call in enumerate(sequence):
        check_call(compiled, program, call, f"{name}, call {k} {call[:3]}, grad={call[3]}")


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=8, deadline=None, derandomize=True, database=None)
@given(sequence=calls)
def test_calls_of_changing_shapes_agree_with_eager(name, dynamic, sequence):
    """Through capture, guards and dynamic sizes, with graphs run by the interpreter."""
    run_sequence(name, sequence, dynamic=dynamic, backend="eager")


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
@settings(max_examples=3, deadline=None, derandomize=True, database=None)
@given(sequence=calls)
def test_natively_compiled_calls_of_changing_shapes_agree_with_eager(name, sequence):
    """Through the passes and the native kernels too (each new static graph compiles
    kernels, ~0.5 s each: fewer sequences)."""
    run_sequence(name, sequence, backend="native")


@pytest.mark.parametrize("name", ["softmax", "mean 0", "halves", "gram", "layer_norm"])
def test_threads_sharing_a_compiled_function_each_get_eager_results(name):
    program = PROGRAMS[name]
    compiled = compiler.compile(program)
    failures = []

    def worker(t):
        try:
            for k in range(4):
                shape = [2 + (t + k) % 5, 3 + t % 3]
                check_call(compiled, program, (shape, "float32", "contiguous", False,
                                               t * 10 + k), f"thread {t}, call {k}")
        except AssertionError as e:
            failures.append(e)
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not failures, failures[0]
