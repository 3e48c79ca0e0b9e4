"""eager.library (torch.library) on kiln's dispatcher: custom_op with schemas inferred as
PyTorch infers them, fake (Meta) kernels, autograd formulas checked with finite
differences, in-place arguments, Library/define/impl by dispatch key, `eager.ops.<ns>`,
and a custom op under compile. (No `from __future__ import annotations`: the prototypes'
annotations name a local type.)"""

import itertools
from typing import Optional

import numpy as np
import pytest

import eager
from eager import dispatcher, library
from eager.autograd import gradcheck

torch = pytest.importorskip("torch", reason="torch is not installed: no reference to compare")
_count = itertools.count()


@pytest.fixture
def ns():
    """A namespace of this test's own; its operators are undefined afterwards."""
    name = f"kilntest{next(_count)}"
    yield name
    for qualified in [q for q in dispatcher._handles if q.startswith(name + "::")]:
        if qualified in dispatcher._handles:
            dispatcher.undefine(qualified)
    library._DEFINING.discard(name)


def _prototypes(T):
    """Typed functions, written once for eager.Tensor or torch.Tensor, and mutates_args."""
    def scale(x: T, k: float) -> T: ...
    def addto(x: T, out: T) -> None: ...
    def many(x: T, ys: list[T], n: int, b: bool = False, o: Optional[T] = None,
             s: str = "a", f: Optional[list[int]] = None) -> tuple[T, T]: ...
    def union(x: T | None, y: float = 1.5) -> T: ...
    def lists(zs: list[T | None], ns: list[int] | None = None) -> list[T]: ...
    return [(scale, ()), (addto, ("out",)), (many, ()), (union, ()), (lists, ())]


def test_schemas_are_inferred_from_annotations_as_torch_infers_them():
    for (ours, mutated), (theirs, _) in zip(_prototypes(eager.Tensor), _prototypes(torch.Tensor)):
        assert library.infer_schema(ours, mutates_args=mutated) == \
            torch.library.infer_schema(theirs, mutates_args=mutated)


def test_a_parameter_without_annotation_or_of_an_unknown_type_is_an_error():
    with pytest.raises(ValueError, match="Parameter x must have a type annotation"):
        library.infer_schema(lambda x: x, mutates_args=())

    def bad(x: eager.Tensor, d: dict) -> eager.Tensor: ...
    with pytest.raises(ValueError, match="Parameter d has unsupported type"):
        library.infer_schema(bad, mutates_args=())
    with pytest.raises(ValueError, match="expected a qualified name 'namespace::name'"):
        library.custom_op("scale", mutates_args=())


def _define_scale(ns):
    @library.custom_op(f"{ns}::scale", mutates_args=())
    def scale(x: eager.Tensor, k: float) -> eager.Tensor:
        return x * k
    return scale


def test_a_custom_op_runs_its_function_and_is_found_in_ops_by_namespace(ns):
    scale = _define_scale(ns)
    x = eager.tensor([1.0, 2.0])
    assert scale(x, 3.0).tolist() == [3.0, 6.0]
    packet = getattr(eager.ops, ns).scale
    assert packet(x, k=2.0).tolist() == [2.0, 4.0]
    assert packet.default is scale._opoverload and repr(packet) == f"{ns}.scale"
    assert str(scale._opoverload.schema) == "scale(Tensor x, float k) -> Tensor"
    with pytest.raises(NotImplementedError, match="Could not run .* from the 'Meta' backend"):
        scale(eager.empty(2, device="meta"), 2.0)


def test_register_fake_is_the_ops_meta_kernel(ns):
    scale = _define_scale(ns)

    @scale.register_fake
    def _(x, k):
        return eager.empty_like(x)
    out = scale(eager.empty(2, 5, device="meta"), 2.0)
    assert out.device.type == "meta" and out.shape == (2, 5)


def test_backward_without_a_formula_raises_torchs_error(ns):
    scale = _define_scale(ns)
    x = eager.ones(2, requires_grad=True)
    out = scale(x, 2.0)
    assert type(out.grad_fn).__name__ == f"GeneratedBackwardFor_{ns}_scale_defaultBackward"
    with pytest.raises(RuntimeError, match=f"Trying to backward through {ns}.scale.default but "
                                           "no autograd formula was registered"):
        out.sum().backward()
    assert scale(x.detach(), 2.0).grad_fn is None


def test_register_autograd_gives_gradients_that_match_finite_differences_and_torch(ns):
    @library.custom_op(f"{ns}::mul_exp", mutates_args=())
    def mul_exp(x: eager.Tensor, y: eager.Tensor, k: float) -> eager.Tensor:
        return (x * y * k).exp()

    def setup_context(ctx, inputs, output):
        x, y, k = inputs
        ctx.save_for_backward(x, y, output)
        ctx.k = k

    def backward(ctx, grad):
        x, y, out = ctx.saved_tensors
        g = grad * out * ctx.k
        return g * y, g * x, None

    mul_exp.register_autograd(backward, setup_context=setup_context)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4), rng.standard_normal(4)
    x, y = (eager.tensor(v, requires_grad=True) for v in (a, b))
    assert gradcheck(lambda p, q: mul_exp(p, q, 0.7), (x, y))
    mul_exp(x, y, 0.7).sum().backward()
    tx, ty = (torch.tensor(v, requires_grad=True) for v in (a, b))
    (tx * ty * 0.7).exp().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), ty.grad.numpy(), rtol=1e-12)


def test_mutates_args_marks_the_argument_written_in_place(ns):
    @library.custom_op(f"{ns}::addto", mutates_args=("out",))
    def addto(x: eager.Tensor, out: eager.Tensor) -> None:
        out.add_(x)

    assert str(addto._opoverload.schema) == "addto(Tensor x, Tensor(a1!) out) -> ()"
    out = eager.zeros(2)
    version = out._version
    assert addto(eager.ones(2), out) is None
    assert out.tolist() == [1.0, 1.0] and out._version > version


def test_register_kernel_adds_a_kernel_for_one_device_type(ns):
    @library.custom_op(f"{ns}::which", mutates_args=(), device_types="cuda")
    def which(x: eager.Tensor) -> eager.Tensor:
        return x + 1

    with pytest.raises(NotImplementedError, match="from the 'CPU' backend"):
        which(eager.zeros(1))
    which.register_kernel("cpu", lambda x: x + 2)
    assert which(eager.zeros(1)).tolist() == [2.0]


def test_library_define_and_impl_register_kernels_by_dispatch_key(ns):
    lib = library.Library(ns, "DEF")
    assert lib.define("twice(Tensor x) -> Tensor") == "twice"
    lib.impl("twice", lambda x: x * 2, "CPU")
    library.define(f"{ns}::thrice", "(Tensor x) -> Tensor", lib=lib)
    library.impl(f"{ns}::thrice", "cpu", lambda x: x * 3, lib=lib)

    @library.impl(f"{ns}::thrice", "Meta")
    def thrice_meta(x):
        return eager.empty_like(x)
    ops = getattr(eager.ops, ns)
    assert ops.twice(eager.ones(2)).tolist() == [2.0, 2.0]
    assert ops.thrice(eager.ones(1)).tolist() == [3.0]
    assert ops.thrice(eager.empty(3, device="meta")).shape == (3,)
    table = dispatcher.find(f"{ns}::thrice").dump_table()
    assert "CPU: registered at" in table and "Meta: registered at" in table
    with pytest.raises(RuntimeError, match="Only a single TORCH_LIBRARY"):
        library.Library(ns, "DEF")
    lib._destroy()
    with pytest.raises(AttributeError):
        getattr(eager.ops, ns).twice


def test_under_compile_a_custom_op_is_a_named_graph_break_with_eager_results(ns):
    scale = _define_scale(ns)

    def f(x):
        return scale(x.exp(), 2.0).sum()

    x = eager.tensor([0.5, 1.0])
    compiled = eager.compile(f)
    assert compiled(x).item() == pytest.approx(f(x).item(), rel=1e-6)
    assert f"custom op {ns}::scale has no lowering" in compiled.explain()


def test_registering_on_an_operator_nobody_defined_is_pytorchs_runtime_error():
    """As torchvision's import does when its C++ extension (which defines the operators)
    did not load: PyTorch raises this, and so does kiln."""
    for register in (lambda: eager.library.register_fake("kilnnobody::op")(lambda x: x),
                     lambda: eager.library.register_autograd("kilnnobody::op", lambda c, g: g)):
        with pytest.raises(RuntimeError, match="^operator kilnnobody::op does not exist$"):
            register()
