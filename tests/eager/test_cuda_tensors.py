"""Eager CUDA tensors through the dispatcher: on a GPU where the driver finds one, else
on runtime/cuda/emulated.py's emulated device (every kernel's IR run on the host), so
every check runs on every machine. Each op family is compared with the same
op on the CPU; sizes stay small (the emulator runs Python per GPU thread)."""
import numpy as np
import pytest

import eager
from eager import nn
from eager.dispatcher import ATEN, DispatchKey
from ir.ops import Op
from runtime.cuda.current import unless_gpu


@pytest.fixture(autouse=True)
def gpu():
    """The real driver where a GPU is usable, else an emulated device (None on a GPU)."""
    with unless_gpu(memory=256 << 20) as emulated:
        yield emulated


def same(cuda_result, cpu_result, **tolerance):
    assert cuda_result.device == eager.device("cuda:0")
    assert cuda_result.dtype is cpu_result.dtype
    assert cuda_result.shape == cpu_result.shape
    np.testing.assert_allclose(cuda_result.cpu().numpy(), cpu_result.numpy(),
                               **(tolerance or dict(rtol=1e-6, atol=1e-6)))


# storage, round trips, factories ---------------------------------------------------------
def test_a_cuda_tensor_holds_device_memory_and_round_trips():
    x = eager.arange(12.).reshape(3, 4)
    c = x.cuda()
    assert c.is_cuda and c.device == eager.device("cuda", 0) and str(c.device) == "cuda:0"
    assert c._storage.data is None and c.data_ptr() == c._storage.memory.pointer != 0
    assert np.array_equal(c.cpu().numpy(), x.numpy())
    assert not c.cpu().is_cuda and c.cpu().device == eager.device("cpu")
    assert eager.cuda.memory_allocated() >= 48


@pytest.mark.parametrize("make, expected", [
    (lambda d: eager.zeros(2, 3, device=d), np.zeros((2, 3), np.float32)),
    (lambda d: eager.ones(4, dtype=eager.int64, device=d), np.ones(4, np.int64)),
    (lambda d: eager.full((2,), 7.5, device=d), np.full(2, 7.5, np.float32)),
    (lambda d: eager.arange(5, device=d), np.arange(5)),
    (lambda d: eager.tensor([[True, False]], device=d), np.array([[True, False]])),
    (lambda d: eager.empty(0, 3, device=d), np.empty((0, 3), np.float32)),
    (lambda d: eager.tensor(3.5, device=d), np.array(3.5, np.float32)),
], ids=["zeros", "ones-int64", "full", "arange", "tensor-bool", "empty-0-sized", "0-dim"])
def test_factories_make_cuda_tensors_with_device(make, expected):
    t = make("cuda")
    assert t.is_cuda and t.shape == expected.shape and t.dtype.np == expected.dtype
    assert np.array_equal(t.cpu().numpy(), expected)


def test_random_factories_on_cuda_draw_on_the_host():
    eager.manual_seed(3)
    a = eager.randn(3, 2, device="cuda")
    eager.manual_seed(3)
    assert a.is_cuda and np.array_equal(a.cpu().numpy(), eager.randn(3, 2).numpy())


def test_to_with_device_and_dtype_and_item_tolist_print():
    c = eager.tensor([1.5, -2.0]).to("cuda", eager.float64)
    assert c.is_cuda and c.dtype is eager.float64
    assert c.tolist() == [1.5, -2.0] and c[1].item() == -2.0
    assert repr(c) == "tensor([ 1.5000, -2.0000], device='cuda:0', dtype=eager.float64)"
    assert c.to("cpu", eager.int64).tolist() == [1, -2]
    assert c.to(eager.float32).is_cuda


def test_numpy_of_a_cuda_tensor_raises_as_pytorch():
    with pytest.raises(TypeError, match=r"^can't convert cuda:0 device type tensor to numpy\. "
                                        r"Use Tensor\.cpu\(\) to copy the tensor"):
        eager.ones(2, device="cuda").numpy()


# device mixes and missing kernels --------------------------------------------------------
def test_a_cpu_and_cuda_mix_raises_naming_the_devices():
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, "
                                           r"but found at least two devices, cuda:0 and cpu!"):
        eager.ones(2, device="cuda") + eager.ones(2)


def test_a_zero_dim_cpu_tensor_joins_a_cuda_op_as_a_number():
    c = eager.ones(3, device="cuda") * eager.tensor(2.5)
    assert c.is_cuda and c.tolist() == [2.5, 2.5, 2.5]


def test_an_op_without_a_cuda_kernel_raises_not_implemented_naming_it(monkeypatch):
    """Every op has a CUDA kernel now (test_cuda_coverage.py), so one is taken away."""
    c = eager.ones(3, device="cuda")
    handle = ATEN[Op.ARGMAX]
    monkeypatch.setattr(handle, "kernels", {k: v for k, v in handle.kernels.items()
                                            if k is not DispatchKey.CUDA})
    monkeypatch.setattr(handle, "_cache", {})
    with pytest.raises(NotImplementedError, match=r"Could not run 'aten::argmax' with "
                                                  r"arguments from the 'CUDA' backend"):
        eager.argmax(c)


def test_the_dispatch_table_lists_the_cuda_kernels():
    eager.ones(1, device="cuda")
    table = eager._C._dispatch_dump_table("aten::mm")
    assert "CUDA: registered at eager/backends/cuda/matmul.py:" in table
    assert "AutogradCUDA: registered at" in table
    assert ATEN[Op.ADD].kernels[DispatchKey.CUDA][0].__name__ == "add_cuda"


def test_float16_on_cuda_adds_and_sums_on_the_device():
    """Summed in float32 by a CUDA kernel (eager/backends/cuda/widened.py), rounded once."""
    h = eager.ones(2, dtype=eager.float16, device="cuda")
    assert (h + h).cpu().tolist() == [2.0, 2.0]  # elementwise: tests/eager/test_cuda_narrow.py
    total = h.sum()
    assert total.is_cuda and total.dtype is eager.float16 and total.item() == 2.0


# op families against the CPU -------------------------------------------------------------
X = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)

UNARY = ["neg", "exp", "log", "sqrt", "abs", "tanh", "sigmoid", "relu", "silu", "erf", "gelu"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_ops_match_the_cpu(name, gpu):
    x = eager.tensor(np.abs(X) + 0.5 if name in ("log", "sqrt") else X)
    fn = getattr(eager, name, None) or getattr(eager.nn.functional, name)
    c = x.cuda()
    launched = gpu.launches if gpu is not None else 0
    out = fn(c)
    if gpu is not None:  # emulated: one kernel ran on the device for the op
        assert gpu.launches == launched + 1
    same(out, fn(x), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name, other", [
    ("add", np.ones((1, 7), np.float32)), ("sub", X[0]), ("mul", X.T.copy().T),
    ("div", np.full((5, 1), 3.0, np.float32)), ("maximum", X[::-1].copy()),
    ("lt", X[:, :1]), ("eq", X), ("ge", np.zeros(7, np.float32)),
])
def test_binary_ops_broadcast_and_compare_as_on_the_cpu(name, other):
    x, y = eager.tensor(X), eager.tensor(other)
    fn = getattr(eager, name)
    same(fn(x.cuda(), y.cuda()), fn(x, y))


def test_python_numbers_promote_and_int_tensors_compute_as_on_the_cpu():
    i = eager.arange(-6, 6).reshape(3, 4)
    c = i.cuda()
    same(c * 3 + 1, i * 3 + 1)
    same(c * 0.5, i * 0.5)
    same(c > 2, i > 2)
    same(eager.add(c, c, alpha=2), eager.add(i, i, alpha=2))
    same(eager.where(c > 0, c, 0.25), eager.where(i > 0, i, 0.25))
    same(c.to(eager.float32) / 4, i.to(eager.float32) / 4)


def test_views_share_device_storage_and_are_read_in_place():
    x = eager.tensor(X)
    c = x.cuda()
    views = [lambda t: t.t(), lambda t: t[1:4, ::2], lambda t: t.permute(1, 0)[2],
             lambda t: t[:, None, :].expand(5, 2, 7), lambda t: t.view(7, 5),
             lambda t: t.t().reshape(35), lambda t: t.unsqueeze(0).squeeze(0)]
    for view in views:
        v = view(c)
        same(v, view(x))
        same(view(c) * 2, view(x) * 2)
    assert c.t()._storage is c._storage and c[1:]._storage is c._storage
    assert not c.t().contiguous()._storage is c._storage
    assert c.t().contiguous().is_contiguous()
    same(c.t().contiguous(), x.t().contiguous())
    same(c.clone(), x.clone())


def test_zero_sized_and_zero_dim_tensors():
    e = eager.ones(0, 3, device="cuda")
    assert (e + 1).shape == (0, 3) and (e + 1).is_cuda
    assert e.sum().item() == 0 and e.sum(0).tolist() == [0, 0, 0]
    s = eager.tensor(2.0, device="cuda")
    assert (s * s).item() == 4.0 and (s * s).shape == ()


def test_in_place_ops_fill_zero_and_copy_between_devices():
    x = eager.tensor(X)
    c = x.cuda()
    c.add_(1.0).mul_(2)
    x.add_(1.0).mul_(2)
    same(c, x)
    c[:, 0].fill_(5.0)
    c.t()[1].zero_()
    x[:, 0].fill_(5.0)
    x.t()[1].zero_()
    same(c, x)
    host = eager.zeros(5, 7)
    host.copy_(c)
    assert np.array_equal(host.numpy(), x.numpy())
    d = eager.zeros(7, 5, dtype=eager.float64, device="cuda")
    d.copy_(x.t())
    same(d, x.t().to(eager.float64))
    v = c.clone()
    c.mul_(0)
    assert v.sum().item() != 0


@pytest.mark.parametrize("reduce", [
    lambda t: t.sum(), lambda t: t.sum(1), lambda t: t.t().sum(0, keepdim=True),
    lambda t: t.mean(), lambda t: t.mean(0), lambda t: t.amax(1), lambda t: t[:, 1:6].amin(0),
    lambda t: eager.softmax(t, 1), lambda t: eager.log_softmax(t, 0),
    lambda t: (t > 0).sum(1),
], ids=["sum", "sum-1", "sum-t-keepdim", "mean", "mean-0", "amax", "amin-view", "softmax",
        "log_softmax", "sum-bool"])
def test_reductions_and_softmax_match_the_cpu(reduce):
    x = eager.tensor(X)
    same(reduce(x.cuda()), reduce(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("m, k, n, dtype", [(5, 7, 3, "float32"), (33, 17, 35, "float32"),
                                            (4, 6, 5, "float64"), (3, 0, 2, "float32"),
                                            (1, 1, 1, "float64")])
def test_mm_matches_numpy(m, k, n, dtype):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    c = eager.tensor(a, device="cuda") @ eager.tensor(b, device="cuda")
    assert c.is_cuda
    np.testing.assert_allclose(c.cpu().numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_matmul_family_reads_transposed_operands_and_broadcasts_the_bias():
    rng = np.random.default_rng(2)
    x, w = eager.tensor(rng.standard_normal((6, 5), np.float32)), \
        eager.tensor(rng.standard_normal((4, 5), np.float32))
    bias = eager.tensor(rng.standard_normal(4, np.float32))
    F = eager.nn.functional
    same(F.linear(x.cuda(), w.cuda(), bias.cuda()), F.linear(x, w, bias), rtol=1e-5, atol=1e-5)
    same(eager.addmm(bias.cuda(), x.cuda(), w.cuda().t(), beta=0.5, alpha=2.0),
         eager.addmm(bias, x, w.t(), beta=0.5, alpha=2.0), rtol=1e-5, atol=1e-5)
    b3 = eager.tensor(rng.standard_normal((2, 5, 3), np.float32))
    a3 = eager.tensor(rng.standard_normal((2, 4, 5), np.float32))
    same(eager.bmm(a3.cuda(), b3.cuda()), eager.bmm(a3, b3), rtol=1e-5, atol=1e-5)
    same(eager.mv(x.cuda(), w.cuda()[0]), eager.mv(x, w[0]), rtol=1e-5, atol=1e-5)
    same(eager.dot(w.cuda()[0], w.cuda()[1]), eager.dot(w[0], w[1]), rtol=1e-5, atol=1e-5)


# autograd, nn, optim ---------------------------------------------------------------------
def test_backward_on_cuda_tensors_gives_cuda_grads():
    x = eager.tensor(X, device="cuda", requires_grad=True)
    y = (eager.tanh(x) * 3).sum()
    y.backward()
    xc = eager.tensor(X, requires_grad=True)
    (eager.tanh(xc) * 3).sum().backward()
    assert x.grad.is_cuda and y.grad_fn.name() == "SumBackward0"
    same(x.grad, xc.grad, rtol=1e-5, atol=1e-6)


def _train(device):
    eager.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).to(device)
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = eager.randn(5, 6).to(device), eager.randn(5, 3).to(device)
    for _ in range(2):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return model, loss


def test_an_mlp_trains_on_cuda_as_on_the_cpu():
    cuda_model, cuda_loss = _train("cuda")
    cpu_model, cpu_loss = _train("cpu")
    assert cuda_loss.is_cuda and cuda_model[0].weight.grad.is_cuda
    np.testing.assert_allclose(cuda_loss.item(), cpu_loss.item(), rtol=1e-5)
    for p, q in zip(cuda_model.parameters(), cpu_model.parameters()):
        assert p.is_cuda and isinstance(p, nn.Parameter)
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
    assert not cuda_model.cpu()[0].weight.is_cuda


def test_the_profiler_shows_cuda_kernel_launches():
    c = eager.ones(4, device="cuda")
    with eager.profiler.profile() as prof:
        eager.exp(c)
    names = [e.name for e in prof.events()]
    assert "aten::exp" in names
    assert any(n.startswith("cuda::launch kiln_eager_exp_float32") for n in names)


def test_cuda_is_available_once_a_device_is_usable():
    assert eager.cuda.is_available() is True and eager.cuda.device_count() >= 1
