"""Arguments that are not tensors (sizes, dims, counts, dtypes, devices, numbers) given
to factories and shape ops are checked as PyTorch checks them: each case raises the given
exception type with a message naming the bad value, and, where PyTorch is installed,
PyTorch raises the same type for the same call. (test_errors.py holds the errors that
tensors' shapes and dtypes cause.)"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import pytest

import eager
from torch_parity import dtype_name, require_torch


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    call: Callable  # call(lib, ones): ones(*shape) makes a float32 tensor of lib
    error: type
    names: str  # kiln's message contains this: the value (or what it breaks)

    def __repr__(self) -> str:
        return self.name


R, T, I, V = RuntimeError, TypeError, IndexError, ValueError
CASES = [
    # sizes: ints (numpy's too), as varargs or one tuple or list
    Case("empty_float", lambda lib, o: lib.empty(1.5), T, "float 1.5"),
    Case("zeros_float", lambda lib, o: lib.zeros(2.7), T, "float 2.7"),
    Case("ones_float_vararg", lambda lib, o: lib.ones(2, 3.0), T, "element 1 is float 3.0"),
    Case("zeros_float_in_tuple", lambda lib, o: lib.zeros((2, 2.5)), T, "element 1 is float 2.5"),
    Case("rand_float", lambda lib, o: lib.rand(1.5), T, "float 1.5"),
    Case("randn_float", lambda lib, o: lib.randn(2, 2.5), T, "float 2.5"),
    Case("empty_meta_float", lambda lib, o: lib.empty(1.5, device="meta"), T, "float 1.5"),
    Case("zeros_bool", lambda lib, o: lib.zeros(True), T, "bool True"),
    Case("zeros_bool_in_list", lambda lib, o: lib.zeros([True, 2]), T, "bool True"),
    Case("zeros_none", lambda lib, o: lib.zeros(None), T, "element 0 is None"),
    Case("zeros_string", lambda lib, o: lib.zeros("3"), T, "str '3'"),
    Case("zeros_tuple_then_int", lambda lib, o: lib.zeros((2,), 3), T, "tuple (2,)"),
    Case("zeros_nested_tuple", lambda lib, o: lib.zeros(((2, 3),)), T, "tuple (2, 3)"),
    Case("zeros_float_tensor", lambda lib, o: lib.zeros(lib.tensor(3.0)), T, "Tensor"),
    Case("zeros_negative", lambda lib, o: lib.zeros(2, -3), R, "negative dimension -3"),
    Case("new_zeros_float", lambda lib, o: o(2).new_zeros(2.5), T, "float 2.5"),
    Case("full_size_float", lambda lib, o: lib.full((2.5,), 1.0), T, "float 2.5"),
    # dtypes: eager's (or Python's float, int, bool), never strings or numpy's
    Case("zeros_dtype_string", lambda lib, o: lib.zeros(3, dtype="float32"), T,
         "str 'float32'"),
    Case("zeros_dtype_numpy", lambda lib, o: lib.zeros(3, dtype=np.float32), T, "numpy.float32"),
    Case("zeros_dtype_int", lambda lib, o: lib.zeros(3, dtype=3), T, "int 3"),
    Case("tensor_dtype_string", lambda lib, o: lib.tensor([1], dtype="int64"), T, "str 'int64'"),
    Case("full_dtype_string", lambda lib, o: lib.full((2,), 1.0, dtype="float32"), T,
         "str 'float32'"),
    Case("arange_dtype_numpy", lambda lib, o: lib.arange(3, dtype=np.int64), T, "numpy.int64"),
    Case("randperm_dtype_string", lambda lib, o: lib.randperm(3, dtype="int64"), T,
         "str 'int64'"),
    Case("zeros_like_dtype_string", lambda lib, o: lib.zeros_like(o(2), dtype="float32"), T,
         "str 'float32'"),
    Case("to_dtype_string", lambda lib, o: o(2).to(dtype="float64"), T, "str 'float64'"),
    Case("rand_int_dtype", lambda lib, o: lib.rand(2, dtype=lib.int64), NotImplementedError,
         "int64"),
    Case("randn_int_dtype", lambda lib, o: lib.randn(2, dtype=lib.int32), NotImplementedError,
         "int32"),
    # devices and flags
    Case("zeros_device", lambda lib, o: lib.zeros(3, device="cpux"), R, "cpux"),
    Case("tensor_device", lambda lib, o: lib.tensor([1.0], device="cpux"), R, "cpux"),
    Case("to_device", lambda lib, o: o(2).to("cpux"), R, "cpux"),
    Case("zeros_requires_grad_string", lambda lib, o: lib.zeros(3, requires_grad="yes"), T,
         "str 'yes'"),
    # counts and ranges
    Case("randperm_negative", lambda lib, o: lib.randperm(-2), R, "negative dimension -2"),
    Case("randperm_float", lambda lib, o: lib.randperm(2.5), T, "float 2.5"),
    Case("randperm_bool", lambda lib, o: lib.randperm(True), T, "bool True"),
    Case("randint_equal_bounds", lambda lib, o: lib.randint(5, 5, (2,)), R, "low=5 >= high=5"),
    Case("randint_high_below_low", lambda lib, o: lib.randint(5, 2, (2,)), R,
         "low=5 >= high=2"),
    Case("randint_high_zero", lambda lib, o: lib.randint(0, (2,)), R, "low=0 >= high=0"),
    Case("randint_float_low", lambda lib, o: lib.randint(0.5, 3, (2,)), T, "float 0.5"),
    Case("randint_size_int", lambda lib, o: lib.randint(0, 3, 2), T, "int 2"),
    Case("randint_size_float", lambda lib, o: lib.randint(0, 3, (2.5,)), T, "float 2.5"),
    Case("randint_no_size", lambda lib, o: lib.randint(5), T, "'size'"),
    Case("full_fill_string", lambda lib, o: lib.full((2,), "a"), T, "str 'a'"),
    Case("full_fill_none", lambda lib, o: lib.full((2,), None), T, "not None"),
    Case("full_fill_list", lambda lib, o: lib.full((2,), [1]), T, "list [1]"),
    Case("arange_wrong_sign", lambda lib, o: lib.arange(0, 5, -1), R, "step=-1"),
    Case("arange_infinite", lambda lib, o: lib.arange(float("inf")), R, "0 -> inf"),
    Case("arange_nan", lambda lib, o: lib.arange(0, float("nan")), R, "0 -> nan"),
    Case("arange_string", lambda lib, o: lib.arange("5"), T, "str '5'"),
    Case("arange_step_none", lambda lib, o: lib.arange(0, 5, None), T, "not None"),
    Case("linspace_negative_steps", lambda lib, o: lib.linspace(0, 1, -1), R, "got -1"),
    Case("linspace_float_steps", lambda lib, o: lib.linspace(0, 1, 2.5), T, "float 2.5"),
    Case("linspace_bool_steps", lambda lib, o: lib.linspace(0, 1, True), T, "bool True"),
    Case("linspace_string_start", lambda lib, o: lib.linspace("a", 1, 3), T, "str 'a'"),
    # shape ops: sizes and dims
    Case("permute_too_many_dims", lambda lib, o: o(2, 3).permute(0, 1, 2), R,
         "input.dim() = 2 is not equal to len(dims) = 3"),
    Case("permute_function_too_many_dims", lambda lib, o: lib.permute(o(2, 3), (0, 1, 2)), R,
         "input.dim() = 2 is not equal to len(dims) = 3"),
    Case("permute_float", lambda lib, o: o(2, 3).permute(0, 1.0), T, "float 1.0"),
    Case("permute_none", lambda lib, o: o(2, 3).permute(None), T, "element 0 is None"),
    Case("view_float", lambda lib, o: o(2, 3).view(2.0, 3), T, "float 2.0"),
    Case("view_float_second", lambda lib, o: o(2, 3).view(2, 3.5), T, "float 3.5"),
    Case("view_bool", lambda lib, o: o(2, 3).view(True, 6), T, "bool True"),
    Case("view_string", lambda lib, o: o(2, 3).view("6"), T, "str '6'"),
    Case("reshape_float", lambda lib, o: o(2, 3).reshape((2.0, 3)), T, "float 2.0"),
    Case("reshape_function_int", lambda lib, o: lib.reshape(o(2, 3), 6), T, "int 6"),
    Case("reshape_numel", lambda lib, o: o(2, 3).reshape(4, 2), R,
         "shape '[4, 2]' is invalid for input of size 6"),
    Case("expand_smaller", lambda lib, o: o(2, 3).expand(1, 3), R,
         "The expanded size of the tensor (1) must match the existing size (2)"),
    Case("expand_float", lambda lib, o: o(2, 3).expand(2, 3.0), T, "float 3.0"),
    Case("expand_negative", lambda lib, o: o(1, 3).expand(-2, 3), R, "(-2)"),
    Case("squeeze_float", lambda lib, o: o(2, 1).squeeze(1.0), T, "float 1.0"),
    Case("squeeze_string", lambda lib, o: o(2, 1).squeeze("a"), T, "str 'a'"),
    Case("unsqueeze_none", lambda lib, o: o(2, 3).unsqueeze(None), T, "not None"),
    Case("transpose_float", lambda lib, o: lib.transpose(o(2, 3), 0, 1.0), T, "float 1.0"),
    Case("transpose_bool", lambda lib, o: o(2, 3).transpose(True, 0), T, "bool True"),
    Case("flatten_float", lambda lib, o: o(2, 3).flatten(0.0), T, "float 0.0"),
    Case("size_float", lambda lib, o: o(2, 3).size(1.0), T, "float 1.0"),
    Case("select_float_index", lambda lib, o: o(2, 3).select(0, 1.0), T, "float 1.0"),
    Case("select_bool_dim", lambda lib, o: o(2, 3).select(True, 0), T, "bool True"),
    Case("split_negative", lambda lib, o: o(5).split(-1), R, "split_size=-1"),
    Case("split_float", lambda lib, o: o(5).split(2.5), T, "float 2.5"),
    Case("split_sizes_negative", lambda lib, o: o(5).split([6, -1]), R,
         "split_sizes=[6, -1]"),
    Case("split_sizes_bool", lambda lib, o: o(2).split([True, 1]), T, "bool True"),
    Case("chunk_float", lambda lib, o: o(5).chunk(2.5), T, "float 2.5"),
    Case("chunk_dim", lambda lib, o: o(5).chunk(2, dim=3), I, "but got 3"),
    # lists of tensors
    Case("cat_empty", lambda lib, o: lib.cat([]), V, "expected a non-empty list of Tensors"),
    Case("cat_none", lambda lib, o: lib.cat([o(2), None]), T, "element 1"),
    Case("cat_a_tensor", lambda lib, o: lib.cat(o(2, 2)), T, "Tensor of shape [2, 2]"),
    Case("cat_float_dim", lambda lib, o: lib.cat([o(2), o(2)], dim=1.0), T, "float 1.0"),
    Case("stack_empty", lambda lib, o: lib.stack([]), R, "stack expects a non-empty TensorList"),
    Case("stack_none", lambda lib, o: lib.stack([o(2), None]), T, "element 1"),
    Case("stack_a_tensor", lambda lib, o: lib.stack(o(2, 2)), T, "Tensor of shape [2, 2]"),
    Case("stack_float_dim", lambda lib, o: lib.stack([o(2)], dim=1.5), T, "float 1.5"),
]


def _ones(lib):
    return lambda *shape: lib.ones(shape)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_bad_argument_raises_an_error_naming_it(case):
    with pytest.raises(case.error) as caught:
        case.call(eager, _ones(eager))
    assert case.names in str(caught.value)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_torch_raises_the_same_error_type(case):
    torch = require_torch()
    with pytest.raises(Exception) as caught:
        case.call(torch, _ones(torch))
    assert type(caught.value) is case.error, str(caught.value)


BOOL_SIZES = {  # PyTorch's parser takes a bool as the second or a later size
    "zeros": lambda lib, o: lib.zeros(2, True),
    "view": lambda lib, o: o(2, 3).view(2, True, 3),
    "reshape": lambda lib, o: o(2, 3).reshape((2, True, 3)),
    "expand": lambda lib, o: o(1, 3).expand(2, True, 3),
}


@pytest.mark.parametrize("call", BOOL_SIZES.values(), ids=BOOL_SIZES.keys())
def test_a_bool_is_never_a_size_though_pytorch_takes_some(call):
    with pytest.raises(TypeError, match="element 1 is bool True"):
        call(eager, _ones(eager))
    torch = require_torch()
    assert call(torch, _ones(torch)).shape[1] == 1


ACCEPTED = {  # call(lib, ones) -> a tensor: the forms PyTorch takes, kiln takes too
    "numpy_int_size": lambda lib, o: lib.zeros(np.int64(3)),
    "numpy_ints_in_tuple": lambda lib, o: lib.zeros((np.int32(2), 3)),
    "list_size": lambda lib, o: lib.ones([2, 3]),
    "size_object": lambda lib, o: lib.zeros(o(2, 3).shape),
    "int_tensor_size": lambda lib, o: lib.zeros(lib.tensor(3)),
    "full_size_list": lambda lib, o: lib.full([2], 1.0),
    "view_numpy_ints": lambda lib, o: o(2, 3).view(np.int64(3), np.int32(2)),
    "view_int_tensor": lambda lib, o: o(2, 3).view(lib.tensor(6)),
    "permute_numpy_int": lambda lib, o: o(2, 3).permute(np.int64(1), 0),
    "split_numpy_sizes": lambda lib, o: o(5).split([np.int64(2), 3])[1],
    "randperm_numpy_int": lambda lib, o: lib.randperm(np.int64(3)),
    "randint_high_and_size": lambda lib, o: lib.randint(3, (2,)),
    "randint_size_list": lambda lib, o: lib.randint(0, 3, [2]),
    "dtype_float": lambda lib, o: lib.zeros(2, dtype=float),
    "dtype_int": lambda lib, o: lib.ones(2, dtype=int),
    "dtype_bool": lambda lib, o: lib.full((2,), 1, dtype=bool),
    "to_python_type": lambda lib, o: o(2).to(int),
    "arange_dtype_float": lambda lib, o: lib.arange(3, dtype=float),
    "linspace_numpy_steps": lambda lib, o: lib.linspace(0, 1, np.int64(3)),
    "fill_numpy_float": lambda lib, o: lib.full((2,), np.float32(2.5)),
}


@pytest.mark.parametrize("call", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_forms_pytorch_takes_give_its_shape_and_dtype(call):
    ours = call(eager, _ones(eager))
    torch = require_torch()
    theirs = call(torch, _ones(torch))
    assert (tuple(ours.shape), dtype_name(ours.dtype)) == \
        (tuple(theirs.shape), dtype_name(theirs.dtype))
