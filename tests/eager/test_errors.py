"""Errors name the problem in PyTorch's words: each case raises the given exception with
the given text on CPU tensors, the same on meta tensors (the rule is shared), and, where
PyTorch is installed, PyTorch raises the same exception type with the same text."""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

import numpy as np
import pytest

import eager
from torch_parity import require_torch


@dataclasses.dataclass(frozen=True)
class ErrorCase:
    name: str
    call: Callable  # call(lib, make): make(*shape, dtype=...) gives ones, make.tensor(data)
    error: type
    text: str  # kiln's message contains this
    torch_says_it: bool = True  # PyTorch's message contains it too (else: same type only)
    meta: bool = True  # raised before any data is touched, so meta tensors raise it too

    def __repr__(self) -> str:
        return self.name


def E(name, call, error, text, **kw) -> ErrorCase:
    return ErrorCase(name, call, error, text, **kw)


def F(lib):
    return lib.nn.functional


R, I, T, V = RuntimeError, IndexError, TypeError, ValueError
CASES = [
    # matrix products
    E("mm_shapes", lambda lib, o: lib.mm(o(2, 3), o(4, 2)), R,
      "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)"),
    E("matmul_3d_2d", lambda lib, o: lib.matmul(o(2, 2, 3), o(4, 5)), R,
      "mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)"),
    E("matmul_1d_2d", lambda lib, o: o(3) @ o(4, 5), R,
      "mat1 and mat2 shapes cannot be multiplied (1x3 and 4x5)"),
    E("linear_shapes", lambda lib, o: F(lib).linear(o(2, 3), o(4, 2)), R,
      "mat1 and mat2 shapes cannot be multiplied (2x3 and 2x4)"),
    E("mm_dtypes", lambda lib, o: lib.mm(o(2, 2), o(2, 2, dtype="float64")), R,
      "expected m1 and m2 to have the same dtype, but got: float != double"),
    E("mm_narrow_dtypes", lambda lib, o: lib.mm(o(2, 2, dtype="bfloat16"), o(2, 2)), R,
      "expected m1 and m2 to have the same dtype, but got: c10::BFloat16 != float"),
    E("mm_narrow_int_dtypes", lambda lib, o: lib.mm(o(2, 2, dtype="uint8"),
                                                    o(2, 2, dtype="int16")), R,
      "expected m1 and m2 to have the same dtype, but got: unsigned char != short int"),
    E("matmul_dtypes", lambda lib, o: o(2, 2) @ o(2, 2, dtype="float64"), R,
      "expected m1 and m2 to have the same dtype, but got: float != double"),
    E("dot_dtypes", lambda lib, o: lib.dot(o(2), o(2, dtype="float64")), R,
      "dot : expected both vectors to have same dtype, but found Float and Double"),
    E("addmm_dtypes", lambda lib, o: lib.addmm(o(2, 2, dtype="float64"), o(2, 2), o(2, 2)), R,
      "self and mat2 must have the same dtype, but got Double and Float"),
    E("addmm_bias", lambda lib, o: lib.addmm(o(3), o(2, 3), o(3, 4)), R,
      "The expanded size of the tensor (4) must match the existing size (3) at non-singleton "
      "dimension 1.  Target sizes: [2, 4].  Tensor sizes: [3]"),
    E("matmul_0d", lambda lib, o: lib.matmul(o(), o(3)), R,
      "both arguments to matmul need to be at least 1D, but they are 0D and 1D"),
    E("dot_sizes", lambda lib, o: o(3) @ o(4), R,
      "inconsistent tensor size, expected tensor [3] and src [4] to have the same number of "
      "elements, but got 3 and 4 elements respectively"),
    E("dot_2d", lambda lib, o: lib.dot(o(3, 1), o(3)), R,
      "1D tensors expected, but got 2D and 1D tensors"),
    E("mv_sizes", lambda lib, o: lib.mv(o(2, 3), o(4)), R,
      "size mismatch, got input (2), mat (2x3), vec (4)"),
    E("bmm_sizes", lambda lib, o: lib.bmm(o(2, 3, 4), o(2, 5, 6)), R,
      "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [2, 5]."),
    E("matmul_batch_sizes", lambda lib, o: o(2, 3, 4) @ o(2, 5, 6), R,
      "Expected size for first two dimensions of batch2 tensor to be: [2, 4] but got: [2, 5]."),
    E("bmm_2d", lambda lib, o: lib.bmm(o(3, 4), o(4, 6)), R, "batch1 must be a 3D tensor"),
    E("mm_3d", lambda lib, o: lib.mm(o(2, 3, 4), o(4, 6)), R, "self must be a matrix"),
    # broadcasting
    E("broadcast", lambda lib, o: o(2, 3) + o(4), R,
      "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1"),
    E("broadcast_3d", lambda lib, o: o(2, 3) * o(5, 1, 4), R,
      "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 2"),
    E("matmul_batch_broadcast", lambda lib, o: o(2, 3, 4) @ o(3, 4, 6), R,
      "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0"),
    E("inplace_broadcast", lambda lib, o: o(3).add_(o(2, 3)), R,
      "output with shape [3] doesn't match the broadcast shape [2, 3]"),
    E("copy_broadcast", lambda lib, o: o(3).copy_(o(2, 3)), R,
      "output with shape [3] doesn't match the broadcast shape [2, 3]"),
    E("inplace_into_expanded", lambda lib, o: o(1, 3).expand(2, 3).add_(1), R,
      "unsupported operation: more than one element of the written-to tensor refers to a "
      "single memory location. Please clone() the tensor before performing the operation."),
    E("copy_into_expanded", lambda lib, o: o(3, 1).expand(3, 2).copy_(o(3, 2)), R,
      "more than one element of the written-to tensor refers to a single memory location"),
    # dims
    E("sum_dim", lambda lib, o: o(2, 3).sum(2), I,
      "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
    E("softmax_dim", lambda lib, o: lib.softmax(o(2, 3), 3), I,
      "Dimension out of range (expected to be in range of [-2, 1], but got 3)"),
    E("unsqueeze_dim", lambda lib, o: o(2, 3).unsqueeze(4), I,
      "Dimension out of range (expected to be in range of [-3, 2], but got 4)"),
    E("transpose_dim", lambda lib, o: o(2, 3).transpose(0, -3), I,
      "Dimension out of range (expected to be in range of [-2, 1], but got -3)"),
    E("zero_dim_dim", lambda lib, o: o().sum(1), I,
      "Dimension out of range (expected to be in range of [-1, 0], but got 1)"),
    E("repeated_dim", lambda lib, o: o(2, 3).sum([1, -1]), R,
      "dim 1 appears multiple times in the list of dims"),
    E("permute_dims", lambda lib, o: o(2, 3).permute(0), R,
      "number of dimensions in the tensor input does not match the length of the desired "
      "ordering of dimensions i.e. input.dim() = 2 is not equal to len(dims) = 1"),
    E("flatten_dims", lambda lib, o: o(2, 3, 4).flatten(2, 1), R,
      "flatten() has invalid args: start_dim cannot come after end_dim"),
    # views and shapes
    E("view_strides", lambda lib, o: o(2, 3).t().view(6), R,
      "view size is not compatible with input tensor's size and stride (at least one dimension "
      "spans across two contiguous subspaces). Use .reshape(...) instead."),
    E("view_size", lambda lib, o: o(2, 3).view(4, -1), R,
      "shape '[4, -1]' is invalid for input of size 6"),
    E("view_two_inferred", lambda lib, o: o(2, 3).view(-1, -1), R,
      "only one dimension can be inferred"),
    E("reshape_ambiguous", lambda lib, o: o(0, 3).reshape(-1, 0), R,
      "cannot reshape tensor of 0 elements into shape [-1, 0] because the unspecified "
      "dimension size -1 can be any value and is ambiguous"),
    E("expand_size", lambda lib, o: o(2, 3).expand(4, 3), R,
      "The expanded size of the tensor (4) must match the existing size (2) at non-singleton "
      "dimension 0.  Target sizes: [4, 3].  Tensor sizes: [2, 3]"),
    E("expand_rank", lambda lib, o: o(2, 3).expand(3), R,
      "the number of sizes provided (1) must be greater or equal to the number of dimensions "
      "in the tensor (2)"),
    E("cat_sizes", lambda lib, o: lib.cat([o(2, 3), o(2, 4)]), R,
      "Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for "
      "tensor number 1 in the list."),
    E("cat_ranks", lambda lib, o: lib.cat([o(2, 3), o(3)]), R,
      "Tensors must have same number of dimensions: got 2 and 1"),
    E("cat_0d", lambda lib, o: lib.cat([o(), o()]), R,
      "zero-dimensional tensor (at position 0) cannot be concatenated"),
    E("stack_sizes", lambda lib, o: lib.stack([o(2), o(3)]), R,
      "stack expects each tensor to be equal size, but got [2] at entry 0 and [3] at entry 1"),
    E("split_sizes", lambda lib, o: o(5).split([2, 2]), R,
      "split_with_sizes expects split_sizes to sum exactly to 5 (input tensor's size at "
      "dimension 0), but got split_sizes=[2, 2]"),
    E("split_zero", lambda lib, o: o(3).split(0), R,
      "split_size can only be 0 if dimension size is 0, but got dimension size of 3"),
    E("chunk_zero", lambda lib, o: o(3).chunk(0), R,
      "chunk expects `chunks` to be greater than 0, got: 0"),
    # indexing
    E("index_int", lambda lib, o: o(3)[5], I,
      "index 5 is out of bounds for dimension 0 with size 3"),
    E("index_negative", lambda lib, o: o(3, 2)[:, -3], I,
      "index -3 is out of bounds for dimension 1 with size 2"),
    E("index_tensor", lambda lib, o: o(3)[o.tensor([5])], I,
      "index 5 is out of bounds for dimension 0 with size 3", meta=False),
    E("index_mask_shape", lambda lib, o: o(3, 2)[o.tensor([True, False])], I,
      "The shape of the mask [2] at index 0 does not match the shape of the indexed tensor "
      "[3, 2] at index 0", meta=False),
    E("index_too_many", lambda lib, o: o(3)[0, 0], I, "too many indices for tensor of dimension 1"),
    E("index_float_tensor", lambda lib, o: o(3)[o.tensor([0.0])], I,
      "tensors used as indices must be long, int", meta=False),
    E("setitem_out_of_bounds", lambda lib, o: o(3).__setitem__(5, 1.0), I,
      "index 5 is out of bounds for dimension 0 with size 3", meta=False),
    E("setitem_shapes", lambda lib, o: o(2).__setitem__(o.tensor([0, 1]), o(3)), R,
      "shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of "
      "shape [2]", meta=False),
    E("index_select_bounds", lambda lib, o: o(3, 2).index_select(0, o.tensor([5])), I,
      "index 5 is out of bounds", torch_says_it=False, meta=False),
    E("index_select_negative", lambda lib, o: o(3, 2).index_select(0, o.tensor([-1])), I,
      "index -1 is out of bounds", torch_says_it=False, meta=False),
    E("index_select_dtype", lambda lib, o: o(3).index_select(0, o.tensor([0.0])), R,
      "index_select(): Expected dtype int32 or int64 for index"),
    E("embedding_bounds", lambda lib, o: lib.embedding(o(3, 2), o.tensor([3])), I,
      "index 3 is out of bounds", torch_says_it=False, meta=False),
    E("embedding_dtype", lambda lib, o: lib.embedding(o(3, 2), o.tensor([0.0])), R,
      "Expected tensor for argument #1 'indices' to have one of the following scalar types: "
      "Long, Int; but got"),
    E("index_add_count", lambda lib, o: o(5, 3).index_add(0, o.tensor([0, 1]), o(3, 3)), R,
      "index_add_(): Number of indices (2) should be equal to source.size(dim): (3), for dim: 0"),
    E("index_add_dtypes",
      lambda lib, o: o(5, 3).index_add(0, o.tensor([0]), o(1, 3, dtype="float64")), R,
      "index_add_(): self (Float) and source (Double) must have the same scalar type"),
    # dtypes
    E("neg_bool", lambda lib, o: -o(2, dtype="bool"), R,
      "Negation, the `-` operator, on a bool tensor is not supported."),
    E("sub_bools", lambda lib, o: o(2, dtype="bool") - o(2, dtype="bool"), R,
      "Subtraction, the `-` operator, with two bool tensors is not supported."),
    E("sub_bool", lambda lib, o: o(2) - o(2, dtype="bool"), R,
      "Subtraction, the `-` operator, with a bool tensor is not supported."),
    E("pow_negative_int", lambda lib, o: o(2, dtype="int64") ** -1, R,
      "Integers to negative integer powers are not allowed."),
    E("pow_bools", lambda lib, o: lib.pow(o(2, dtype="bool"), o(2, dtype="bool")),
      NotImplementedError,
      "\"pow\" not implemented for 'Bool'"),
    E("mean_int", lambda lib, o: o(2, dtype="int64").mean(), R,
      "mean(): could not infer output dtype. Input dtype must be either a floating point or "
      "complex dtype. Got: Long"),
    E("var_int", lambda lib, o: o(2, dtype="int64").var(), R,
      "std and var only support floating point and complex dtypes"),
    E("softmax_int", lambda lib, o: lib.softmax(o(2, dtype="int64"), 0), NotImplementedError,
      "\"softmax_lastdim_kernel_impl\" not implemented for 'Long'"),
    E("gelu_int", lambda lib, o: F(lib).gelu(o(2, dtype="int64")), NotImplementedError,
      "\"GeluKernelImpl\" not implemented for 'Long'"),
    E("silu_int", lambda lib, o: F(lib).silu(o(2, dtype="int32")), NotImplementedError,
      "\"silu_cpu\" not implemented for 'Int'"),
    E("gelu_approximate", lambda lib, o: F(lib).gelu(o(2), approximate="erf"), R,
      "approximate argument must be either none or tanh"),
    E("argmax_bool", lambda lib, o: o(2, dtype="bool").argmax(), R,
      "argmax(): does not support bool input"),
    E("inplace_cast", lambda lib, o: o(2, dtype="int64").add_(2.5), R,
      "result type Float can't be cast to the desired output type Long"),
    E("inplace_int_div", lambda lib, o: o(2, dtype="int32").div_(2), R,
      "result type Float can't be cast to the desired output type Int"),
    E("where_condition", lambda lib, o: lib.where(o(2), o(2), o(2)), R,
      "where expected condition to be a boolean tensor, but got a tensor with dtype Float"),
    E("alpha_float", lambda lib, o: lib.add(o(2, dtype="int64"), o(2, dtype="int64"), alpha=0.5),
      R, "For integral input tensors, argument alpha must not be a floating point number."),
    E("requires_grad_int", lambda lib, o: o(2, dtype="int64").requires_grad_(), R,
      "only Tensors of floating point dtype can require gradients"),
    # reductions and scalars
    E("amax_empty", lambda lib, o: o(0, 3).amax(0), I,
      "amax(): Expected reduction dim 0 to have non-zero size."),
    E("max_empty", lambda lib, o: o(0, 3).max(0), I,
      "max(): Expected reduction dim 0 to have non-zero size."),
    E("argmax_empty", lambda lib, o: o(0, 3).argmax(), I,
      "argmax(): Expected reduction dim to be specified for input.numel() == 0."),
    E("clamp_no_bounds", lambda lib, o: lib.clamp(o(2)), R,
      "At least one of 'min' or 'max' must not be None"),
    E("item_many", lambda lib, o: o(2, 3).item(), R,
      "a Tensor with 6 elements cannot be converted to Scalar"),
    E("bool_many", lambda lib, o: bool(o(2)), R,
      "Boolean value of Tensor with more than one value is ambiguous", meta=False),
    # factories
    E("ragged", lambda lib, o: lib.tensor([[1, 2], [3]]), V,
      "expected sequence of length 2 at dim 1 (got 1)", meta=False),
    E("ragged_deeper", lambda lib, o: lib.tensor([[[1], [2, 3]]]), V,
      "expected sequence of length 1 at dim 2 (got 2)", meta=False),
    E("arange_step", lambda lib, o: lib.arange(0, 5, 0), R, "step must be nonzero", meta=False),
    E("arange_sign", lambda lib, o: lib.arange(3, 1), R,
      "upper bound and lower bound inconsistent with step sign", meta=False),
    E("linspace_steps", lambda lib, o: lib.linspace(0, 1, -1), R,
      "number of steps must be non-negative", meta=False),
    E("from_numpy_negative_strides", lambda lib, o: lib.from_numpy(np.arange(4)[::-1]), V,
      "At least one stride in the given numpy array is negative", meta=False),
    E("numpy_requires_grad", lambda lib, o: o(2).requires_grad_().numpy(), R,
      "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.",
      meta=False),
]


class Make:
    """Tensors of `lib` (eager or torch) on `device`: ones of a shape, or given data."""

    def __init__(self, lib, device=None):
        self.lib, self.device = lib, device

    def __call__(self, *shape, dtype="float32"):
        return self.lib.ones(shape, dtype=getattr(self.lib, dtype), device=self.device)

    def tensor(self, data):
        return self.lib.tensor(data, device=self.device)


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_error_names_the_problem(case):
    with pytest.raises(case.error, match=re.escape(case.text)):
        case.call(eager, Make(eager))


@pytest.mark.parametrize("case", [c for c in CASES if c.meta], ids=repr)
def test_meta_tensors_raise_the_same_error(case):
    with pytest.raises(case.error, match=re.escape(case.text)):
        case.call(eager, Make(eager, "meta"))


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_torch_raises_the_same_error(case):
    torch = require_torch()
    with pytest.raises(Exception) as caught:
        case.call(torch, Make(torch))
    assert type(caught.value) is case.error
    if case.torch_says_it:
        assert case.text in str(caught.value)
