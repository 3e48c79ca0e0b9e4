"""Tensor basics: devices and conversions, views over shared storage (strides checked
against PyTorch), copies, detach, and the Python protocols (len, iter, bool, numpy)."""
import numpy as np
import pytest

import eager


def reference_torch():
    return pytest.importorskip("torch", reason="torch is not installed: no reference to compare")


# devices and conversions ---------------------------------------------------------------
def test_device_attribute():
    t = eager.zeros(2)
    assert t.device == eager.device("cpu") and t.device == "cpu"
    assert str(t.device) == "cpu" and repr(t.device) == "device(type='cpu')"
    m = eager.zeros(2, device="meta")
    assert m.device.type == "meta" and m.is_meta and not m.is_cuda
    assert eager.device("cuda:1").index == 1 and eager.device("cuda").index == 0
    with pytest.raises(RuntimeError, match="Expected one of cpu, cuda, meta device type"):
        eager.device("tpu")


def test_to_dtype_copies_and_converts():
    t = eager.tensor([1.7, -2.2])
    d = t.to(eager.float64)
    assert d.dtype is eager.float64 and d.tolist() == pytest.approx([1.7, -2.2])
    i = t.to(eager.int64)
    assert i.dtype is eager.int64 and i.tolist() == [1, -2]  # truncates toward zero
    assert t.to(eager.float32) is t  # nothing to do: the same tensor
    assert t.to(eager.float32, copy=True) is not t
    d.add_(1)
    assert t.tolist() == pytest.approx([1.7, -2.2])  # a conversion is a copy
    assert t.double().dtype is eager.float64 and t.long().dtype is eager.int64


def test_to_meta_keeps_shape_and_dtype_and_drops_data():
    t = eager.ones(2, 3, dtype=eager.float64)
    m = t.to("meta")
    assert m.device == eager.device("meta")
    assert m.shape == (2, 3) and m.dtype is eager.float64
    with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
        m.numpy()
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        m.to("cpu")


@pytest.mark.parametrize("make", [
    lambda: eager.zeros(2, device="cuda"),
    lambda: eager.tensor([1., 2.], device="cuda"),
    lambda: eager.ones(2).to("cuda"),
    lambda: eager.ones(2).cuda(),
    lambda: eager.ones(2).to(eager.device("cuda", 0), eager.float64),
    lambda: eager.empty(2, device="meta").to("cuda"),
], ids=["zeros", "tensor", "to", "cuda()", "to-device-dtype", "meta-to-cuda"])
def test_cuda_tensors_raise_a_clear_error_never_fall_back(make):
    if eager.cuda.is_available():
        pytest.skip("CUDA is available here: the error path cannot be reached")
    with pytest.raises(RuntimeError, match="^CUDA backend is not available: "):
        make()


def test_cuda_is_not_available():
    assert eager.cuda.is_available() is False
    assert eager.cuda.device_count() == 0


# views share storage -------------------------------------------------------------------
VIEW_CHAINS = {
    "view": lambda x: x.view(4, 6),
    "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(2, 0, 1),
    "expand": lambda x: x[:, :1].expand(2, 5, 4),
    "slice": lambda x: x[:, 1:, ::2],
    "select": lambda x: x[1],
    "chain": lambda x: x.transpose(0, 1)[1:, :, 1:3].permute(2, 0, 1),
    "t-of-select": lambda x: x[0].t(),
    "unsqueeze-expand": lambda x: x[0].unsqueeze(-1).expand(3, 4, 2),
    "flat-slice": lambda x: x.view(-1)[3:19:4],
    "narrowed-view": lambda x: x[1].view(12)[2:],
}


@pytest.mark.parametrize("name", list(VIEW_CHAINS))
def test_views_share_storage(name):
    x = eager.arange(24.).view(2, 3, 4)
    v = VIEW_CHAINS[name](x)
    assert v._storage is x._storage and v._base is not None
    before = v.numpy().copy()
    x.mul_(2)  # written through the base, seen through the view
    np.testing.assert_array_equal(v.numpy(), before * 2)
    assert v._version == x._version == 1


@pytest.mark.parametrize("name", list(VIEW_CHAINS))
def test_view_strides_and_offsets_match_torch(name):
    torch = reference_torch()
    ours = VIEW_CHAINS[name](eager.arange(24.).view(2, 3, 4))
    theirs = VIEW_CHAINS[name](torch.arange(24.).view(2, 3, 4))
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert ours.stride() == theirs.stride()
    assert ours.storage_offset() == theirs.storage_offset()
    assert ours.is_contiguous() == theirs.is_contiguous()
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_view_of_a_non_contiguous_tensor_is_refused():
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        eager.ones(2, 3).t().view(6)


def test_is_contiguous_and_contiguous():
    x = eager.arange(6.).view(2, 3)
    assert x.is_contiguous() and x.contiguous() is x
    t = x.t()
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c.is_contiguous() and c.stride() == (2, 1)
    assert c._storage is not x._storage and c.tolist() == t.tolist()
    assert eager.ones(3, 1).expand(3, 1).is_contiguous()  # size-1 dims have any stride
    assert not eager.ones(3, 1).expand(3, 2).is_contiguous()


def test_clone_is_independent():
    x = eager.arange(4.)
    c = x.clone()
    c.add_(10)
    assert x.tolist() == [0., 1., 2., 3.] and c.tolist() == [10., 11., 12., 13.]
    assert c._storage is not x._storage
    t = x.view(2, 2).t().clone()
    assert t.tolist() == [[0., 2.], [1., 3.]]


def test_detach_shares_memory_and_version_counter():
    x = eager.ones(3, requires_grad=True)
    y = x * 2
    d = y.detach()
    assert d._storage is y._storage and not d.requires_grad and d.grad_fn is None
    d.add_(1)
    assert y.tolist() == [3., 3., 3.]
    assert y._version == d._version == 1
    # the shared counter is what lets autograd see a write made through a detached alias
    z = (x * 1).exp()  # exp saves its result for backward
    z.detach().zero_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


# protocols and small things --------------------------------------------------------------
def test_size_repr_and_behaviour():
    s = eager.zeros(2, 3).shape
    assert repr(s) == "eager.Size([2, 3])"
    assert s == (2, 3) and isinstance(s, tuple) and s.numel() == 6
    assert eager.zeros(2, 3).size(-1) == 3
    assert repr(eager.tensor(1.).shape) == "eager.Size([])"


def test_item_tolist_and_numpy_sharing():
    t = eager.tensor([[1, 2], [3, 4]])
    assert t.tolist() == [[1, 2], [3, 4]] and isinstance(t.tolist()[0][0], int)
    assert eager.tensor([2.5]).item() == 2.5 and isinstance(eager.tensor(7).item(), int)
    with pytest.raises(RuntimeError, match="a Tensor with 4 elements cannot be converted"):
        t.item()
    a = t.numpy()
    a[0, 0] = 100
    assert t[0, 0].item() == 100  # numpy() shares memory
    n = np.arange(3.)
    f = eager.from_numpy(n)
    n[1] = -1
    assert f.tolist() == [0., -1., 2.]  # and so does from_numpy
    assert t.t().numpy().strides == (8, 16)  # a view's numpy has the view's strides


def test_numpy_of_a_tensor_that_requires_grad_raises():
    x = eager.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"Use tensor.detach\(\).numpy\(\) instead"):
        x.numpy()
    assert x.detach().numpy().tolist() == [1., 1.]


def test_len_iter_and_bool():
    t = eager.tensor([[1., 2.], [3., 4.], [5., 6.]])
    assert len(t) == 3
    rows = list(t)
    assert [r.tolist() for r in rows] == [[1., 2.], [3., 4.], [5., 6.]]
    assert rows[1]._storage is t._storage  # iteration yields views
    assert bool(eager.tensor([0.5])) is True and bool(eager.tensor(0)) is False
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        bool(t)
    with pytest.raises(RuntimeError, match="no values is ambiguous"):
        bool(eager.zeros(0))
    with pytest.raises(TypeError, match="len\\(\\) of a 0-d tensor"):
        len(eager.tensor(1.))
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(eager.tensor(1.))
    assert len(eager.zeros(0, 3)) == 0 and list(eager.zeros(0, 3)) == []


def test_protocol_errors_match_torch():
    torch = reference_torch()
    for make in (lambda m: bool(m.ones(2)), lambda m: bool(m.zeros(0)),
                 lambda m: len(m.tensor(1.)), lambda m: m.ones(2).item()):
        with pytest.raises(Exception) as ours:
            make(eager)
        with pytest.raises(Exception) as theirs:
            make(torch)
        assert type(ours.value) is type(theirs.value)
        assert str(ours.value) == str(theirs.value)


def test_assigning_data_swaps_the_contents_but_keeps_the_leaf():
    x = eager.ones(2, requires_grad=True)
    x.data = eager.arange(3.)
    assert x.shape == (3,) and x.tolist() == [0., 1., 2.] and x.requires_grad
    x.data = eager.empty(4, device="meta")
    y = x * 2  # dispatches on the new device, and still records a graph
    assert y.device == eager.device("meta") and y.shape == (4,)
    assert type(y.grad_fn).__name__ == "MulBackward0"


def test_from_array_sets_every_field_make_and_storage_set():
    """from_array writes Storage.__init__ and Tensor._make out inline (the hot path)."""
    from eager.device import CPU
    from eager.tensor import Storage, Tensor, from_array
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    fast = from_array(a)
    made = Tensor._make(Storage(a.ravel(), CPU, a.nbytes), (2, 3), (3, 1), 0, eager.float32, CPU)
    made._np_cache = a
    def same(u, v):
        return np.array_equal(u, v) if isinstance(u, np.ndarray) else u == v
    for name in Storage.__slots__[:-1]:
        assert same(getattr(fast._storage, name), getattr(made._storage, name)), name
    for name in Tensor.__slots__:
        if name not in ("_storage", "__weakref__", "__dict__"):
            assert same(getattr(fast, name), getattr(made, name)), name
    assert type(fast._shape) is eager.Size and type(fast._stride) is tuple


def test_empty_cpu_sets_every_field_make_and_storage_set():
    """empty_cpu, the compiled kernels' output, writes them out inline too."""
    from eager.device import CPU
    from eager.tensor import Storage, Tensor, empty_cpu
    shape = eager.Size((2, 3))
    fast = empty_cpu(shape, (3, 1), 6, eager.float64)
    made = Tensor._make(Storage(fast._storage.data, CPU, 48), shape, (3, 1), 0, eager.float64,
                        CPU)
    for name in Storage.__slots__[:-1]:
        assert getattr(fast._storage, name) is getattr(made._storage, name) or \
            getattr(fast._storage, name) == getattr(made._storage, name), name
    for name in Tensor.__slots__:
        if name not in ("_storage", "__weakref__", "__dict__"):
            assert getattr(fast, name) == getattr(made, name), name
    assert fast._storage.data.shape == (6,) and fast.dtype is eager.float64


def test_large_host_memory_starts_on_a_cache_line():
    """kiln's own allocations of ALIGN_FROM bytes or more start on an ALIGN-byte boundary
    (numpy's start 16 bytes past one, and row kernels read those 20-30% slower)."""
    import compiler
    from eager.tensor import ALIGN, ALIGN_FROM, aligned, aligned_empty, empty_cpu
    a = np.random.default_rng(0).standard_normal((129, 67)).astype(np.float32)
    assert a.nbytes >= ALIGN_FROM
    made = [eager.tensor(a), eager.zeros(129, 67), eager.full((129, 67), 2.5),
            eager.randn(129, 67), eager.tensor(a, dtype=eager.float64),
            empty_cpu(eager.Size((129, 67)), (67, 1), 129 * 67, eager.float32),
            compiler.compile(lambda t: t * 2 + 1)(eager.tensor(a))]
    for t in made:
        assert t.data_ptr() % ALIGN == 0 and t.is_contiguous()
    np.testing.assert_array_equal(made[0].numpy(), a)
    np.testing.assert_array_equal(made[2].numpy(), np.full((129, 67), 2.5, np.float32))
    np.testing.assert_array_equal(made[6].numpy(), a * 2 + 1)
    assert (made[1].numpy() == 0).all() and made[4].dtype is eager.float64
    odd = np.empty(ALIGN_FROM + 64, np.uint8)[16:16 + ALIGN_FROM].view(np.float32)
    assert aligned(odd).__array_interface__["data"][0] % ALIGN == 0
    small = np.arange(5.0)
    assert aligned(small) is small and aligned_empty((3, 4), object).dtype == object
    for dt in (np.int8, np.bool_, np.int16, np.float32, np.float64, np.int64):
        for shape in (ALIGN_FROM + 3, (7, ALIGN_FROM // 5 + 1)):
            out = aligned_empty(shape, dt)
            assert out.shape == (shape if isinstance(shape, tuple) else (shape,))
            assert out.dtype == dt and out.flags.c_contiguous and out.flags.writeable
            assert out.__array_interface__["data"][0] % ALIGN == 0
            out[...] = 1  # all of it is its own
            assert out.sum() == out.size


def test_aligned_memory_from_an_allocator_aligned_to_less_than_an_element(monkeypatch):
    """aligned_empty skips whole elements to the boundary; where the allocator's address
    leaves a part of one, it takes the bytes path."""
    import importlib
    module = importlib.import_module("eager.tensor")
    real, calls = module.array_address, []

    def odd_once(a):
        calls.append(a)
        return real(a) + (1 if len(calls) == 1 else 0)
    monkeypatch.setattr(module, "array_address", odd_once)
    out = module.aligned_empty((5, 4096), np.float32)
    assert len(calls) == 2 and out.shape == (5, 4096) and out.dtype == np.float32
    assert real(out) % module.ALIGN == 0 and out.base.dtype == np.uint8


def test_every_device_and_layout_predicate_pytorch_has_answers_as_for_a_dense_cpu_tensor():
    torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    theirs = torch.ones(2)
    names = [n for n in dir(theirs) if n.startswith("is_") and n != "is_leaf"
             and not callable(getattr(theirs, n))]
    assert len(names) >= 15 and "is_xpu" in names and "is_mps" in names
    ours = eager.ones(2)
    assert {n: getattr(ours, n) for n in names} == {n: getattr(theirs, n) for n in names}
    on_meta = eager.empty(2, device="meta")
    assert on_meta.is_meta and not on_meta.is_cpu and not on_meta.is_xpu


def test_to_sparse_is_not_supported_yet_naming_it():
    with pytest.raises(NotImplementedError, match="torch.Tensor.to_sparse is not supported by "
                                                  "kiln yet"):
        eager.ones(2, 2).to_sparse()
    assert not hasattr(eager.ones(2), "to_sparse")
