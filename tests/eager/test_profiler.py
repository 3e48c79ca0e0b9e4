"""The profiler: nesting, shapes, averages and their table, the Chrome trace,
record_function regions, the backward pass, and clean enable/disable."""
import json
import threading

import pytest

import eager
from eager import dispatcher
from eager.profiler import ProfilerActivity, profile, record_function


def matmul_inputs(requires_grad=False):
    a = eager.tensor([[1., 2., 3.], [4., 5., 6.]], requires_grad=requires_grad)
    b = eager.tensor([[7., 8.], [9., 10.], [11., 12.]], requires_grad=requires_grad)
    return a, b


def names(prof):
    return [e.name for e in prof.events()]


def depth(event):
    n = 0
    while event.cpu_parent is not None:
        event, n = event.cpu_parent, n + 1
    return n


def test_mm_nests_under_matmul_and_timing_contains_it():
    a, b = matmul_inputs()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        eager.matmul(a, b)
    matmul, mm = prof.events()
    assert (matmul.name, mm.name) == ("aten::matmul", "aten::mm")
    assert mm.cpu_parent is matmul and matmul.cpu_children == [mm]
    assert matmul.cpu_time_total >= mm.cpu_time_total > 0
    assert matmul.self_cpu_time_total == pytest.approx(
        matmul.cpu_time_total - mm.cpu_time_total)
    assert mm.input_shapes == []  # shapes are recorded only when asked


def test_record_shapes_gives_the_shape_of_each_argument():
    x = eager.ones(4, 5)
    with profile(record_shapes=True) as prof:
        eager.sum(x, 1, keepdim=True)
        eager.add(x, 2.0)
    assert [(e.name, e.input_shapes) for e in prof.events()] == [
        ("aten::sum", [[4, 5], [], []]), ("aten::add", [[4, 5], []])]


def test_key_averages_counts_calls_and_groups_by_shape():
    a, b = eager.ones(2, 3), eager.ones(3, 2)
    with profile(record_shapes=True) as prof:
        for _ in range(3):
            eager.matmul(a, b)
        eager.matmul(eager.ones(4, 4), eager.ones(4, 4))
    by_name = {avg.key: avg for avg in prof.key_averages()}
    assert by_name["aten::matmul"].count == 4 and by_name["aten::mm"].count == 4
    assert by_name["aten::mm"].input_shapes is None
    grouped = [(avg.key, avg.input_shapes, avg.count)
               for avg in prof.key_averages(group_by_input_shape=True)]
    assert grouped == [("aten::matmul", [[2, 3], [3, 2]], 3), ("aten::mm", [[2, 3], [3, 2]], 3),
                       ("aten::matmul", [[4, 4], [4, 4]], 1), ("aten::mm", [[4, 4], [4, 4]], 1)]
    avg = by_name["aten::mm"]
    assert avg.cpu_time == pytest.approx(avg.cpu_time_total / 4)


def test_table_text_has_a_row_per_key_and_the_shapes_column():
    a, b = matmul_inputs()
    with profile(record_shapes=True) as prof:
        eager.matmul(a, b)
        eager.matmul(a, b)
    table = prof.key_averages(group_by_input_shape=True).table(sort_by="cpu_time_total")
    lines = table.splitlines()
    assert lines[0] == lines[2] == lines[-2] and set(lines[0]) == {"-"}
    assert lines[1].split() == ["Name", "Self", "CPU", "%", "Self", "CPU", "CPU", "total", "%",
                                "CPU", "total", "CPU", "time", "avg", "#", "of", "Calls",
                                "Input", "Shapes"]
    rows = [line.split() for line in lines[3:-2]]
    assert [r[0] for r in rows] == ["aten::matmul", "aten::mm"]  # sorted: matmul contains mm
    assert [r[6] for r in rows] == ["2", "2"]
    assert all(" ".join(r[7:]) == "[[2, 3], [3, 2]]" for r in rows)
    assert rows[0][3] == "100.00%"  # matmul's total is the whole profile
    assert lines[-1].startswith("Self CPU time total: ")
    assert "Input Shapes" not in prof.key_averages().table()
    assert len(prof.key_averages().table(row_limit=1).splitlines()) == len(lines) - 1
    with pytest.raises(ValueError, match="sort_by must be one of"):
        prof.key_averages().table(sort_by="bogus")


def test_chrome_trace_is_valid_json_of_complete_events(tmp_path):
    a, b = matmul_inputs()
    with profile(record_shapes=True) as prof:
        with record_function("my_region"):
            eager.matmul(a, b)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    assert [e["name"] for e in events] == ["my_region", "aten::matmul", "aten::mm"]
    for e in events:
        assert e["ph"] == "X"
        assert {"ts", "dur", "name", "pid", "tid"} <= set(e)
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert e["ts"] >= 0 and e["dur"] >= 0
    region, matmul, mm = events
    assert region["cat"] == "user_annotation" and matmul["cat"] == "cpu_op"
    # Perfetto nests complete events by time on one thread: each child lies inside its parent
    for parent, child in ((region, matmul), (matmul, mm)):
        assert parent["tid"] == child["tid"]
        assert parent["ts"] <= child["ts"]
        assert child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 1e-3
    assert mm["args"]["Input Dims"] == [[2, 3], [3, 2]]


def test_record_function_regions_nest_ops_and_each_other():
    x = eager.ones(3)
    with profile() as prof:
        with record_function("outer"):
            eager.exp(x)
            with record_function("inner") as inner:
                eager.neg(x)
    assert names(prof) == ["outer", "aten::exp", "inner", "aten::neg"]
    assert [depth(e) for e in prof.events()] == [0, 1, 1, 2]
    assert inner.name == "inner" and inner.cpu_children[0].name == "aten::neg"


def test_record_function_without_a_profiler_is_a_no_op():
    with record_function("nothing") as ev:
        y = eager.ones(2) * 2
    assert ev is None and y.tolist() == [2., 2.]


def test_record_function_as_a_decorator():
    @record_function("step")
    def step(x):
        return eager.exp(x)

    with profile() as prof:
        step(eager.ones(1))
    assert names(prof) == ["step", "aten::exp"]


def test_backward_nodes_appear_as_engine_regions():
    a, b = matmul_inputs(requires_grad=True)
    y = eager.matmul(a, b).sum()
    with profile(record_shapes=True) as prof:
        y.backward()
    events = prof.events()
    regions = [e.name for e in events if e.cpu_parent is None]
    prefix = "autograd::engine::evaluate_function: "
    assert regions == [prefix + y.grad_fn.name(), prefix + "MmBackward0",
                       prefix + "AccumulateGrad", prefix + "AccumulateGrad"]
    assert y.grad_fn.name().startswith("SumBackward")
    mm_backward = events[[e.name for e in events].index(regions[1])]
    mms = [c for c in mm_backward.cpu_children if c.name == "aten::mm"]
    assert sorted(c.input_shapes for c in mms) == [[[2, 2], [2, 3]], [[3, 2], [2, 2]]]
    assert a.grad.tolist() == [[15., 19., 23.], [15., 19., 23.]]


def test_backward_outside_a_profile_records_nothing():
    a, b = matmul_inputs(requires_grad=True)
    with profile() as prof:
        y = eager.matmul(a, b).sum()
    y.backward()
    assert names(prof) == ["aten::matmul", "aten::mm", "aten::sum"]


def test_profiler_is_inactive_after_exit():
    with profile() as prof:
        eager.ones(2).exp()
    assert profile._active is None and dispatcher._recorder is None
    eager.ones(2).exp()
    with record_function("late"):
        pass
    assert names(prof) == ["aten::exp"]


def test_an_exception_inside_the_block_leaves_the_profiler_disabled():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        with profile() as prof:
            eager.matmul(eager.ones(2, 3), eager.ones(4, 2))
    assert profile._active is None and dispatcher._recorder is None
    # the failed ops were still closed, with their nesting
    assert names(prof) == ["aten::matmul", "aten::mm"]
    assert all(e.end_ns >= e.start_ns for e in prof.events())
    with profile() as again:  # a new profile starts cleanly
        eager.ones(1).neg()
    assert names(again) == ["aten::neg"]


def test_nested_profile_raises_and_keeps_the_outer_one():
    with profile() as outer:
        with pytest.raises(RuntimeError, match="already enabled"):
            with profile():
                pass
        eager.ones(1).neg()
    assert names(outer) == ["aten::neg"]
    assert profile._active is None


def test_cuda_activity_without_cuda_tensors_records_cpu_events_and_no_device_time():
    """As PyTorch's: CUDA activity is accepted; only kernel launches have device time
    (tests/eager/test_cuda_tensors.py times them)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        eager.ones(2).neg()
    assert "aten::neg" in names(prof)
    assert all(e.cuda_time_total == 0 for e in prof.events())
    assert "CUDA total" in prof.key_averages().table()


def test_each_thread_nests_its_own_ops():
    x = eager.ones(2, 2)

    def work():
        eager.matmul(x, x)

    with profile() as prof:
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = prof.events()
    assert sorted(e.name for e in events) == ["aten::matmul"] * 2 + ["aten::mm"] * 2
    for e in events:
        if e.name == "aten::mm":
            assert e.cpu_parent.name == "aten::matmul" and e.cpu_parent.thread == e.thread
