"""The dispatcher's fast path (OpHandle.entry): an op whose tensors are its one or two
leading arguments finds its kernel by those tensors' keys and the thread's masks. It must
behave as the general path: the same kernels, the same errors, the profiler's events, and
a new kernel as soon as a registration, a tensor's keys or the thread's masks change."""
import numpy as np
import pytest

import eager
from eager import dispatcher, profiler
from eager.dispatcher import ATEN, DispatchKey
from eager.tensor import ops
from ir.ops import Op


@pytest.fixture
def twice():
    """`mylib::twice(Tensor x) -> Tensor` with a CPU kernel that says which version ran."""
    handle = dispatcher.define("mylib::twice(Tensor x) -> Tensor")
    ran = []

    def first(x):
        ran.append("first")
        return eager.from_numpy(x.detach().numpy() * 2)
    handle.register(DispatchKey.CPU, first)
    handle.ran = ran
    yield handle
    dispatcher.undefine("mylib::twice")


def _error(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return type(info.value), str(info.value)


def test_a_second_call_with_the_same_keys_takes_the_fast_path(twice):
    x = eager.ones(3)
    assert twice._leading == 1 and not twice._fast
    twice(x)
    assert list(twice._fast.values()) == [twice.kernels[DispatchKey.CPU][0]]
    assert twice(x).tolist() == [2.0, 2.0, 2.0]
    assert twice.ran == ["first", "first"]


def test_registering_again_reaches_calls_already_on_the_fast_path(twice):
    x = eager.ones(2)
    twice(x)
    twice(x)

    def second(x):
        twice.ran.append("second")
        return eager.from_numpy(x.detach().numpy() * 2)
    twice.register(DispatchKey.CPU, second)
    assert not twice._fast
    twice(x)
    twice(x)
    assert twice.ran == ["first", "first", "second", "second"]


def test_replacing_the_kernel_table_forgets_the_kernels_found(twice):
    x = eager.ones(2)
    twice(x)
    twice.kernels = {}
    with pytest.raises(NotImplementedError, match="Could not run 'mylib::twice'"):
        twice(x)


@pytest.mark.parametrize("fn, good, bad", [
    (ATEN[Op.MM], (eager.ones(2, 3), eager.ones(3, 2)), (eager.ones(2, 3), eager.ones(2, 3))),
    (ATEN[Op.MM], (eager.ones(2, 3), eager.ones(3, 2)),
     (eager.ones(2, 3), eager.ones(3, 2, dtype=eager.float64))),
    (ATEN[Op.MM], (eager.ones(2, 3), eager.ones(3, 2)), (eager.ones(2, 3), "a string")),
    (ATEN[Op.ADD], (eager.ones(3), eager.ones(3)), (eager.ones(3), eager.ones(4))),
    (ATEN[Op.ADD], (eager.ones(3), eager.ones(3)), (eager.ones(3), eager.ones(3, device="meta"))),
    (ATEN[Op.ADD], (eager.ones(3), eager.ones(3)), (eager.ones(3), None)),
    (ATEN[Op.ADD], (eager.ones(3), eager.ones(3)), (1, 2)),
    (ATEN[Op.ADD], (eager.ones(3), eager.ones(3)), (eager.ones(3),)),
    (ATEN[Op.SUM], (eager.ones(3),), (eager.ones(3), 5)),
    (ATEN[Op.NEG], (eager.ones(3),), (eager.ones(3, dtype=eager.bool),)),
])
def test_the_fast_path_raises_what_the_general_path_raises(fn, good, bad):
    handle = fn
    handle._forget_kernels()
    cold = _error(handle, *bad)
    handle(*good)
    handle(*good)
    assert handle._fast
    assert _error(handle, *bad) == cold
    assert _error(handle.entry, *bad) == cold


def test_a_tensors_keys_and_the_grad_mode_choose_the_kernel():
    x, y = eager.ones(2, 2), eager.ones(2, 2)
    assert (x @ y).grad_fn is None
    x.requires_grad_()
    assert type((x @ y).grad_fn).__name__ == "MmBackward0"
    with eager.no_grad():
        out = x @ y
    assert out.grad_fn is None and not out.requires_grad
    assert (x.detach() + y).grad_fn is None
    assert type((x + y).grad_fn).__name__ == "AddBackward0"
    assert (x.to("meta") + y.to("meta")).device.type == "meta"


def test_python_numbers_give_the_same_answers_on_every_call():
    x = eager.tensor([1.0, 2.0])
    for _ in range(3):
        assert (x + 1).tolist() == [2.0, 3.0]
        assert (2 * x).tolist() == [2.0, 4.0]
        assert (1 - x).tolist() == [0.0, -1.0]
        assert eager.add(x, 1, alpha=2).tolist() == [3.0, 4.0]


def test_a_tensor_and_a_number_take_the_fast_path_with_the_tensors_keys():
    handle = ATEN[Op.MUL]
    handle._forget_kernels()
    x = eager.ones(2)
    x * 3.0
    mask = (x._keys | dispatcher.tls.include) & ~dispatcher.tls.exclude
    assert list(handle._fast) == [mask << 8 | x._keys]
    y = eager.ones(2, requires_grad=True)
    out = 3.0 * y
    assert type(out.grad_fn).__name__ == "MulBackward0"
    grad_mask = (y._keys | dispatcher.tls.include) & ~dispatcher.tls.exclude
    assert handle._fast[grad_mask << 8 | y._keys].__name__ == "mul_autograd"
    out.sum().backward()
    assert y.grad.tolist() == [3.0, 3.0]
    with profiler.profile() as prof:  # the profiler still records number calls
        x * 3.0
    assert [e.name for e in prof.events()] == ["aten::mul"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "bool"])
@pytest.mark.parametrize("number", [2, 2.5, True, -0.0, float("nan"), -3])
def test_a_number_on_either_side_promotes_as_pytorch_does(dtype, number):
    torch = pytest.importorskip("torch")
    values = [0, 1, 1] if dtype == "bool" else [1, -2, 3]
    x = eager.tensor(values, dtype=getattr(eager, dtype))
    t = torch.tensor(values, dtype=getattr(torch, dtype))
    for _ in range(2):  # the first call learns the kernel, the second takes the fast path
        pairs = [(x + number, t + number), (number * x, number * t), (x * number, t * number)]
        if dtype != "bool" and not isinstance(number, bool):  # PyTorch refuses bool - x
            pairs += [(x - number, t - number), (number - x, number - t)]
        for ours, theirs in pairs:
            assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "eager.")
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_kept_numbers_keep_their_sign_and_type():
    """wrap_scalar keeps the array of a number met before: -0.0 and 0.0, 1 and 1.0 and
    True are different numbers to it."""
    x = eager.tensor([1.0, -1.0])
    assert np.signbit((x * 0.0).numpy()).tolist() == [False, True]
    assert np.signbit((x * -0.0).numpy()).tolist() == [True, False]
    assert np.signbit((x * 0.0).numpy()).tolist() == [False, True]
    i = eager.tensor([3])
    assert (i * 1).dtype == eager.int64 and (i * 1.0).dtype == eager.float32
    assert (i * True).dtype == eager.int64 and (i * 1).dtype == eager.int64
    assert (x + float("nan")).isnan().all().item()


def test_the_profiler_records_calls_the_fast_path_has_seen():
    a, b = eager.ones(2, 3), eager.ones(3, 2)
    a @ b
    a @ b
    with profiler.profile() as prof:
        a @ b
    names = [e.name for e in prof.events()]
    assert names[:2] == ["aten::matmul", "aten::mm"]


def test_in_place_ops_keep_the_general_path_and_bump_versions():
    x = eager.zeros(3)
    assert ATEN[Op.ADD_]._leading == 0
    before = x._version
    x.add_(eager.ones(3))
    x.add_(eager.ones(3))
    assert x._version == before + 2 and x.tolist() == [2.0, 2.0, 2.0]


def test_methods_operators_and_ops_are_the_handles_entries():
    assert eager.Tensor.add is ATEN[Op.ADD].entry
    assert eager.Tensor.__matmul__ is ATEN[Op.MATMUL].entry
    assert ops.mm is ATEN[Op.MM].entry and ops.mm.handle is ATEN[Op.MM]
    assert eager.mm is ATEN[Op.MM]  # the public name stays the handle
    x = eager.tensor([[1.0, 2.0]])
    np.testing.assert_array_equal(x.mm(x.t()).numpy(), [[5.0]])
    assert eager.Tensor.exp(x).shape == (1, 2)


def test_a_redispatch_finds_a_kernel_registered_after_it_ran(twice):
    """An Autograd kernel's redispatch (OpHandle.below) shares the fast path's cache."""
    twice.register(DispatchKey.Autograd, lambda x: twice.redispatch(DispatchKey.Autograd, x))
    x = eager.ones(2, requires_grad=True)
    twice(x)
    twice(x)
    assert twice.below(DispatchKey.Autograd) is twice.below(DispatchKey.Autograd)

    def second(x):
        twice.ran.append("second")
        return eager.from_numpy(x.detach().numpy() * 2)
    twice.register(DispatchKey.CPU, second)
    twice(x)
    assert twice.ran == ["first", "first", "second"]
    with eager.no_grad():  # the Autograd key masked: the CPU kernel straight away
        twice(x)
    assert twice.ran[-1] == "second" and len(twice.ran) == 4
