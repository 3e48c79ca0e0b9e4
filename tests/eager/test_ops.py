"""Every op against a numpy float64 reference, over awkward shapes (0-sized, size-1 and
prime dims, broadcasting, 0-d tensors) and memory layouts (transposed, strided, expanded)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import pytest

import eager
import op_table
import op_table_shape
from ir.ops import COMPILER_ONLY, Op
from op_cases import (NUMBERS, Maker, S, all_cases, assert_matches, call, reference,
                      samples_of, to_eager)

CASES = op_table.CASES + op_table_shape.CASES

# the references silence their own numpy warnings; one from a kernel is a bug
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def test_every_eager_op_in_the_vocabulary_has_a_case():
    covered = {op for case in CASES for op in case.ops}
    assert sorted(op.name for op in set(Op) - COMPILER_ONLY - covered) == []


def test_case_names_are_unique():
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case, dtype, layout", all_cases(CASES, with_layouts=True))
def test_op_matches_numpy(case, dtype, layout):
    for sample in samples_of(case, dtype, layout):
        inputs = []

        def to(a):
            t = to_eager(a, layout)
            inputs.append((a, t))
            return t
        what = f"{case.name}{sample!r} [{dtype}, {layout}]"
        assert_matches(case, call(case, eager, sample, to), reference(case, sample), what)
        for a, t in inputs:  # an op never writes its inputs (in-place cases work on a clone)
            np.testing.assert_array_equal(t.numpy(), a, err_msg=f"{what}: input changed")


BINARY = [case for case in op_table.ELEMENTWISE
          if case.name in ("add", "sub", "mul", "div", "maximum", "lt", "eq", "logical_and")]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_binary_ops_broadcast_random_shapes(data):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=4))
    case = data.draw(st.sampled_from(BINARY))
    dtype = data.draw(st.sampled_from([d for d in case.dtypes if d in NUMBERS]))
    make = Maker(dtype, seed=data.draw(st.integers(0, 2 ** 16)))
    sample = S(make(shapes.input_shapes[0]), make(shapes.input_shapes[1]))
    layouts = data.draw(st.tuples(*[st.sampled_from(["contiguous", "transposed", "strided"])] * 2))
    args = [to_eager(a, layout) for a, layout in zip(sample.args, layouts)]
    assert_matches(case, case.fn(eager, *args), reference(case, sample),
                   f"{case.name}{sample!r} {layouts}")
