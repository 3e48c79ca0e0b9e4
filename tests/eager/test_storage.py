"""UntypedStorage, asarray, frombuffer and view(dtype) against PyTorch: bytes shared with
the tensor, reinterpreted views of the same memory, and the errors PyTorch gives."""
import numpy as np
import pytest

import eager

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")


def _both(fn):
    return fn(eager), fn(torch)


def same(a, b):
    assert a.dtype.name == str(b.dtype).removeprefix("torch.") and tuple(a.shape) == \
        tuple(b.shape) and a.stride() == b.stride()
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_untyped_storage_is_the_tensors_memory_as_bytes():
    ours, theirs = _both(lambda m: m.arange(6, dtype=m.float32).reshape(2, 3)[1])
    a, b = ours.untyped_storage(), theirs.untyped_storage()
    assert a.nbytes() == b.nbytes() == len(a) == 24 and a.size() == 24
    assert [a[i] for i in range(24)] == [b[i] for i in range(24)]
    assert a.data_ptr() == ours.untyped_storage().data_ptr() == ours.data_ptr() - 12
    assert a[4:12].nbytes() == 8 and a.untyped() is a
    a[0] = 7  # writes reach the tensor: the same memory
    assert ours.untyped_storage()[0] == 7


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "bool", "float64"])
def test_asarray_of_a_storage_slice_views_its_bytes_as_the_dtype(dtype):
    def make(m):
        storage = m.arange(8, dtype=m.float64).untyped_storage()
        return m.asarray(storage[8:40], dtype=getattr(m, dtype))
    ours, theirs = _both(make)
    same(ours, theirs)


def test_view_dtype_reinterprets_and_scales_the_last_dim_as_pytorchs():
    for make in (lambda m: m.arange(6, dtype=m.float32).reshape(2, 3).view(m.uint8),
                 lambda m: m.arange(6, dtype=m.float32).reshape(2, 3).view(dtype=m.int32),
                 lambda m: m.arange(8, dtype=m.float32).reshape(2, 4).view(m.float64),
                 lambda m: m.arange(8, dtype=m.float32).view(m.uint8).view(m.float32)):
        same(*_both(make))
    x = eager.zeros(2, 3)
    x.view(eager.int32)[0, 0] = 1  # one memory: bits written as int32, read as float32
    assert x[0, 0].item() == np.frombuffer(np.int32(1).tobytes(), np.float32)[0]
    for bad in (lambda m: m.zeros(3, 2).t().view(m.uint8),  # last stride not 1
                lambda m: m.zeros(3).view(m.float64)):  # 12 bytes are not whole float64s
        with pytest.raises(RuntimeError):
            bad(torch)
        with pytest.raises(RuntimeError):
            bad(eager)


def test_frombuffer_and_asarray_share_or_copy_as_pytorchs():
    data = bytearray(np.arange(4, dtype=np.float32).tobytes())
    ours = eager.frombuffer(data, dtype=eager.float32, count=2, offset=4)
    same(ours, torch.frombuffer(bytearray(data), dtype=torch.float32, count=2, offset=4))
    data[4:8] = np.float32(9).tobytes()
    assert ours.tolist() == [9.0, 2.0]
    x = eager.ones(3)
    assert eager.asarray(x) is x and eager.asarray(x, copy=True) is not x
    a = np.zeros(3, np.float32)
    eager.asarray(a)[0] = 5
    assert a[0] == 5
    same(*_both(lambda m: m.asarray([[1, 2], [3, 4]], dtype=m.float64)))
    with pytest.raises(ValueError, match="copy=False"):
        eager.asarray(x, dtype=eager.float64, copy=False)


def test_from_file_reads_a_private_copy_or_maps_the_file(tmp_path):
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(16)))
    private = eager.UntypedStorage.from_file(str(path), shared=False, nbytes=16)
    assert private.tolist() == list(range(16))
    private[0] = 99
    assert path.read_bytes()[0] == 0
    mapped = eager.UntypedStorage.from_file(str(path), shared=True, nbytes=16)
    mapped[1] = 42
    del mapped
    assert path.read_bytes()[1] == 42
    with pytest.raises(RuntimeError, match="unexpected EOF"):
        eager.UntypedStorage.from_file(str(path), shared=False, nbytes=32)
