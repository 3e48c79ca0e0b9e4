"""Every fact the torch.matmul walkthrough shows, asserted; and `python -m eager.tour` runs."""
import os
import subprocess
import sys

import pytest

import eager as torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_inputs():
    a = torch.tensor([[1., 2., 3.], [4., 5., 6.]], requires_grad=True)
    b = torch.tensor([[7., 8.], [9., 10.], [11., 12.]], requires_grad=True)
    return a, b


def test_matmul_value_and_repr():
    a, b = make_inputs()
    y = torch.matmul(a, b)
    assert y.tolist() == [[58., 64.], [139., 154.]]
    assert y.dtype is torch.float32
    assert repr(y) == ("tensor([[ 58.,  64.],\n        [139., 154.]], "
                       "grad_fn=<MmBackward0>)")


def test_grad_fn_is_mm_backward_with_edges_to_the_leaves():
    a, b = make_inputs()
    y = torch.matmul(a, b)
    assert type(y.grad_fn).__name__ == "MmBackward0"
    assert y.grad_fn.name() == "MmBackward0"
    assert y.requires_grad and not y.is_leaf
    edges = y.grad_fn.next_functions
    assert [type(node).__name__ for node, _ in edges] == ["AccumulateGrad", "AccumulateGrad"]
    assert edges[0][0].variable is a and edges[1][0].variable is b
    assert [nr for _, nr in edges] == [0, 0]


def test_backward_gives_the_walkthrough_grads():
    a, b = make_inputs()
    torch.matmul(a, b).sum().backward()
    assert a.grad.tolist() == [[15., 19., 23.], [15., 19., 23.]]
    assert b.grad.tolist() == [[5., 5.], [7., 7.], [9., 9.]]


def test_profiler_shows_mm_nested_under_matmul_with_shapes():
    a, b = make_inputs()
    with torch.profiler.profile(record_shapes=True) as prof:
        torch.matmul(a, b)
    events = prof.events()
    assert [(e.name, e.input_shapes) for e in events] == [
        ("aten::matmul", [[2, 3], [3, 2]]), ("aten::mm", [[2, 3], [3, 2]])]
    matmul, mm = events
    assert matmul.cpu_parent is None and mm.cpu_parent is matmul
    assert matmul.cpu_children == [mm]
    assert matmul.start_ns <= mm.start_ns <= mm.end_ns <= matmul.end_ns
    table = prof.key_averages(group_by_input_shape=True).table()
    assert "aten::matmul" in table and "aten::mm" in table
    assert "[[2, 3], [3, 2]]" in table


def test_no_grad_records_nothing():
    a, b = make_inputs()
    with torch.no_grad():
        y = torch.matmul(a, b)
    assert y.requires_grad is False
    assert y.grad_fn is None
    assert y.tolist() == [[58., 64.], [139., 154.]]
    assert torch.matmul(a, b).requires_grad  # and grad mode comes back after the block


def test_dispatch_table_of_mm_lists_cpu_and_autograd_cpu_kernels():
    table = torch._C._dispatch_dump_table("aten::mm")
    lines = dict(line.split(": ", 1) for line in table.splitlines())
    assert lines["CPU"].startswith("registered at eager/kernels/")
    assert lines["CPU"].endswith("[kernel]")
    assert lines["AutogradCPU"].startswith("registered at eager/autograd/")
    assert lines["AutogradCPU"].endswith("[autograd kernel]")
    # the CUDA backend registers its kernel when a CUDA tensor is first made (none here,
    # unless an earlier test in this process made one)
    assert "CUDA" not in lines or lines["CUDA"].startswith("registered at eager/backends/cuda/")


def test_dispatch_table_of_matmul_shows_its_composite_kernel():
    table = torch._C._dispatch_dump_table("aten::matmul")
    lines = dict(line.split(": ", 1) for line in table.splitlines())
    for key in ("CPU", "AutogradCPU"):
        assert lines[key].startswith("registered at eager/composite.py:")
        assert lines[key].endswith("[math kernel]")
    registrations = torch._C._dispatch_dump("aten::matmul")
    assert "CompositeImplicitAutograd[alias]: registered at eager/composite.py:" in registrations
    assert "schema: matmul(Tensor self, Tensor other) -> Tensor" in registrations


def test_two_vectors_reach_dot():
    u, v = torch.tensor([1., 2., 3.]), torch.tensor([4., 5., 6.])
    with torch.profiler.profile(record_shapes=True) as prof:
        out = torch.matmul(u, v)
    assert out.item() == 32.0 and out.shape == ()
    assert [(e.name, e.input_shapes) for e in prof.events()] == [
        ("aten::matmul", [[3], [3]]), ("aten::dot", [[3], [3]])]
    assert prof.events()[1].cpu_parent is prof.events()[0]


def test_wrong_inner_dimension_is_a_readable_error():
    with pytest.raises(RuntimeError) as info:
        torch.matmul(torch.ones(2, 3), torch.ones(4, 2))
    assert str(info.value) == "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)"


def test_tour_runs_and_prints_the_walkthrough():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-m", "eager.tour"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    expected = [
        "tensor([[ 58.,  64.],\n        [139., 154.]], grad_fn=<MmBackward0>)",
        "<MmBackward0 object at",
        "((<AccumulateGrad object at",
        "tensor([[15., 19., 23.],\n        [15., 19., 23.]])",
        "tensor([[5., 5.],\n        [7., 7.],\n        [9., 9.]])",
        "aten::matmul [[2, 3], [3, 2]]\n    aten::mm [[2, 3], [3, 2]]",
        "Self CPU time total:",
        "(False, None)",
        "AutogradCPU: registered at eager/autograd/",
        "CPU: registered at eager/composite.py:",
        "aten::matmul [[3], [3]]\n    aten::dot [[3], [3]]",
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x2)",
    ]
    positions = []
    for text in expected:
        assert text in out, f"{text!r} missing from the tour's output:\n{out}"
        positions.append(out.index(text))
    assert positions == sorted(positions), "the tour's steps came out of order"
