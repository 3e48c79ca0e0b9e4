"""Meta kernels: on `device="meta"` tensors every op gives the shape and dtype the CPU
kernel gives, from the same shared rule, without touching any data."""
from __future__ import annotations

import pytest

import eager
import op_table
import op_table_shape
from op_cases import all_cases, call, flat_outputs, samples_of, to_eager, to_meta

CASES = [case for case in op_table.CASES + op_table_shape.CASES if case.meta]


def signature(outputs) -> list:
    return [(tuple(t.shape), t.dtype.name) for t in flat_outputs(outputs)]


@pytest.mark.parametrize("case, dtype", all_cases(CASES))
def test_meta_gives_the_cpu_shape_and_dtype(case, dtype):
    for sample in samples_of(case, dtype):
        meta = call(case, eager, sample, to_meta)
        assert signature(meta) == signature(call(case, eager, sample, to_eager)), \
            f"{case.name}{sample!r} [{dtype}]"
        assert {t.device.type for t in flat_outputs(meta)} <= {"meta"}


def test_meta_tensors_hold_no_data():
    x = eager.empty(2, 3, device="meta")
    y = (x @ x.t()).relu()
    assert y.shape == (2, 2) and y.device.type == "meta"
    with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
        y.numpy()
    assert x._storage.data is None and y._storage.data is None
