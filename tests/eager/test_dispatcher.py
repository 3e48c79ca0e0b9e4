"""The dispatcher through its public registration API: a custom op with CPU, Meta,
Autograd and Tracer kernels; key sets; device checks; wrapped Python numbers."""
import threading

import numpy as np
import pytest

import eager
from eager import dispatcher
from eager.autograd import Node
from eager.autograd.function import gradient_edge
from eager.dispatcher import DispatchKey

SCALE = "mylib::scale(Tensor x, float s) -> Tensor"


class ScaleBackward0(Node):
    def __init__(self, x, s):
        super().__init__([gradient_edge(x)])
        self.s = s

    def apply(self, grad, create_graph):
        return (grad * self.s,)


@pytest.fixture
def scale():
    """`mylib::scale` with CPU, Meta and Autograd kernels; `calls` lists the keys that ran."""
    handle = dispatcher.define(SCALE)
    calls = []

    @dispatcher.impl("mylib::scale", "CPU")
    def scale_cpu(x, s):
        calls.append("CPU")
        return eager.from_numpy(x.detach().numpy() * np.float32(s))

    @dispatcher.impl("mylib::scale", DispatchKey.Meta)
    def scale_meta(x, s):
        calls.append("Meta")
        return eager.empty(x.shape, dtype=x.dtype, device="meta")

    @dispatcher.impl(handle, "Autograd")
    def scale_autograd(x, s):
        calls.append("Autograd")
        out = handle.redispatch(DispatchKey.Autograd, x, s)
        if x.requires_grad:
            out.grad_fn = ScaleBackward0(x, s)
            out.requires_grad_(True)
        return out

    handle.calls = calls
    handle.kernel_lines = {name: fn.__code__.co_firstlineno for name, fn in
                           [("CPU", scale_cpu), ("Meta", scale_meta), ("Autograd", scale_autograd)]}
    yield handle
    dispatcher.undefine("mylib::scale")


# registration and dispatch order ------------------------------------------------------
def test_define_parses_the_schema_and_find_returns_the_handle(scale):
    assert scale.name == "mylib::scale"
    assert str(scale.schema) == "scale(Tensor x, float s) -> Tensor"
    assert dispatcher.find("mylib::scale") is scale
    assert repr(scale) == "<OpHandle mylib::scale>"


def test_defining_twice_is_an_error(scale):
    with pytest.raises(RuntimeError, match="mylib::scale is already defined"):
        dispatcher.define(SCALE)


def test_unknown_op_and_builtin_undefine_are_errors():
    with pytest.raises(KeyError, match="no operator named 'mylib::nothing'"):
        dispatcher.find("mylib::nothing")
    with pytest.raises(RuntimeError, match="built-in"):
        dispatcher.undefine("aten::mm")
    assert dispatcher.find("mm") is dispatcher.find("aten::mm")


def test_plain_call_runs_the_backend_kernel_only(scale):
    out = scale(eager.tensor([1., 2.]), 3.0)
    assert out.tolist() == [3., 6.]
    assert scale.calls == ["CPU"]
    assert out.grad_fn is None and not out.requires_grad


def test_requires_grad_goes_through_autograd_then_redispatches_to_cpu(scale):
    x = eager.tensor([1., 2.], requires_grad=True)
    out = scale(x, 3.0)
    assert scale.calls == ["Autograd", "CPU"]
    assert type(out.grad_fn) is ScaleBackward0
    out.sum().backward()
    assert x.grad.tolist() == [3., 3.]


def test_no_grad_skips_the_autograd_kernel(scale):
    x = eager.tensor([1., 2.], requires_grad=True)
    with eager.no_grad():
        out = scale(x, 2.0)
    assert scale.calls == ["CPU"]
    assert out.grad_fn is None


def test_meta_tensors_reach_the_meta_kernel(scale):
    out = scale(eager.empty(4, 5, device="meta"), 2.0)
    assert scale.calls == ["Meta"]
    assert out.device == eager.device("meta") and out.shape == (4, 5)


def test_tracer_key_runs_below_autograd_when_included_and_redispatches_below_itself(scale):
    @dispatcher.impl(scale, "Tracer")
    def scale_tracer(x, s):
        scale.calls.append("Tracer")
        return scale.redispatch(DispatchKey.Tracer, x, s)

    x = eager.tensor([1.], requires_grad=True)
    scale(x, 2.0)
    assert scale.calls == ["Autograd", "CPU"]  # Tracer is not among the tensor's keys
    scale.calls.clear()
    with dispatcher.include_keys(DispatchKey.Tracer):
        out = scale(x, 2.0)
    assert scale.calls == ["Autograd", "Tracer", "CPU"]  # capture sees what autograd runs
    assert out.tolist() == [2.] and type(out.grad_fn) is ScaleBackward0
    scale.calls.clear()
    scale(x, 2.0)
    assert scale.calls == ["Autograd", "CPU"]  # the guard restored the key set


def test_excluding_a_key_skips_its_kernel(scale):
    x = eager.tensor([1.], requires_grad=True)
    with dispatcher.exclude_keys(DispatchKey.AutogradCPU):
        out = scale(x, 2.0)
    assert scale.calls == ["CPU"] and out.grad_fn is None


def test_call_key_picks_a_kernel_regardless_of_the_arguments(scale):
    out = scale.call_key(DispatchKey.Meta, eager.ones(3), 2.0)
    assert scale.calls == ["Meta"] and out.is_meta


def test_missing_backend_kernel_error_names_the_backend_and_what_exists():
    handle = dispatcher.define("mylib::cpu_only(Tensor x) -> Tensor")
    try:
        dispatcher.impl(handle, "CPU")(lambda x: x)
        assert handle(eager.ones(1)).tolist() == [1.]
        with pytest.raises(NotImplementedError) as info:
            handle(eager.empty(2, device="meta"))
        assert str(info.value) == (
            "Could not run 'mylib::cpu_only' with arguments from the 'Meta' backend. "
            "'mylib::cpu_only' is only available for these backends: [CPU].")
    finally:
        dispatcher.undefine("mylib::cpu_only")


def test_autograd_kernel_alone_fails_on_redispatch_to_the_missing_backend():
    handle = dispatcher.define("mylib::grad_only(Tensor x) -> Tensor")
    try:
        dispatcher.impl(handle, "Autograd")(
            lambda x: handle.redispatch(DispatchKey.Autograd, x))
        expected = r"from the 'CPU' backend.*available for these backends: \[Autograd\]"
        with pytest.raises(NotImplementedError, match=expected):
            handle(eager.ones(1, requires_grad=True))
    finally:
        dispatcher.undefine("mylib::grad_only")


def test_registering_again_replaces_the_kernel(scale):
    scale(eager.ones(1), 2.0)
    dispatcher.impl(scale, "CPU")(lambda x, s: eager.zeros(1))
    assert scale(eager.ones(1), 2.0).tolist() == [0.]  # the cached choice was dropped


# dumps --------------------------------------------------------------------------------
def test_dump_table_lists_each_runtime_key_with_where_it_was_registered(scale):
    lines = dispatcher.find("mylib::scale").dump_table().splitlines()
    where = "tests/eager/test_dispatcher.py"
    k = scale.kernel_lines
    tracer = dispatcher._fallbacks.get(DispatchKey.Tracer)  # the compiler's, once imported
    assert lines == [
        f"Meta: registered at {where}:{k['Meta']} [kernel]",
        f"CPU: registered at {where}:{k['CPU']} [kernel]",
        "Tracer: fallthrough" if tracer is None else
        f"Tracer: {dispatcher._where(tracer)} [backend fallback]",
        f"AutogradMeta: registered at {where}:{k['Autograd']} [autograd kernel]",
        f"AutogradCPU: registered at {where}:{k['Autograd']} [autograd kernel]",
        f"AutogradCUDA: registered at {where}:{k['Autograd']} [autograd kernel]",
    ]
    assert eager._C._dispatch_dump_table("mylib::scale") == scale.dump_table()


def test_dump_registrations_lists_the_keys_as_registered(scale):
    text = eager._C._dispatch_dump("mylib::scale")
    k = scale.kernel_lines
    assert text.splitlines() == [
        "name: mylib::scale",
        "schema: scale(Tensor x, float s) -> Tensor",
        f"Meta: registered at tests/eager/test_dispatcher.py:{k['Meta']}",
        f"CPU: registered at tests/eager/test_dispatcher.py:{k['CPU']}",
        f"Autograd[alias]: registered at tests/eager/test_dispatcher.py:{k['Autograd']}",
    ]


def test_dump_of_an_op_without_autograd_kernel_shows_fallthrough():
    lines = dict(line.split(": ", 1) for line in eager._C._dispatch_dump_table("argmax")
                 .splitlines())
    assert lines["AutogradCPU"] == "fallthrough"
    assert lines["CPU"].endswith("[kernel]")


# key sets ------------------------------------------------------------------------------
def test_tensor_keys_follow_requires_grad():
    t = eager.ones(2)
    assert t._keys == 1 << DispatchKey.CPU
    t.requires_grad_(True)
    assert t._keys == (1 << DispatchKey.CPU) | (1 << DispatchKey.AutogradCPU)
    m = eager.empty(2, device="meta", requires_grad=True)
    assert m._keys == (1 << DispatchKey.Meta) | (1 << DispatchKey.AutogradMeta)


def test_grad_mode_is_thread_local(scale):
    x = eager.tensor([1.], requires_grad=True)
    seen = {}

    def other_thread():
        seen["enabled"] = eager.is_grad_enabled()
        seen["grad_fn"] = scale(x, 2.0).grad_fn

    with eager.no_grad():
        assert scale(x, 2.0).grad_fn is None
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
    assert seen["enabled"] is True
    assert type(seen["grad_fn"]) is ScaleBackward0


def test_set_grad_enabled_false_masks_autograd_until_restored():
    x = eager.ones(2, requires_grad=True)
    with eager.set_grad_enabled(False):
        assert not eager.is_grad_enabled()
        assert (x * 2).grad_fn is None
        with eager.enable_grad():
            assert (x * 2).grad_fn is not None
        assert (x * 2).grad_fn is None
    assert eager.is_grad_enabled() and (x * 2).grad_fn is not None


# argument checks -----------------------------------------------------------------------
def test_device_mismatch_is_an_error():
    with pytest.raises(RuntimeError) as info:
        eager.add(eager.ones(2), eager.empty(2, device="meta"))
    assert str(info.value) == ("Expected all tensors to be on the same device, but found at "
                               "least two devices, cpu and meta! (while running aten::add)")


def test_device_mismatch_inside_a_tensor_list():
    with pytest.raises(RuntimeError, match="cpu and meta"):
        eager.cat([eager.ones(2), eager.empty(2, device="meta")])


def test_python_numbers_become_wrapped_scalars():
    seen = {}
    handle = dispatcher.define("mylib::peek(Tensor self, Tensor other) -> Tensor")
    try:
        @dispatcher.impl(handle, "CPU")
        def peek(self, other):
            seen["other"] = other
            return self

        handle(eager.ones(1), 2.5)
        wrapped = seen["other"]
        assert isinstance(wrapped, eager.Tensor) and wrapped._wrapped
        assert wrapped.shape == () and wrapped.item() == 2.5
        assert wrapped.dtype is eager.get_default_dtype()  # a Python float: the default type
        assert repr(wrapped) == "tensor(2.5000)"
        assert wrapped._keys == 0  # a wrapped number brings no dispatch key
        handle(eager.ones(1), other=3)
        assert seen["other"]._wrapped and seen["other"].dtype is eager.int64
        with pytest.raises(TypeError, match="expected at least one Tensor argument"):
            handle(1.0, 2.0)
        with pytest.raises(TypeError, match="argument 'other' must be Tensor, not str"):
            handle(eager.ones(1), "two")
    finally:
        dispatcher.undefine("mylib::peek")


def test_none_for_a_tensor_that_is_not_optional_is_a_type_error():
    """None is an absent Tensor? (linear's bias); for a Tensor it is bad input, named as
    PyTorch names it, not an AttributeError from inside a kernel."""
    x = eager.ones(2)
    for call in (lambda: x + None, lambda: eager.add(x, None), lambda: eager.add(x, other=None),
                 lambda: eager.mul(None, x)):
        with pytest.raises(TypeError, match=r"\(\): argument '(other|self)' must be Tensor, "
                                            r"not NoneType"):
            call()
    out = eager.nn.functional.linear(eager.ones(2, 3), eager.ones(4, 3), None)
    assert out.tolist() == [[3.0] * 4] * 2


def _promotion_cases(lib):
    return {
        "int tensor + int": lib.add(lib.tensor([1, 2]), 3),
        "int tensor * float": lib.mul(lib.tensor([1, 2]), 2.5),
        "float16 tensor * float": lib.mul(lib.ones(2, dtype=lib.float16), 2.5),
        "float32 tensor + float": lib.add(lib.ones(2), 1e-3),
        "bool tensor + int": lib.add(lib.tensor([True, False]), 1),
        "int32 tensor + int": lib.add(lib.tensor([1], dtype=lib.int32), 7),
        "float tensor > int": lib.gt(lib.ones(2), 0),
        "float32 + float64 0-dim": lib.add(lib.ones(2), lib.tensor(1.0, dtype=lib.float64)),
    }


def test_wrapped_scalar_promotion_matches_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed: no reference to compare")
    ours, theirs = _promotion_cases(eager), _promotion_cases(torch)
    for case in ours:
        assert ours[case].dtype.name == str(theirs[case].dtype).removeprefix("torch."), case
        np.testing.assert_allclose(ours[case].numpy().astype(np.float64),
                                   theirs[case].numpy().astype(np.float64), err_msg=case)


def test_wrapped_scalar_promotion_table():
    cases = _promotion_cases(eager)
    assert {case: t.dtype.name for case, t in cases.items()} == {
        "int tensor + int": "int64", "int tensor * float": "float32",
        "float16 tensor * float": "float16", "float32 tensor + float": "float32",
        "bool tensor + int": "int64", "int32 tensor + int": "int32", "float tensor > int": "bool",
        "float32 + float64 0-dim": "float32"}


def test_impl_with_an_unknown_key_name_is_an_error():
    with pytest.raises(ValueError, match="unknown dispatch key 'GPU'; the keys are Meta, CPU"):
        dispatcher.impl("aten::mm", "GPU")
