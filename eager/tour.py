"""The torch.matmul walkthrough, run on kiln: `python -m eager.tour`.

Each step below is one stop on the way from `torch.matmul(a, b)` to a backend kernel
and back through autograd, printed so the output reads like the article it comes from.
The code spells everything the PyTorch way (`import eager as torch`), so every line can
be pasted into a PyTorch session to compare.
"""
from __future__ import annotations

import eager as torch


def heading(title: str) -> None:
    print(f"\n=== {title} ===")


def show(code: str, value) -> None:
    """Print a line of code the way a REPL session would, then its value."""
    print(f">>> {code}")
    print(str(value).rstrip("\n"))


def inputs():
    a = torch.tensor([[1., 2., 3.], [4., 5., 6.]], requires_grad=True)
    b = torch.tensor([[7., 8.], [9., 10.], [11., 12.]], requires_grad=True)
    return a, b


def forward(a, b):
    heading("1. The call: y = torch.matmul(a, b)")
    show("a", a)
    show("b", b)
    y = torch.matmul(a, b)
    show("y = torch.matmul(a, b); y", y)
    return y


def autograd_graph(y) -> None:
    heading("2. The graph autograd recorded")
    print("matmul itself has no derivative: it decomposed into mm, whose Autograd kernel")
    print("recorded an MmBackward0 node; its edges lead to the leaves' AccumulateGrad nodes.")
    show("y.grad_fn", y.grad_fn)
    show("y.grad_fn.next_functions", y.grad_fn.next_functions)


def backward(y, a, b) -> None:
    heading("3. Backward: y.sum().backward()")
    y.sum().backward()
    show("a.grad", a.grad)
    show("b.grad", b.grad)


def print_events(events) -> None:
    """One line per event, indented under the event that called it."""
    for ev in events:
        depth, parent = 0, ev.cpu_parent
        while parent is not None:
            depth, parent = depth + 1, parent.cpu_parent
        print(f"{'    ' * depth}{ev.name} {ev.input_shapes}")


def profiled(a, b) -> None:
    heading("4. The profiler: which ops ran, nested, with their input shapes")
    with torch.profiler.profile(record_shapes=True) as prof:
        torch.matmul(a, b)
    print_events(prof.events())
    print()
    print(prof.key_averages(group_by_input_shape=True).table())


def without_grad(a, b) -> None:
    heading("5. Under torch.no_grad() the Autograd keys are masked: no graph")
    with torch.no_grad():
        y = torch.matmul(a, b)
    show("y.requires_grad, y.grad_fn", (y.requires_grad, y.grad_fn))


def dispatch_tables() -> None:
    heading("6. The dispatch tables")
    print("aten::mm has its own kernels: CPU (numpy) below, Autograd above.")
    show('torch._C._dispatch_dump_table("aten::mm")',
         torch._C._dispatch_dump_table("aten::mm"))
    print("aten::matmul has one composite (math) kernel filling every slot: it decomposes.")
    show('torch._C._dispatch_dump_table("aten::matmul")',
         torch._C._dispatch_dump_table("aten::matmul"))


def vectors_reach_dot() -> None:
    heading("7. Experiment: two 1-D inputs reach aten::dot")
    u, v = torch.tensor([1., 2., 3.]), torch.tensor([4., 5., 6.])
    with torch.profiler.profile(record_shapes=True) as prof:
        out = torch.matmul(u, v)
    print_events(prof.events())
    show("torch.matmul(u, v)", out)


def wrong_shapes() -> None:
    heading("8. Experiment: a wrong inner dimension")
    a, b = torch.ones(2, 3), torch.ones(4, 2)
    print(">>> torch.matmul(torch.ones(2, 3), torch.ones(4, 2))")
    try:
        torch.matmul(a, b)
    except RuntimeError as e:
        print(f"RuntimeError: {e}")


def main() -> None:
    a, b = inputs()
    y = forward(a, b)
    autograd_graph(y)
    backward(y, a, b)
    profiled(a, b)
    without_grad(a, b)
    dispatch_tables()
    vectors_reach_dot()
    wrong_shapes()


if __name__ == "__main__":
    main()
