"""eager/shapes.py's merge_dims: the dims every kernel generator (the CPU's, CUDA's,
eager CUDA's) addresses, merged where every operand allows."""
from runtime.layout import merge_dims


def test_a_contiguous_tensor_is_one_dim_and_size_one_dims_are_dropped():
    assert merge_dims([(2, (12,)), (1, (99,)), (3, (4,)), (4, (1,))]) == [(24, (1,))]


def test_dims_merge_only_where_every_operand_steps_through_them_as_one():
    # operand 0 contiguous (3, 4); operand 1 its transpose's strides; operand 2 broadcast
    assert merge_dims([(3, (4, 1, 0)), (4, (1, 3, 0))]) == [(3, (4, 1, 0)), (4, (1, 3, 0))]
    assert merge_dims([(3, (4, 0)), (4, (1, 0))]) == [(12, (1, 0))]
    assert merge_dims([(2, (10,)), (4, (1,))]) == [(2, (10,)), (4, (1,))]  # a slice's rows


def test_no_dims_and_empty_dims():
    assert merge_dims([]) == []
    assert merge_dims([(1, (5,))]) == []
    assert merge_dims([(0, (3,)), (3, (1,))]) == [(0, (1,))]
