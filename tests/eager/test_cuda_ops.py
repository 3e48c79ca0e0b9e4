"""The CUDA kernels of argmax/argmin, max/min over a dim, var, cat and stack, the index
ops, nonzero, select/slice backward and gelu_backward, each against the same op on the
CPU: odd sizes, 0-sized tensors, negative and repeated indices, non-contiguous inputs;
an index out of range raises the CPU's error (found on the device, read from its status
word); backward of every derivative rule on CUDA equals the CPU's; Adam and AdamW on
CUDA parameters equal the CPU's. On a GPU where the driver finds one, else on
runtime/cuda/emulated.py's emulated device (the `gpu` fixture of test_cuda_tensors.py)."""
import numpy as np
import pytest

import eager
from eager import nn
from eager.tensor import ops
import test_cuda_tensors
import test_gradcheck as G

gpu = test_cuda_tensors.gpu  # the autouse fixture: a GPU, else an emulated device
same = test_cuda_tensors.same
RNG = np.random.default_rng(7)
X = RNG.standard_normal((5, 7)).astype(np.float32)
X3 = RNG.standard_normal((3, 4, 5))
I = eager.tensor  # index tensors are made on the CPU and moved with the inputs


def _on(device, value):
    if isinstance(value, eager.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_on(device, v) for v in value)
    return value


def both(fn, *args, **tolerance):
    """fn on the CPU and on CUDA (every tensor argument moved there) give one result."""
    expected = fn(*args)
    got = fn(*_on("cuda", args))
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        same(g, e, **(tolerance or dict(rtol=0, atol=0)))


x, xt, x3 = eager.tensor(X), eager.tensor(X.T.copy()).t(), eager.tensor(X3)

OPS = {
    "index-negative-repeated": (lambda t, i: t[i], x, I([4, -1, 0, 4, -5])),
    "index-columns-of-transposed": (lambda t, i: t[:, i], xt, I([6, 0, -2])),
    "index-broadcast-pair": (lambda t, i, j: t[i, j], x, I([[0], [4], [-2]]), I([1, 6, 0, 3])),
    "index-middle-dim-int32": (lambda t, i: t[:, i], x3, I([3, 0, 3], dtype=eager.int32)),
    "index-empty": (lambda t, i: t[i], x, I([], dtype=eager.int64)),
    "index-mask": (lambda t: t[t > 0.5], x),
    "index_put": (lambda t, i, v: eager.index_put(t, (i,), v), x, I([1, -1]),
                  eager.tensor(X[:2] * 3)),
    "index_put-accumulate-repeated": (lambda t, i, v: eager.index_put(t, (i,), v, True), x,
                                      I([3, 3, 0, 3]), eager.ones(4, 7)),
    "index_put_-into-a-view": (lambda t, i: t.clone().t().index_put_((i,), eager.tensor(2.5)),
                               x, I([6, 1])),
    "setitem-pair": (lambda t, i, j: _setitem(t.clone(), (i, j), -1.0), x, I([0, 2]), I([6, 5])),
    "index_select-transposed": (lambda t, i: eager.index_select(t, 1, i), xt, I([4, 0, 4])),
    "index_select-0-sized-index": (lambda t, i: eager.index_select(t, 0, i), x,
                                   I([], dtype=eager.int64)),
    "index_select-int64-data": (lambda t, i: eager.index_select(t, 0, i),
                                eager.arange(15).reshape(5, 3), I([2, 2, 0])),
    "gather-dim0": (lambda t, i: eager.gather(t, 0, i), x, I(RNG.integers(0, 5, (3, 7)))),
    "gather-dim1-transposed": (lambda t, i: eager.gather(t, 1, i), xt,
                               I(RNG.integers(0, 7, (5, 2)))),
    "gather-0-dim": (lambda t, i: eager.gather(t, 0, i), eager.tensor(2.0), I(0)),
    "scatter": (lambda t, i, s: eager.scatter(t, 1, i, s), x, I([[6, 0, 2], [1, 3, 5]]),
                eager.tensor(X[:3, :4].copy())),
    "scatter_add-repeated": (lambda t, i, s: eager.scatter_add(t, 0, i, s), x,
                             I(RNG.integers(0, 5, (6, 7))), eager.ones(6, 7)),
    "scatter_add-int64": (lambda t, i, s: eager.scatter_add(t, 0, i, s),
                          eager.zeros(4, dtype=eager.int64), I([1, 1, 3, 1]),
                          eager.arange(4)),
    "index_add-alpha-repeated": (lambda t, i, s: eager.index_add(t, 1, i, s, alpha=0.5), x,
                                 I([2, 2, 6]), eager.ones(5, 3)),
    "embedding": (lambda w, i: nn.functional.embedding(i, w), x,
                  I([[4, 0, 4], [1, 2, 3]], dtype=eager.int32)),
    "nonzero": (lambda t: eager.nonzero(t > 0), x3),
    "nonzero-0-sized": (lambda t: eager.nonzero(t), eager.zeros(0, 3)),
    "cat-promotes-and-reads-views": (lambda a, b, c: eager.cat([a, b, c], 1), xt,
                                     eager.ones(5, 2, dtype=eager.float64), x[:, ::3]),
    "cat-legacy-empty": (lambda a, b: eager.cat([a, b, a]), x, eager.ones(0)),
    "stack-dim-1": (lambda a, b: eager.stack([a, b], 1), x, xt),
    "argmax-dim": (lambda t: eager.argmax(t, 1), x),
    "argmin-transposed-keepdim": (lambda t: eager.argmin(t, 0, keepdim=True), xt),
    "argmax-all": (lambda t: eager.argmax(t), x3),
    "argmax-ties-and-nan": (lambda t: (eager.argmax(t, 1), eager.argmin(t, 1)),
                            eager.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, float("nan"), 5.0,
                                                                  float("nan")]])),
    "max-dim": (lambda t: eager.max(t, 1), x3),
    "min-dim-keepdim-int": (lambda t: eager.min(t, 0, keepdim=True),
                            eager.tensor([[3, 1, 2], [1, 1, 5]])),
    "max-0-dim": (lambda t: eager.max(t, 0), eager.tensor(4.0)),
    "max-dim-bool": (lambda t: eager.max(t, 1), eager.tensor([[False, True], [False, False]])),
    "select_backward": (lambda g: ops.select_backward(g, [3, 5], 1, -2), eager.ones(3)),
    "slice_backward": (lambda g: ops.slice_backward(g, [7, 2], 0, 1, 6, 2),
                       eager.ones(3, 2)),
}


def _setitem(t, key, value):
    t[key] = value
    return t


@pytest.mark.parametrize("name", OPS)
def test_each_op_matches_the_cpu(name):
    fn, *args = OPS[name]
    both(fn, *args)


@pytest.mark.parametrize("fn", [
    lambda t: t.var(1), lambda t: t.var(), lambda t: t.var(0, correction=0, keepdim=True),
    lambda t: t.t().var(0), lambda t: eager.zeros(0, 3).to(t.device).var(0),
], ids=["dim", "all", "correction-0-keepdim", "transposed", "0-sized"])
def test_var_matches_the_cpu(fn):
    both(fn, x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_matches_the_cpu(approximate):
    both(lambda g, t: ops.gelu_backward(g, t, approximate=approximate), xt, x,
         rtol=1e-5, atol=1e-6)


# indices out of range -------------------------------------------------------------------
BAD = {
    "index": lambda t, I: t[I([0, 9])],
    "index-second-dim": lambda t, I: t[I([0]), I([-8])],
    "index_put": lambda t, I: eager.index_put(t, (I([1]), I([7])), eager.tensor(1.0)),
    "index_put_-accumulate": lambda t, I: t.index_put_((I([-6]),), I(np.ones(7, np.float32)),
                                                       True),
    "index_select": lambda t, I: eager.index_select(t, 1, I([7])),
    "index_add": lambda t, I: eager.index_add(t, 0, I([5]), I(np.ones((1, 7), np.float32))),
    "gather": lambda t, I: eager.gather(t, 1, I([[0, -1]])),
    "scatter": lambda t, I: eager.scatter(t, 0, I([[5]]), I([[1.0]])),
    "scatter_add": lambda t, I: eager.scatter_add(t, 1, I([[0, 7]]), I([[1.0, 2.0]])),
    "embedding": lambda t, I: nn.functional.embedding(I([1, 5, 2]), t),
}


def _on_cuda(*args, **kwargs):
    return eager.tensor(*args, device="cuda", **kwargs)


@pytest.mark.parametrize("name", BAD)
def test_an_index_out_of_range_raises_the_cpus_error(name, gpu):
    with pytest.raises((IndexError, RuntimeError)) as on_cpu:
        BAD[name](x.clone(), eager.tensor)
    c = x.cuda()
    launched = gpu.launches if gpu is not None else 0
    with pytest.raises(on_cpu.type) as on_cuda:
        BAD[name](c, _on_cuda)
    assert str(on_cuda.value) == str(on_cpu.value)
    assert "out of bounds" in str(on_cuda.value)
    if gpu is not None:  # the check ran on the device, in the op's launch
        assert gpu.launches > launched
    same(c, x)  # nothing written, in place or not


def test_cpu_indices_index_a_cuda_tensor_and_cuda_indices_no_cpu_tensor():
    c = x.cuda()
    same(c[I([1, 0])], x[I([1, 0])])
    with pytest.raises(RuntimeError, match=r"^indices should be either on cpu or on the same "
                                           r"device as the indexed tensor \(cpu\)"):
        x[I([1, 0]).cuda()]
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        eager.gather(c, 0, I([[0]]))


def test_integer_products_and_atomic_adds_without_code_raise_naming_the_dtype():
    n = eager.ones(2, 3, dtype=eager.int8, device="cuda")
    with pytest.raises(NotImplementedError, match="'aten::mm' with arguments from the 'CUDA' "
                                                  "backend: kiln's CUDA GEMM is float32 or "
                                                  r"float64 \(float16 and bfloat16 through "
                                                  r"float32\), not int8"):
        n @ n.t()
    flags = eager.zeros(3, dtype=eager.bool, device="cuda")
    with pytest.raises(NotImplementedError, match="bool CUDA tensors: kiln's CUDA kernels add "
                                                  "atomically only float32, float64, int32"):
        eager.scatter_add(flags, 0, I([0, 0]).cuda(), eager.ones(2, dtype=eager.bool).cuda())


# the profiler -----------------------------------------------------------------------------
CUDA_ACTIVITY = [eager.profiler.ProfilerActivity.CPU, eager.profiler.ProfilerActivity.CUDA]


@pytest.mark.parametrize("how", [dict(use_cuda=True), dict(activities=CUDA_ACTIVITY)],
                         ids=["use_cuda", "activities"])
def test_the_profiler_times_cuda_launches_on_the_device_when_asked(how):
    """On the emulated device the events time the host clock around the launch."""
    c = eager.ones(4, 3, device="cuda")
    eager.exp(c).sum(0)  # kernels made and loaded before
    with eager.profiler.profile(**how) as prof:
        eager.exp(c).sum(0)
    launches = [e for e in prof.events() if e.name.startswith("cuda::launch")]
    assert len(launches) >= 2
    assert all(0 < e.device_time <= e.cpu_time_total for e in launches)
    (exp,) = [e for e in prof.events() if e.name == "aten::exp"]
    assert exp.cuda_time_total == sum(e.device_time for e in launches if e.cpu_parent is exp) > 0
    table = prof.key_averages().table(sort_by="cuda_time_total")
    assert "Self CUDA" in table and "CUDA total" in table and "Self CUDA time total" in table
    with eager.profiler.profile() as plain:
        eager.exp(c)
    assert all(e.device_time == 0 for e in plain.events())
    assert "CUDA" not in plain.key_averages().table()


# autograd and optimisers -----------------------------------------------------------------
def _grads(case, device, monkeypatch):
    """The case's leaves' gradients under a seeded weighting of its outputs; index tensors
    the case's function makes go to `device` too."""
    leaves = [t.detach().to(device).requires_grad_(t.requires_grad) for t in G._inputs(case)]
    made = eager.tensor
    with monkeypatch.context() as m:
        m.setattr(eager, "tensor", lambda *a, device=device, **k: made(*a, device=device, **k))
        out = case.fn(*leaves)
    rng = np.random.default_rng(1)
    total = 0
    for o in out if isinstance(out, (tuple, list)) else [out]:
        if o.requires_grad:
            weights = made(rng.standard_normal(tuple(o.shape)), dtype=o.dtype).to(device)
            total = total + (o * weights).sum()
    total.backward()
    return [None if t.grad is None else t.grad for t in leaves]


@pytest.mark.parametrize("case", G.CASES + G.COMPOSITE_CASES + G.INPLACE_CASES,
                         ids=lambda c: c.id)
def test_backward_of_every_rule_on_cuda_equals_the_cpu(case, monkeypatch):
    from test_cuda_coverage import NOT_ON_CUDA
    if case.op in NOT_ON_CUDA:
        with pytest.raises(NotImplementedError, match="'CUDA' backend"):
            _grads(case, "cuda", monkeypatch)
        return
    expected = _grads(case, "cpu", monkeypatch)
    got = _grads(case, "cuda", monkeypatch)
    assert [g is None for g in got] == [e is None for e in expected]
    for g, e in zip(got, expected):
        if e is not None:
            same(g, e, rtol=1e-9, atol=1e-12)


def test_backward_through_slicing_indexing_and_cat_on_cuda():
    def f(t):
        parts = eager.cat([t[1:4, ::2], t[:, 0:1].expand(5, 4)[0:3]], 1)
        return (parts * parts).sum() + t[I([0, 0, 4])].sum() + t[2, -1]
    grads = []
    for device in ("cpu", "cuda"):
        t = eager.tensor(X, device=device, requires_grad=True)
        f(t).backward()
        grads.append(t.grad)
    same(grads[1], grads[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda ps: eager.optim.Adam(ps, lr=0.05),
    lambda ps: eager.optim.Adam(ps, lr=0.05, weight_decay=0.1, amsgrad=True),
    lambda ps: eager.optim.AdamW(ps, lr=0.05, weight_decay=0.1),
], ids=["adam", "adam-amsgrad-weight-decay", "adamw"])
def test_adam_steps_on_cuda_parameters_equal_the_cpu(make):
    def train(device):
        eager.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).to(device)
        opt = make(model.parameters())
        x_, y_ = eager.randn(5, 4).to(device), eager.randn(5, 2).to(device)
        for _ in range(3):
            opt.zero_grad()
            ((model(x_) - y_) ** 2).mean().backward()
            opt.step()
        return list(model.parameters())
    for p, q in zip(train("cuda"), train("cpu")):
        assert p.is_cuda
        same(p.detach(), q.detach(), rtol=1e-5, atol=1e-6)


# PTX -------------------------------------------------------------------------------------
def test_the_new_kernels_assemble_with_ptxas_for_sm_90():
    """The emulator runs the IR; ptxas checks the PTX a GPU would load: the index kernel
    with its compare-and-swap and atomic adds (float32, float64, int64), the arg-reduction
    with values."""
    from eager.backends.cuda.argreduce import ArgSpec, arg_kernel
    from eager.backends.cuda.indexed import IndexedSpec, indexed_kernel
    from ir import dtypes
    from runtime.cuda import nvptx
    if nvptx.ptxas_path() is None:
        pytest.skip("ptxas is not installed")
    kernels = [indexed_kernel(IndexedSpec(dt, (dtypes.int64, dtypes.int32), 2, scatter,
                                          scatter, not scatter))
               for dt in (dtypes.float32, dtypes.float64, dtypes.int64) for scatter in (0, 1)]
    kernels.append(arg_kernel(ArgSpec(True, dtypes.float32, True, 1, 2)))
    for kernel in kernels:
        report = nvptx.ptxas_report(kernel.ptx("sm_90"), "sm_90")
        assert report[kernel.name].spill_stores == 0, kernel.name
