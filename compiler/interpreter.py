"""The reference interpreter: run a Graph node by node through eager ops. It is the
correctness oracle for every backend, and the "eager" backend itself."""
from __future__ import annotations

from typing import NamedTuple

from eager.dispatcher import ATEN
from eager.profiler import profile
from ir.graph import Graph, Node, SymbolicSize
from ir.ops import Op


class InterpreterError(RuntimeError):
    pass


def node_call_args(node: Node, env: dict):
    """The (args, kwargs) that call `node`'s op through its schema."""
    tensors = iter(node.inputs)
    attrs = dict(node.attrs)
    args, kwargs = [], {}
    for a in node.op.schema.arguments:
        if a.type.base == "Tensor":
            v = next(tensors)
            value = None if v is None else (
                [env[x] for x in v] if isinstance(v, tuple) else env[v])
        else:
            value = list(attrs[a.name]) if isinstance(attrs[a.name], tuple) and \
                a.type.is_list else attrs[a.name]
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    return args, kwargs


def run(graph: Graph, inputs) -> list:
    """Evaluate `graph` on concrete tensors; returns its outputs in order."""
    return prepare(graph)(inputs)


class _Slot:
    """An argument read from the environment: one value, or a list of them."""
    __slots__ = ("index", "many")

    def __init__(self, index, many: bool = False):
        self.index, self.many = index, many


def prepare(graph: Graph, replace: dict | None = None):
    """`graph` as a callable over a list of inputs: values live in numbered slots, so a
    call does no name lookups (this is the "eager" backend's compiled form). `replace`
    maps node indices of fused nodes to callables `run(list[Tensor]) -> list[Tensor]`
    that run instead of their bodies (the native backend's kernels)."""
    slot = {v: i for i, v in enumerate(graph.inputs)}
    steps = []
    replace = replace or {}
    for index, node in enumerate(graph.nodes):
        if index in replace or node.op in _SPECIAL:
            if index in replace:  # called on the list of its inputs, read by slot number
                handle, env_args, env_kwargs = replace[index], \
                    tuple(slot[v] for v in node.inputs[0]), kernel_work(node)
            else:
                handle, env_args, env_kwargs = _SPECIAL[node.op](node, _SlotMap(slot))
            outs = []
            for v in node.outputs:
                slot[v] = len(slot)
                outs.append(slot[v])
            steps.append((node, handle, env_args, env_kwargs, outs))
            continue
        env_args, env_kwargs = node_call_args(node, _SlotMap(slot))
        outs = []
        for v in node.outputs:
            slot[v] = len(slot)
            outs.append(slot[v])
        steps.append((node, ATEN[node.op], env_args, env_kwargs, outs))
    result_slots = [slot[v] for v in graph.outputs]
    n_inputs, n_slots = len(graph.inputs), len(slot)

    def run(inputs):
        if len(inputs) != n_inputs:
            raise InterpreterError(f"{graph.name} takes {n_inputs} inputs, got {len(inputs)}")
        env = list(inputs) + [None] * (n_slots - n_inputs)
        profiling = profile._active
        for node, handle, args, kwargs, outs in steps:
            try:
                if type(kwargs) is KernelWork:  # a replacing kernel
                    if profiling is None:
                        out = handle([env[i] for i in args])
                    else:  # one profiler event a kernel (ops inside it record none)
                        with profiling._span(kwargs.name, [], "kernel") as event:
                            event.flops, event.bytes = kwargs.flops, kwargs.bytes
                            out = handle([env[i] for i in args])
                else:
                    out = handle(*[_read(a, env) for a in args],
                                 **{k: _read(a, env) for k, a in kwargs.items()})
            except Exception as e:  # the op's own error (IndexError stays IndexError)
                e.add_note(f"while executing {node}")
                raise
            if len(outs) == 1 and not isinstance(out, (tuple, list)):
                env[outs[0]] = out
            else:
                for i, t in zip(outs, out):
                    env[i] = t
        return [env[i] for i in result_slots]
    return run


class KernelWork(NamedTuple):
    """A native kernel's profiler name and its work: floating-point operations (2MNK a
    product, one per element for each arithmetic node of a pointwise body) and bytes
    of its inputs and outputs (0 where a size is symbolic)."""
    name: str
    flops: int
    bytes: int


def kernel_work(node: Node) -> KernelWork:
    body = node.attr["body"]
    ops = [n.op for n in body.nodes if n.op is not Op.SCALAR and not n.op.schema.is_view]
    names = list(dict.fromkeys(op.schema.name for op in ops))
    name = f"kiln::{node.attr['kind']}[{', '.join(names[:6])}{', ...' if len(names) > 6 else ''}]"
    try:
        moved = sum(v.type.numel() * v.type.dtype.itemsize
                    for v in (*node.inputs[0], *node.outputs))
        flops = 0
        for n in body.nodes:
            if n.op in (Op.MM, Op.BMM):  # 2 M N K (for each batch)
                flops += 2 * n.outputs[0].type.numel() * n.inputs[0].type.shape[-1]
            elif n.op is not Op.SCALAR and not n.op.schema.is_view:
                flops += n.outputs[0].type.numel()
    except SymbolicSize:
        return KernelWork(name, 0, 0)
    return KernelWork(name, flops, moved)


def prepare_checked(graph: Graph):
    """`prepare(graph)`, each call's results checked against the types the graph gives
    its outputs (dtype, and shape where static): a fused node the native backend runs
    interpreted (while its kernel compiles, or for a layout the kernel does not take)
    must hand on what the kernel would, or the nodes after it compute with the wrong
    type. InterpreterError names the value and both types."""
    run = prepare(graph)
    expected = [(v, v.type.dtype, tuple(v.type.shape) if v.type.is_static else None)
                for v in graph.outputs]

    def checked(inputs):
        results = run(inputs)
        for (value, dtype, shape), result in zip(expected, results):
            if result.dtype is not dtype or (shape is not None and
                                              tuple(result.shape) != shape):
                raise InterpreterError(
                    f"{graph.name}: interpreting {value} gave {result.dtype.short}"
                    f"{list(result.shape)}, not its type {value.type} (an op's eager "
                    f"result type disagrees with the graph's)")
        return results
    return checked


def _scalar_step(node: Node, env):
    """A scalar constant: made once, as the wrapped Python number eager would see."""
    from eager.tensor import wrap_scalar
    value = wrap_scalar(node.attr["value"])
    return (lambda: value), [], {}


def _fused_step(node: Node, env):
    """A fused kernel's body runs as a graph of its own over the kernel's inputs."""
    body = prepare(node.attr["body"])
    return (lambda *inputs: body(list(inputs))), [env[v] for v in node.inputs[0]], {}


_SPECIAL = {Op.SCALAR: _scalar_step, Op.FUSED: _fused_step}


class _SlotMap:
    """Stands in for the environment while preparing: values become slots."""

    def __init__(self, slot: dict):
        self.slot = slot

    def __getitem__(self, v):
        return _Slot(self.slot[v])


def _read(a, env):
    if type(a) is _Slot:
        return env[a.index]
    if type(a) is list and a and type(a[0]) is _Slot:
        return [env[x.index] for x in a]
    return a
