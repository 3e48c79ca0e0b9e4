"""PyTorch's dtypes that kiln names but has no kernels for yet (the wider unsigned ints,
complex, float8) exist as values, so a library naming them at import or as a default
loads; making or converting to a tensor of one raises NotSupportedYet naming the dtype
and the op. And finfo / iinfo give PyTorch's fields for every dtype."""
import re

import numpy as np
import pytest

import eager
from eager._missing import NotSupportedYet

torch = pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")

NAMED_ONLY = ["uint16", "uint32", "uint64", "complex32", "complex64", "complex128",
              "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
              "float8_e8m0fnu", "float4_e2m1fn_x2"]


@pytest.mark.parametrize("name", NAMED_ONLY + ["float16", "bfloat16", "float32", "float64",
                                               "int8", "int16", "int32", "int64", "bool",
                                               "uint8"])
def test_each_dtype_is_a_value_with_pytorchs_facts(name):
    ours, theirs = getattr(eager, name), getattr(torch, name)
    assert isinstance(ours, eager.dtype)
    assert (ours.is_floating_point, ours.is_complex, ours.is_signed, ours.itemsize) == (
        theirs.is_floating_point, theirs.is_complex, theirs.is_signed, theirs.itemsize)
    assert eager.short is eager.int16
    assert (eager.cfloat, eager.cdouble, eager.chalf) == (
        eager.complex64, eager.complex128, eager.complex32)


def test_is_complex_is_false_for_every_tensor_kiln_can_make():
    assert not eager.is_complex(eager.ones(2)) and not eager.ones(2).is_complex()


def test_a_library_may_name_them_as_defaults_and_in_tables():
    def to_image(x, dtype=eager.uint8):  # as torchvision's transforms do
        return dtype
    table = {eager.bfloat16: "bf16", eager.float16: "f16"}  # as safetensors does
    assert to_image(None) is eager.uint8 and table[eager.bfloat16] == "bf16"
    import pickle
    assert pickle.loads(pickle.dumps(eager.bfloat16)) is eager.bfloat16


@pytest.mark.parametrize("name", NAMED_ONLY)
@pytest.mark.parametrize("op, make", [
    ("zeros", lambda dt: eager.zeros(2, dtype=dt)),
    ("tensor", lambda dt: eager.tensor([1, 2], dtype=dt)),
    ("arange", lambda dt: eager.arange(3, dtype=dt)),
    ("to", lambda dt: eager.ones(2).to(dt)),
    ("to", lambda dt: eager.ones(2).type(dt)),
    ("sum", lambda dt: eager.ones(2).sum(dtype=dt)),
    ("softmax", lambda dt: eager.softmax(eager.ones(2), 0, dt)),
    ("set_default_dtype", lambda dt: eager.set_default_dtype(dt)),
])
def test_making_a_tensor_of_one_raises_not_supported_yet_naming_the_dtype_and_the_op(
        name, op, make):
    with pytest.raises(NotSupportedYet, match=rf"^{op}\(\): dtype torch\.{name} is not "
                                              rf"supported by kiln yet"):
        make(getattr(eager, name))
    assert eager.get_default_dtype() is eager.float32


@pytest.mark.parametrize("name", ["uint16", "uint32", "complex64"])
def test_a_numpy_array_of_one_is_refused_naming_the_dtype(name):
    a = np.zeros(3, dtype=name)
    for op, make in (("from_numpy", eager.from_numpy), ("tensor", eager.tensor)):
        with pytest.raises(NotSupportedYet, match=rf"{op}\(\): dtype torch\.{name}"):
            make(a)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn",
                                  "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                                  "float8_e8m0fnu"])
def test_finfo_has_pytorchs_fields_for_every_floating_dtype(name):
    ours, theirs = eager.finfo(getattr(eager, name)), torch.finfo(getattr(torch, name))
    for field in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution",
                  "dtype"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name", ["uint8", "int8", "int16", "int32", "int64"])
def test_iinfo_has_pytorchs_fields_for_every_integer_dtype(name):
    ours, theirs = eager.iinfo(getattr(eager, name)), torch.iinfo(getattr(torch, name))
    for field in ("bits", "min", "max", "dtype"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert repr(ours) == repr(theirs)


def test_finfo_of_nothing_is_the_default_dtypes_and_the_wrong_kind_is_pytorchs_type_error():
    assert eager.finfo() == eager.finfo(eager.float32)
    for ours, theirs in ((lambda: eager.finfo(eager.int32), lambda: torch.finfo(torch.int32)),
                         (lambda: eager.iinfo(eager.float32), lambda: torch.iinfo(torch.float32)),
                         (lambda: eager.iinfo(eager.bool), lambda: torch.iinfo(torch.bool))):
        with pytest.raises(TypeError) as expected:
            theirs()
        with pytest.raises(TypeError, match=re.escape(str(expected.value))):
            ours()


def test_uint8_tensors_compute_wrap_and_promote_as_pytorchs():
    """uint8 has kernels: bytes, images, safetensors' raw views. Arithmetic wraps modulo
    256, it sits between bool and int32 in promotion, integral sums are int64."""
    values = [1, 2, 250]
    ours, theirs = eager.tensor(values, dtype=eager.uint8), torch.tensor(values, dtype=torch.uint8)
    cases = [lambda t, m: t + 10, lambda t, m: -t, lambda t, m: t * 2.5, lambda t, m: t / 2,
             lambda t, m: t.sum(), lambda t, m: t.max(), lambda t, m: t == 2,
             lambda t, m: t + m.ones(3, dtype=m.int32), lambda t, m: t + m.ones(3, dtype=m.bool),
             lambda t, m: t.float(), lambda t, m: m.zeros(2, dtype=m.uint8)]
    for case in cases:
        a, b = case(ours, eager), case(theirs, torch)
        assert a.dtype.name == str(b.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert eager.from_numpy(np.arange(3, dtype=np.uint8)).dtype is eager.uint8
