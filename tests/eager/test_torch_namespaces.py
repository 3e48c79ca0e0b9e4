"""The torch namespaces that libraries import or call at import time, beyond tensors:
torch.jit (scripting is running the Python), torch.fx.wrap, torch.compiler.is_compiling,
torch.onnx and torch.ao.quantization (they load; what kiln cannot do is NotSupportedYet),
torch._C's dispatch-key names, torch._custom_ops and torch.ops, get_default_device."""
import numpy as np
import pytest

import eager
from eager import _missing, dispatcher
from eager._missing import NotSupportedYet
from eager.alias import torch_is_eager


def test_jit_script_and_trace_return_the_function_or_module_itself():
    with torch_is_eager():
        import torch

        def f(x):
            return x * 2
        model = torch.nn.Linear(2, 2)
        assert torch.jit.script(f) is f and torch.jit.script(model) is model
        assert torch.jit.trace(model, torch.ones(1, 2)) is model
        assert torch.jit.is_scripting() is False and torch.jit.is_tracing() is False
        assert not isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction))


def test_jit_decorators_return_what_they_decorate():
    with torch_is_eager():
        import torch

        class Net(torch.nn.Module):
            @torch.jit.ignore
            def helper(self):
                return 1

            @torch.jit.ignore(drop=True)
            def dropped(self):
                return 2

            @torch.jit.unused
            def unused(self):
                return 3

            @torch.jit.export
            def exported(self):
                return 4
        net = Net()
        assert (net.helper(), net.dropped(), net.unused(), net.exported()) == (1, 2, 3, 4)
        assert torch.jit.annotate(list, [5]) == [5]
        with pytest.raises(NotSupportedYet, match="torch.jit.save is not supported by kiln"):
            torch.jit.save(net, "net.pt")


def test_fx_wrap_returns_its_argument_and_symbolic_trace_is_not_supported_naming_it():
    with torch_is_eager():
        import torch.fx
        from torch.fx import symbolic_trace, wrap  # (importing them works)
        assert wrap("roi_align") == "roi_align" and wrap(len) is len
        with pytest.raises(NotSupportedYet, match="torch.fx.symbolic_trace is not supported"):
            symbolic_trace(torch.nn.Linear(1, 1))


def test_compiler_is_compiling_is_true_inside_a_capture_only():
    seen = []

    def f(x):
        seen.append(eager.compiler.is_compiling())
        return x + 1
    compiled = eager.compile(f)
    np.testing.assert_array_equal(compiled(eager.ones(3)).numpy(), [2, 2, 2])
    assert True in seen and eager.compiler.is_compiling() is False
    assert eager.compiler.is_dynamo_compiling() is False


def test_compiler_disable_runs_the_function_eagerly_as_a_graph_break():
    seen = []

    @eager.compiler.disable
    def host_side(x):
        seen.append(eager.compiler.is_compiling())
        return x * 3

    @eager.compiler.disable(reason="reads the cache's views")
    def with_reason(x):
        return x - 1

    compiled = eager.compile(lambda x: with_reason(host_side(x + 1)) * 2)
    np.testing.assert_array_equal(compiled(eager.ones(3)).numpy(), [10, 10, 10])
    assert seen == [False] and host_side.__name__ == "host_side"
    text = compiled.explain()
    assert "torch.compiler.disable: test_compiler_disable" in text
    assert "torch.compiler.disable: reads the cache's views" in text
    assert host_side(eager.ones(1)).tolist() == [3.0]  # outside a capture: just a call


def test_dynamo_names_libraries_import_load_and_making_a_lacking_class_raises_naming_it():
    with torch_is_eager():
        import torch._dynamo
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
        assert torch._dynamo.is_compiling() is False
        with pytest.raises(NotSupportedYet, match=r"TransformGetItemToIndex is not supported"):
            TransformGetItemToIndex()
        assert not isinstance(torch.ones(1), TransformGetItemToIndex)


def test_onnx_and_ao_quantization_import_and_what_kiln_cannot_do_raises_naming_it():
    with torch_is_eager():
        import torch
        from torch.ao.quantization import DeQuantStub, QuantStub, fuse_modules
        from torch.onnx import export, is_in_onnx_export
        assert is_in_onnx_export() is False
        x = torch.ones(2)
        assert QuantStub()(x) is x and DeQuantStub()(x) is x
        with pytest.raises(NotSupportedYet, match="torch.onnx.export is not supported"):
            export(torch.nn.Linear(1, 1), (x,), "model.onnx")
        with pytest.raises(NotSupportedYet, match="torch.ao.quantization.fuse_modules is not"):
            fuse_modules(torch.nn.Sequential(), [])
        with pytest.raises(NotSupportedYet, match="torch.onnx.ONNXProgram is not supported"):
            torch.onnx.ONNXProgram
    lacking = _missing.lacking()
    assert "export" in lacking["torch.onnx"] and "is_in_onnx_export" not in lacking["torch.onnx"]
    assert "fuse_modules" in lacking["torch.ao.quantization"]


def test_torch_C_dispatch_key_sets_and_the_exclude_guard_behave_as_pytorchs():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    C = eager._C
    for keys in (["CPU"], ["CPU", "AutogradCPU"], ["AutocastCPU"]):
        ours = C.DispatchKeySet(*(getattr(C.DispatchKey, k) for k in keys[:1]))
        theirs = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, keys[0]))
        for k in keys[1:]:
            ours, theirs = ours | C.DispatchKeySet(k), theirs | torch._C.DispatchKeySet(
                getattr(torch._C.DispatchKey, k))
        assert repr(ours) == repr(theirs)
    assert C.DispatchKeySet("CPU").has(C.DispatchKey.CPU)
    assert (C.DispatchKeySet("CPU") | C.DispatchKeySet("Python")).remove("CPU") == \
        C.DispatchKeySet("Python")
    for lib in (eager, torch):
        x = lib.ones(2, requires_grad=True)
        guard = lib._C._ExcludeDispatchKeyGuard(lib._C.DispatchKeySet(
            lib._C.DispatchKey.AutogradCPU))
        assert (x * 2).grad_fn is not None  # made, not yet entered
        with guard:
            assert (x * 2).grad_fn is None
        with lib._C._ExcludeDispatchKeyGuard(lib._C.DispatchKeySet(lib._C.DispatchKey.AutocastCPU)):
            assert (x * 2).grad_fn is not None  # no kiln kernel sits at Autocast
        assert lib._C._log_api_usage_once("kiln.test") is None


def test_custom_ops_define_register_before_or_after_and_call_through_torch_ops():
    with torch_is_eager():
        import torch
        import torch._custom_ops as custom_ops

        @custom_ops.impl_abstract("kiln_test::twice")  # before the op exists, as torchvision
        def twice_meta(x):
            return x.new_empty(x.shape)
        custom_ops.custom_op("kiln_test::twice", "(Tensor x) -> Tensor")
        try:
            @custom_ops.impl("kiln_test::twice", device_types="cpu")
            def twice_cpu(x):
                return x * 2
            np.testing.assert_array_equal(torch.ops.kiln_test.twice(torch.ones(2)).numpy(), [2, 2])
            on_meta = torch.ops.kiln_test.twice(torch.empty(3, 4, device="meta"))
            assert on_meta.shape == (3, 4) and on_meta.is_meta
            np.testing.assert_array_equal(torch.ops.aten.mm(torch.eye(2), torch.ones(2, 1)).numpy(),
                                          [[1], [1]])
            with pytest.raises(AttributeError, match="'kiln_test' object has no attribute 'x'"):
                torch.ops.kiln_test.x
        finally:
            dispatcher.undefine("kiln_test::twice")
        with pytest.raises(NotSupportedYet, match="without a schema string"):
            custom_ops.custom_op("kiln_test::inferred")(lambda x: x)


def test_ops_load_library_fails_cleanly_naming_the_library():
    with torch_is_eager():
        import torch
        try:  # as torchvision's extension.py does
            torch.ops.load_library("/site-packages/torchvision/_C.so")
            has_ops = True
        except (ImportError, OSError) as error:
            has_ops = False
            assert "/site-packages/torchvision/_C.so" in str(error)
            assert "kiln cannot load a PyTorch C++ extension library" in str(error)
        assert has_ops is False


def test_get_default_device_is_the_cpu_as_in_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    assert str(eager.get_default_device()) == str(torch.get_default_device()) == "cpu"
    assert eager.get_default_device() == eager.device("cpu")


def test_torchvisions_import_time_jit_and_onnx_names_load_and_do_what_pytorchs_do_in_eager():
    with torch_is_eager():
        import torch
        from torch.jit.annotations import BroadcastingList2
        from torch.onnx import symbolic_opset11
        from torch.onnx.symbolic_helper import parse_args

        def size(x: BroadcastingList2[int]):  # noqa: F821 - annotation only
            return x
        assert BroadcastingList2[int] is None and size(3) == 3
        assert torch.jit._script_if_tracing(size) is size

        @parse_args("v", "f")
        def symbolic(g, x, threshold):
            return symbolic_opset11.unsqueeze(g, x, 0)
        assert symbolic._onnx_arg_descriptors == ("v", "f")
        torch.onnx.register_custom_op_symbolic("kilntest::op", symbolic, 11)
        assert torch.onnx.custom_op_symbolics[("kilntest::op", 11)] is symbolic
        torch.onnx.unregister_custom_op_symbolic("kilntest::op", 11)
        assert ("kilntest::op", 11) not in torch.onnx.custom_op_symbolics
        with pytest.raises(ValueError, match="domain::name"):
            torch.onnx.register_custom_op_symbolic("nodomain", symbolic, 11)
        with pytest.raises(NotSupportedYet, match="torch.onnx.symbolic_opset11.unsqueeze is "
                                                  "not supported"):
            symbolic(None, torch.ones(1), 0.5)


def test_dynamos_hints_mark_and_return_as_pytorchs_do_outside_dynamo():
    with torch_is_eager():
        import torch
        import torch._dynamo

        def f(x):
            return x
        assert torch.compiler.allow_in_graph(f) is f is torch._dynamo.allow_in_graph(f)
        assert torch._dynamo.assume_constant_result(f) is f and f._dynamo_marked_constant
        t = torch.ones(2)
        torch._dynamo.mark_static_address(t, guard=True)
        assert t._dynamo_static_input_type == "guarded"
        with pytest.raises(TypeError, match="expects a tensor"):
            torch._dynamo.mark_static_address([1.0])
        from torch._dynamo.utils import is_compile_supported
        assert is_compile_supported("cpu") is False
        assert torch.backends.mps.is_available() is False and not torch.backends.mps.is_built()


def test_flex_attention_and_conv3d_are_named_and_using_them_is_not_supported_yet():
    with torch_is_eager():
        import torch
        from torch.nn.attention.flex_attention import BlockMask, create_block_mask

        class Conv3DSimple(torch.nn.Conv3d):  # as torchvision's video models do at import
            pass
        for make, name in ((lambda: Conv3DSimple(1, 1, 3), "torch.nn.Conv3d"),
                           (lambda: torch.nn.SyncBatchNorm(4), "torch.nn.SyncBatchNorm"),
                           (BlockMask, "flex_attention.BlockMask"),
                           (lambda: create_block_mask(None, 1, 1, 4, 4),
                            "flex_attention.create_block_mask")):
            with pytest.raises(NotSupportedYet, match=f"{name} is not supported"):
                make()
        assert issubclass(torch.nn.Conv3d, torch.nn.Module)
