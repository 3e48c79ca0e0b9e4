"""Cached calls of compiled functions: the one-kernel direct path and the guards in
front of it (what a fast path must not skip)."""
import threading

import numpy as np
import pytest

import compiler
import eager
from eager.testing import assert_close


def six_ops(x, y):
    return (x * y + 1.0).tanh() * x - y.abs()


def _floats(*shape, seed=0):
    return eager.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _direct_entry(cf):
    entry = next(iter(cf.entries.values()))
    assert entry.direct is not None, entry.why_python
    return entry


def test_a_one_kernel_function_replays_as_a_direct_kernel_call():
    cf = compiler.compile(six_ops)
    x, y = _floats(8, seed=1), _floats(8, seed=2)
    for _ in range(3):
        assert_close(cf(x, y), six_ops(x, y))
    assert _direct_entry(cf).calls == 3


@pytest.mark.parametrize("fn", [
    lambda x, w, b: eager.nn.functional.linear(x, w, b).relu(),  # captured as w, b, x
    lambda x, y: y.exp() * 2 - x,  # captured as y, x
])
def test_arguments_captured_in_another_order_still_call_the_kernel_directly(fn):
    """The kernel's inputs are the arguments in another order: the direct call reorders
    them (and a second call with the arguments swapped around is still right)."""
    shapes = [(6, 5), (3, 5), (3,)] if fn.__code__.co_argcount == 3 else [(7,), (7,)]
    args = [_floats(*shape, seed=i) for i, shape in enumerate(shapes)]
    cf = compiler.compile(fn)
    for _ in range(3):
        assert_close(cf(*args), fn(*args))
    entry = _direct_entry(cf)
    assert entry.calls == 3 and sorted(entry.sources) != entry.sources
    if len(args) == 2:
        assert_close(cf(args[1], args[0]), fn(args[1], args[0]))


def test_direct_calls_return_fresh_tensors():
    cf = compiler.compile(six_ops)
    x, y = _floats(8, seed=1), _floats(8, seed=2)
    first = cf(x, y)
    kept = first.numpy().copy()
    second = cf(y, x)
    assert first.data_ptr() != second.data_ptr()
    np.testing.assert_array_equal(first.numpy(), kept)
    second.add_(1.0)  # writing into one result leaves the others alone
    np.testing.assert_array_equal(first.numpy(), kept)
    third = cf(y, x)
    assert_close(third, six_ops(y, x))
    assert third.shape == (8,) and third.stride() == (1,) and third.is_contiguous()
    assert not third.requires_grad and third.grad_fn is None


def test_a_failed_guard_after_direct_calls_compiles_a_new_entry():
    cf = compiler.compile(six_ops)
    x, y = _floats(8, seed=1), _floats(8, seed=2)
    cf(x, y), cf(x, y)
    bigger = _floats(3, 5, seed=3), _floats(3, 5, seed=4)
    wider = x.double(), y.double()
    for args in (bigger, wider, (x, x)):  # shape, dtype, aliasing
        assert_close(cf(*args), six_ops(*args))
        assert_close(cf(*args), six_ops(*args))
    assert len(cf.entries) == 4
    assert_close(cf(x, y), six_ops(x, y))


def test_requires_grad_inputs_keep_their_autograd_history():
    cf = compiler.compile(lambda x, y: x * y + 1)
    x = _floats(4, seed=1).requires_grad_()
    y = _floats(4, seed=2)
    for _ in range(3):
        out = cf(x, y)
        assert out.grad_fn is not None
        x.grad = None
        out.sum().backward()
        assert_close(x.grad, y)
    with eager.no_grad():  # no history wanted: the same function replays
        for _ in range(2):
            assert cf(x, y).grad_fn is None
    assert any(e.direct is not None for e in cf.entries.values())


def test_a_closure_tensor_that_requires_grad_gets_its_gradient():
    w = _floats(4, seed=3).requires_grad_()
    cf = compiler.compile(lambda x: x * w)
    x = _floats(4, seed=4)
    for _ in range(2):
        w.grad = None
        cf(x).sum().backward()
        assert_close(w.grad, x)


def test_requires_grad_set_in_place_is_seen_by_the_guards():
    cf = compiler.compile(lambda x: x.exp() * 2)
    x = _floats(4, seed=5)
    cf(x), cf(x)
    x.requires_grad_()
    out = cf(x)
    assert out.grad_fn is not None
    out.sum().backward()
    assert_close(x.grad, x.detach().exp() * 2)


@pytest.mark.parametrize("layout", ["transposed", "strided", "offset"])
def test_direct_calls_follow_each_call_s_strides(layout):
    cf = compiler.compile(lambda a, b: (a * b).exp())
    base = _floats(6, 6, seed=6)
    a, b = _floats(6, 6, seed=7), _floats(6, 6, seed=8)
    cf(a, b), cf(a, b)
    view = {"transposed": base.t(), "strided": _floats(6, 12, seed=9)[:, ::2],
            "offset": _floats(7, 6, seed=9)[1:]}[layout]
    assert_close(cf(view, b), (view * b).exp())
    assert_close(cf(a, b), (a * b).exp())
    # strides are guarded (a reshape is a view of some layouts and a copy of others):
    # another layout is a capture of its own; an offset alone is not
    assert len(cf.entries) == (1 if layout == "offset" else 2)


def test_closure_values_are_guarded_on_the_direct_path():
    scale = 2.0
    lib = eager

    def f(x):
        return lib.tanh(x) * scale
    cf = compiler.compile(f)
    x = _floats(5, seed=10)
    for scale in (2.0, 2.0, 3.0, 3.0):  # noqa: B007 - the closure reads it
        assert_close(cf(x), eager.tanh(x) * scale)
    lib = _Doubling()
    assert_close(cf(x), eager.tanh(x) * 6.0)


def test_a_closure_cell_emptied_or_its_value_s_class_changed_is_guarded():
    """The guards' fast path (the last call's values, compared by `is` and type) must
    see a cell emptied by `del` and an object given another class."""
    def make():
        scale = _Scale()

        def f(x):
            return x * scale.value()

        def drop():
            nonlocal scale
            del scale
        return f, drop, lambda: scale
    f, drop, scale = make()
    cf = compiler.compile(f)
    x = _floats(5, seed=11)
    for _ in range(3):
        assert_close(cf(x), x * 2.0)
    scale().__class__ = _Tripled
    assert_close(cf(x), x * 3.0)
    drop()
    with pytest.raises(NameError):
        f(x)
    with pytest.raises(NameError):
        cf(x)


class _Scale:
    def value(self):
        return 2.0


class _Tripled(_Scale):
    def value(self):
        return 3.0


class _Doubling:
    """A stand-in module whose tanh doubles: another object, so a new entry."""

    @staticmethod
    def tanh(x):
        return eager.tanh(x) * 2


def test_the_profiler_and_check_mode_see_direct_entries():
    cf = compiler.compile(six_ops, check=True)
    x, y = _floats(8, seed=1), _floats(8, seed=2)
    for _ in range(4):  # three checked calls, then the direct path
        assert_close(cf(x, y), six_ops(x, y))
    with eager.profiler.profile() as prof:
        cf(x, y)
    assert any(e.name == "kiln::region" for e in prof.events())


def test_threads_calling_a_direct_entry_get_their_own_results():
    cf = compiler.compile(six_ops)
    pairs = [(_floats(64, seed=2 * i), _floats(64, seed=2 * i + 1)) for i in range(4)]
    cf(*pairs[0])
    errors = []

    def work(x, y):
        expected = six_ops(x, y).numpy()
        try:
            for _ in range(200):
                np.testing.assert_allclose(cf(x, y).numpy(), expected, rtol=1e-5, atol=1e-6)
        except Exception as e:  # surfaced below
            errors.append(e)
    threads = [threading.Thread(target=work, args=p) for p in pairs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cf.entries) == 1


def test_the_plain_guard_key_is_the_general_one():
    """A function reading no globals, closures or module: its key is computed on a
    spelled-out path, which must give what the general path gives."""
    cf = compiler.compile(six_ops)
    guards = cf.guards
    assert guards._plain
    x, y = _floats(3, 4), _floats(3, 4, seed=1)
    cases = [(x, y), (x, x), (x.t(), y), (x.requires_grad_(), y), (x, 2.0), (y,),
             (eager.zeros(2, dtype=eager.float64), eager.ones(2, device="meta"))]
    for args in cases:
        for grad in (True, False):
            with eager.set_grad_enabled(grad):
                guards._plain = True
                plain = guards.key_and_leaves(args, {})
                guards._plain = False
                general = guards.key_and_leaves(args, {})
            assert plain[0] == general[0]
            assert [id(v) for v in plain[1]] == [id(v) for v in general[1]]
    guards._plain = True
    assert not compiler.compile(lambda t: t * _floats(1)).guards._plain  # reads a global


def test_small_kernels_are_called_as_builtins_and_large_ones_through_ctypes(monkeypatch):
    """A one-output kernel on the calling thread is called through a runtime.fastcall
    builtin up to FASTCALL_ELEMENTS (it keeps the GIL while it runs), made at its second
    call; larger ones through ctypes, which lets the GIL go."""
    from runtime.cpu import launch
    from runtime import fastcall
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    for n, fast in ((37, fastcall.available()), (launch.FASTCALL_ELEMENTS + 3, False)):
        cf = compiler.compile(six_ops)
        x, y = _floats(n, seed=3), _floats(n, seed=4)
        assert_close(cf(x, y), six_ops(x, y))
        (planned,) = _direct_entry(cf).direct._layouts.values()
        # one call: no launcher loaded, ctypes called
        assert planned.plain and planned.fast == planned._plain_through_ctypes
        for _ in range(2):  # made at the second call
            assert_close(cf(x, y), six_ops(x, y))
        made = planned.fast is not None and planned.fast != planned._plain_through_ctypes
        assert made == fast
