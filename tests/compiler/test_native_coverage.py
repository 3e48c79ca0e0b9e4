"""Every op of the vocabulary, compiled on the native backend: it runs as generated machine
code, or it is on NOT_NATIVE with the reason. Driven by the eager op table (its first
non-empty sample of each case, in float32 where the case takes it), so an op added to the
vocabulary is covered here too, and an op that becomes native must leave the list."""
import sys
from pathlib import Path

import numpy as np
import pytest

import compiler
import eager
from compiler.capture import FUNCTIONAL_TWIN as REBOUND
from ir.ops import COMPOSITE, DATA_DEPENDENT_SHAPE, INPLACE, Op
from ir.records import pointwise_ops

sys.path.insert(0, str(Path(__file__).parents[1] / "eager"))  # the op table lives there
import op_table  # noqa: E402
import op_table_shape  # noqa: E402
from op_cases import Maker  # noqa: E402

NOT_NATIVE = {
    Op.MAX_DIM: "two results (values, indices) of one reduction: the row kernels write one",
    Op.MIN_DIM: "two results (values, indices) of one reduction: the row kernels write one",
    Op.DOT: "a 1-D product: only mm and bmm run on kiln's GEMM",
    Op.MV: "a matrix-vector product: only mm and bmm run on kiln's GEMM",
    Op.CAT: "a copy into parts of a new tensor: no kernel writes into a slice of its output",
    Op.INDEX_ADD: "a scatter: writes at indexed positions are not generated",
    Op.INDEX_PUT: "a scatter: writes at indexed positions are not generated",
    Op.SCATTER: "a scatter: writes at indexed positions are not generated",
    Op.SCATTER_ADD: "a scatter: writes at indexed positions are not generated",
    Op.SELECT_BACKWARD: "writes one slice of zeros: no kernel writes into a slice of its output",
    Op.SLICE_BACKWARD: "writes one slice of zeros: no kernel writes into a slice of its output",
    Op.IM2COL: "a gather of overlapping windows: its eager kernel (a generated one for "
               "floats) runs it",
    Op.ISIN: "each element against a whole test set (a scan, a table or a sorted search): "
             "its eager kernel (generated native code for small sets) runs it",
    Op.COL2IM: "adds overlapping windows into images: no kernel writes where others wrote",
    Op.PROD: "a product over a dim: the row kernels reduce by sum, max and min; its eager "
             "kernel (numpy's, 16-bit each product rounded as PyTorch's) runs it",
    **{op: "its pointwise record has no emitter (kiln's vectorised math library lacks the "
           "function): numpy's, the eager kernel, runs" for op, pointwise in
       pointwise_ops().items() if pointwise.emit is None},
}
"""Ops that run through the interpreter (their eager kernel) inside compiled graphs."""
BREAKS = {op: "capture records functional code: an in-place op on a graph value breaks "
              "the graph" for op in INPLACE - set(REBOUND)} | {
    op: "its output shape depends on the data: capture breaks the graph there"
    for op in DATA_DEPENDENT_SHAPE}
"""Ops that never enter a compiled graph: they run eagerly between graphs. (The cases
call the in-place ops on a copy, a value of the graph; the ones of REBOUND enter it as
their out-of-place twins.)"""
COMPOSITES_OF = {Op.STACK: Op.CAT, Op.MATMUL: Op.DOT}  # what the tables' samples decompose to


def _first_sample(case):
    make = Maker("float32" if "float32" in case.dtypes else case.dtypes[0])
    for sample in case.samples(make):
        arrays = []

        def lift(v):
            if isinstance(v, np.ndarray):
                arrays.append(v)
                return len(arrays) - 1, None
            if isinstance(v, (list, tuple)):
                return type(v)(lift(x) for x in v)
            return v
        args, kwargs = lift(sample.args), {k: lift(v) for k, v in sample.kwargs.items()}
        if isinstance(kwargs.get("dtype"), str):  # samples name dtypes
            kwargs["dtype"] = getattr(eager, kwargs["dtype"])
        if arrays and all(a.size for a in arrays):
            return arrays, args, kwargs
    return None


def _put_back(v, tensors):
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], int) and v[1] is None:
        return tensors[v[0]]
    if isinstance(v, (list, tuple)):
        return type(v)(_put_back(x, tensors) for x in v)
    return v


def _not_native(lowered) -> list[str]:
    """Why any part of a lowered function did not run as generated code."""
    why = [f"{n.op.name} runs interpreted" for g in lowered.optimized for n in g.nodes
           if n.op not in (Op.FUSED, Op.SCALAR) and not n.op.schema.is_view]
    return why + [f"{node}: {reason}" for node, reason in lowered.interpreted.items()]


CASES = [c for c in op_table.CASES + op_table_shape.CASES if _first_sample(c) is not None]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_op_runs_natively_or_is_listed_with_its_reason(case):
    arrays, args, kwargs = _first_sample(case)
    tensors = [eager.tensor(a) for a in arrays]
    compiled = compiler.compile(lambda *ts: case.fn(eager, *_put_back(args, ts),
                                                    **_put_back(kwargs, ts)), backend="native")
    lowered = compiler.lower(compiled, *tensors)
    ops = [COMPOSITES_OF.get(op, op) for op in case.ops]
    (entry,) = compiled.entries.values()
    for brk in entry.breaks:  # only where one of the case's ops stands
        assert any(op.schema.name in brk.reason for op in ops if op in BREAKS), \
            f"{case.name}: an unexpected graph break: {brk.reason}"
    if all(op in BREAKS for op in ops):
        assert entry.breaks, f"{case.name}: {[op.name for op in ops]} did not break the graph"
    listed = [op for op in ops if op in NOT_NATIVE]
    why = _not_native(lowered)
    if listed:
        assert why, f"{case.name}: {[op.name for op in listed]} now run natively: take them " \
                    "off NOT_NATIVE"
    else:
        assert not why, f"{case.name}: {why}"


def test_the_list_names_only_ops_of_the_vocabulary_that_are_not_composite():
    assert not set(NOT_NATIVE) & (COMPOSITE | set(BREAKS))
    covered = {COMPOSITES_OF.get(op, op) for case in CASES for op in case.ops}
    assert set(NOT_NATIVE) <= covered


def test_a_node_no_kernel_takes_stays_out_and_its_neighbours_still_run_natively():
    """An int16 sum has no native code (int16 runs in elementwise kernels only): fusion
    asks the backend, so the sum runs interpreted and the casts and the chain around it
    are native kernels (the whole group was interpreted when fusion did not ask)."""
    def f(x, y):
        return ((x * 2).exp() + (y * 9).short().sum(-1, keepdim=True).float()).tanh()
    x, y = eager.randn(4, 8), eager.randn(4, 8)
    np.testing.assert_allclose(compiler.compile(f, backend="native")(x, y).numpy(),
                               f(x, y).numpy(), rtol=1e-5, atol=1e-6)
    lowered = compiler.lower(f, x, y)
    (graph,) = lowered.optimized
    assert [n.op for n in graph.nodes if n.op is not Op.FUSED] == [Op.SUM]
    assert lowered.interpreted == {} and len(lowered.kernels) == len(graph.nodes) - 1
