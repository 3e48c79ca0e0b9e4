"""Graph capture with lazy tensors.

While a Trace is active the Tracer dispatch key is on for the thread, so every primitive
op reaches `record`: instead of computing, it appends a node to the current Region and
returns a lazy tensor (shape and dtype from the op's Meta kernel, no data). Tensors that
are not lazy (arguments, parameters, globals) become the region's inputs.

When Python needs a value (`bool(t)`, `t.item()`, printing) or an op cannot be captured
(a custom op, an in-place op), the region is *flushed*: its graph (only the nodes that
live tensors need) is compiled, found again by its text if it was seen before, and run;
each live lazy tensor then becomes an ordinary tensor holding its value, and capture
continues in a new region.

A library's whole step (an optimiser's step or zero_grad: eager.tensor.whole_step) is
not a break: the region before it is flushed, the step runs eagerly as it is, and the
trace keeps it (EagerStep) so that a training step can replay it after its graph.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field

from runtime import debugging as debug
from compiler.guards import resolve
from eager import dispatcher, factories
from eager.device import CPU, META
from eager.device import device as Device
from eager.dispatcher import DispatchKey
from eager.kernels._common import can_cast
from eager.autograd.grad_mode import set_grad_enabled
from eager.profiler import profile, record_function
from eager.tensor import (Storage, Tensor, contiguous_strides, reading_why, set_break_hook,
                          set_data_watch, set_whole_step_hook, wrap_scalar)
from ir.graph import Graph, GraphBuilder, Node, TensorType, Value, strict_key
from ir.ops import DATA_DEPENDENT_SHAPE, INPLACE, VIEW, Op
from ir.records import RECORDS

TRACER_BIT = 1 << DispatchKey.Tracer
_local = threading.local()
_KILN_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def active_trace() -> Trace | None:
    return getattr(_local, "trace", None)


def user_location() -> str:
    """file:line of the innermost frame outside kiln's own packages."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        inside = path.startswith(_KILN_ROOT) and os.path.relpath(path, _KILN_ROOT).split(
            os.sep)[0] in ("eager", "compiler", "ir", "runtime")
        if not inside and "importlib" not in path:
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


_PLUMBING = ("_np", "_host_np", "materialize", "_watch_data", "note_data_access")
# where an eager function lives -> how a user calls it
_CALLED_AS = {"nn/functional.py": "F.", "functional.py": "eager.", "indexing.py": "Tensor.",
              "_tensor_methods.py": "Tensor.", "tensor.py": "Tensor."}


def _data_access_name(skip: int) -> str:
    """The user-level call that asked for data (`F.one_hot()`, `Tensor.item()`,
    `Tensor.__bool__()`): the outermost of kiln's eager frames from `skip` levels above
    this one, named as the user wrote it."""
    frame = sys._getframe(skip + 1)
    eager_root = os.path.join(_KILN_ROOT, "eager")
    name, where = "data access", "tensor.py"
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(eager_root):
            break
        if frame.f_code.co_name not in _PLUMBING:
            name, where = frame.f_code.co_name, os.path.relpath(path, eager_root)
        frame = frame.f_back
    called_as = _CALLED_AS.get(where.replace(os.sep, "/"))
    if called_as is None:  # a module's forward, an optimiser's step: module.function
        called_as = os.path.splitext(where)[0].replace(os.sep, ".") + "."
    return f"{called_as}{name}()"


def _data_access_reason(skip: int, t: Tensor, what: str) -> str:
    """Why a graph broke for a host read of `t`: the user-level call, the value that had
    to be concrete (`what`: "reads the values of a captured"), and why, where the eager
    code said (eager.tensor.reading_values)."""
    why = reading_why()
    return (f"{_data_access_name(skip + 1)} needs a concrete value: it {what} "
            f"{tuple(t.shape)} {t.dtype.name} tensor" + (f" ({why})" if why else ""))


@dataclass
class LazyRef:
    region: Region
    value: Value

    def materialize(self, tensor: Tensor) -> None:
        reason = _data_access_reason(2, tensor, "reads the values of a captured")
        self.region.trace.flush(reason, user_location())


@dataclass
class BreakRecord:
    reason: str
    where: str


@dataclass
class RegionRecord:
    graph: Graph
    ended_by: str
    input_tensors: list = field(repr=False)
    outputs: list = field(repr=False)  # the tensors the region's outputs became
    needs_grad: tuple | None = None    # per input, when the region compiled its backward
    run: object = field(default=None, repr=False)
    grads: tuple = ()                  # (input, output): the output became input's .grad
    after_steps: int = 0               # how many whole steps ran before it


@dataclass
class EagerStep:
    """A library's whole step that ran eagerly during capture (see whole_step)."""
    call: object = field(repr=False)   # runs the step again: call(*tensors)
    what: str                          # `Adam.step()`
    where: str
    after_regions: int                 # how many regions were flushed before it
    nulls: frozenset = frozenset()     # ids of the tensors whose .grad it set to None
    returned_none: bool = True
    tensors: tuple | None = ()         # its tensors as outputs of the last region (None:
                                       # one is not)
    write: bool = False                # an in-place write kept outside the graph (below)


FUNCTIONAL_TWIN = {op: r.inplace_of for op, r in RECORDS.items()
                   if r.inplace_of is not None and RECORDS[r.inplace_of].pointwise is not None}
"""In-place ops a region records as their out-of-place twin (Trace._rebind): those of
pointwise ops (add_, exp_, clamp_ ...), whose twin's result has self's shape and, where
it has self's dtype too, takes self's place."""


@dataclass
class PendingWrite:
    """An in-place op waiting for its region (Trace._defers)."""
    handle: object
    args: tuple
    kwargs: dict
    grad_enabled: bool
    where: str


class _WriteStep:
    """An in-place write as a replay step: `slots` give each argument ("out", i): the
    i-th tensor the step is given (a region's output), ("source", s): found again from
    the call's arguments, ("value", v): v itself, ("items", list or tuple, slots): a
    list of those."""

    def __init__(self, handle, n_args: int, kwarg_names: tuple, slots: list,
                 grad_enabled: bool):
        self.handle, self.n_args, self.kwarg_names = handle, n_args, kwarg_names
        self.slots, self.grad_enabled = slots, grad_enabled
        self.sources = True  # the replay passes the call's argument leaves

    def __call__(self, *tensors, leaves=()):
        def value(slot):
            kind, x = slot[0], slot[1]
            if kind == "items":
                return slot[1](value(s) for s in slot[2])
            return tensors[x] if kind == "out" else resolve(x, leaves) if kind == "source" \
                else x
        values = [value(s) for s in self.slots]
        self.apply(values[:self.n_args], dict(zip(self.kwarg_names, values[self.n_args:])))

    def apply(self, args, kwargs) -> None:
        with set_grad_enabled(self.grad_enabled):
            self.handle(*args, **kwargs)


def _type_of(t: Tensor) -> TensorType:
    return TensorType(tuple(t.shape), t.dtype, str(t.device))


def _meta_standin(t: Tensor) -> Tensor:
    m = Tensor._make(Storage(None, META, 0), t._shape, t._stride, t._offset, t.dtype, META)
    m._wrapped = t._wrapped
    return m


def _attr(value):
    """A non-tensor argument as an IR attribute value."""
    if isinstance(value, list):
        return tuple(_attr(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_attr(v) for v in value)
    if hasattr(value, "item") and not isinstance(value, Tensor):
        return value.item()  # numpy scalars
    if value is not None and type(value).__name__ == "device":
        return str(value)
    return value


class Region:
    """The nodes captured since the last flush."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.nodes: list[Node] = []
        self.inputs: list[Value] = []
        self.input_tensors: list[Tensor] = []
        self._input_of: dict[int, Value] = {}
        self.alive: dict[Value, weakref.ref] = {}
        self.saved = weakref.WeakSet()  # autograd's SavedTensors of this region's values
        self.grad_mode_changed = False  # an op ran in another grad mode than the trace began
        self.viewed: set[Value] = set()  # inputs and outputs of view ops
        self._scalars: dict = {}
        self._count = 0

    def value_for(self, t: Tensor, stop_gradient: bool = False) -> Value:
        """The graph value of `t`; `stop_gradient`: a value no gradient flows back
        through (a detach of it, where it needs one)."""
        if stop_gradient and t._requires_grad:
            return self._detached(self.value_for(t))
        lazy = t._lazy
        if lazy is not None and lazy.region is self:
            return lazy.value
        if t._wrapped:
            return self._scalar(t._np().item(), t.dtype)
        v = self._input_of.get(id(t))
        if v is None:
            v = Value(f"in{len(self.inputs)}", _type_of(t))
            self.inputs.append(v)
            self.input_tensors.append(t)  # held, so the id stays this tensor's
            self._input_of[id(t)] = v
            self.trace.note_input(t)
        return v

    def _detached(self, v: Value) -> Value:
        out = Value(f"v{self._count}", v.type)
        self._count += 1
        self.nodes.append(Node(Op.DETACH, (v,), (), (out,)))
        return out

    def _scalar(self, value, dtype) -> Value:
        """A Python number as a `scalar` node (one per distinct number in the region)."""
        key = strict_key(value)  # -0.0 is not 0.0
        v = self._scalars.get(key)
        if v is None:
            v = Value(f"v{self._count}", TensorType((), dtype, "cpu"))
            self._count += 1
            self.nodes.append(Node(Op.SCALAR, (), (("value", value),), (v,)))
            self._scalars[key] = v
        return v

    def add(self, node_op, inputs, attrs, metas, device) -> list[Tensor]:
        outputs, lazies = [], []
        for m in metas:
            v = Value(f"v{self._count}", TensorType(tuple(m.shape), m.dtype, str(device)))
            self._count += 1
            t = Tensor._make(Storage(None, device, 0), m._shape, m._stride, m._offset,
                             m.dtype, device)
            t._keys |= TRACER_BIT
            t._lazy = LazyRef(self, v)
            self.alive[v] = weakref.ref(t)
            outputs.append(v)
            lazies.append(t)
        self.nodes.append(Node(node_op, tuple(inputs), tuple(attrs), tuple(outputs)))
        if node_op in VIEW:  # values an in-place op may not rebind (see Trace._rebind)
            self.viewed.update(v for v in (*inputs, *outputs) if isinstance(v, Value))
        return lazies

    def live(self) -> list[tuple[Value, Tensor]]:
        out = []
        for v, ref in self.alive.items():
            t = ref()  # (a tensor an in-place op rebound stands for its last value only)
            if t is not None and t._lazy is not None and t._lazy.region is self and \
                    t._lazy.value is v:
                out.append((v, t))
        return out

    def drop_autograd_records(self) -> None:
        """Let go of the values eager autograd's nodes saved while the region was
        captured: the region's outputs get one compiled node instead, so those nodes
        (reachable only from the region's own lazy tensors) are never run, and the
        values they alone kept need not become outputs."""
        for saved in list(self.saved):
            saved.tensor = None

    def lazy_input(self, type_: TensorType) -> Tensor:
        """A stand-in tensor with no data for a graph input of `type_` (decompositions
        are captured this way, from types alone)."""
        v = Value(f"in{len(self.inputs)}", type_)
        self.inputs.append(v)
        self.input_tensors.append(None)
        dev = CPU if type_.device == "cpu" else Device(type_.device)  # the value's own
        t = Tensor._make(Storage(None, dev, 0), type_.shape, contiguous_strides(type_.shape),
                         0, type_.dtype, dev)
        t._keys |= TRACER_BIT
        t._lazy = LazyRef(self, v)
        return t

    def graph(self, outputs: list[Value], keep_inputs: bool = False) -> tuple[Graph, list]:
        """The graph computing `outputs` (dead nodes dropped, values renamed canonically)
        and the concrete tensors for its inputs (all inputs kept with `keep_inputs`)."""
        needed = set(outputs)
        keep = []
        for node in reversed(self.nodes):
            if any(v in needed for v in node.outputs):
                keep.append(node)
                needed.update(node.input_values())
        keep.reverse()
        b = GraphBuilder()
        rename, tensors = {}, []
        for v, t in zip(self.inputs, self.input_tensors):
            if v in needed or keep_inputs:
                rename[v] = b.input(v.type, f"x{len(tensors)}")
                tensors.append(t)

        def sub(i):
            if isinstance(i, tuple):
                return tuple(rename[x] for x in i)
            return None if i is None else rename[i]
        for node in keep:
            new = b.add(node.op, [sub(i) for i in node.inputs], node.attrs,
                        [v.type for v in node.outputs])
            rename.update(zip(node.outputs, new))
        return b.build([rename[v] for v in outputs], name="region"), tensors


class Trace:
    """One run of a function under capture: its regions, breaks and what they read."""

    def __init__(self, compile_region, known_sources: dict):
        self.compile_region = compile_region  # Graph -> callable(list[Tensor]) -> list
        self.known_sources = known_sources    # id(tensor) -> source, for replay
        self.region = Region(self)
        self.records: list[RegionRecord] = []
        self.steps: list[EagerStep] = []
        self.grad_writes: list[str] = []      # .grad set by Python, not by a whole step
        self.breaks: list[BreakRecord] = []
        self.untracked_inputs: list[str] = []
        self.created: set[int] = set()        # ids of tensors made by factories meanwhile
        self.writes: list[PendingWrite] = []  # in-place writes that wait for the region
        self.written: set[int] = set()        # ids of the storages they write
        self.produced: set[int] = set()       # ids of lazy tensors made concrete by flushes
        self.random = False
        self.grad_enabled = dispatcher.tls.grad_enabled
        self.seconds = {"trace": 0.0, "passes": 0.0, "codegen+JIT": 0.0, "run": 0.0}
        self.codegen = None  # runtime.llvm.jit.CompileClock: what this call's kernels cost

    # inputs -------------------------------------------------------------------------
    def note_input(self, t: Tensor) -> None:
        if id(t) not in self.known_sources and id(t) not in self.created and not t._wrapped:
            self.untracked_inputs.append(f"{tuple(t.shape)} {t.dtype.name} tensor")

    def note_factory(self, t: Tensor, random: bool) -> None:
        self.created.add(id(t))
        self.random = self.random or random

    def note_data_access(self, t: Tensor) -> None:
        """Python is about to see or change the elements of concrete tensor `t`. A value
        read from a tensor this call did not make itself (an argument, a parameter, a
        global) would be baked into the graph, so the first such read is a graph break:
        the entry then re-runs its Python at every call and reads again. So is a read of
        a region's result flushed by a whole step (a training step's loss read after
        `opt.step()`). A tensor the pending region reads is flushed first, so the region
        sees it as it was."""
        if id(t._storage) in self.written:
            self.flush("Python reads a tensor written in place")
        own = t._wrapped or id(t) in self.created or (  # made by a flush that was a
            id(t) in self.produced and  # break, or the last one
            not any(not s.write for s in self.steps))
        pending = id(t) in self.region._input_of
        if pending or not (own or self.breaks):
            what = "reads the values of a" if not own else "touches the elements of a"
            self.flush(_data_access_reason(3, t, what), user_location())

    # capture ------------------------------------------------------------------------
    def record(self, handle, args: tuple, kwargs: dict):
        op = handle.op
        reason = None
        bound = handle.schema.bind(args, kwargs)
        tensors = [t for a in handle.schema.arguments if a.type.base == "Tensor"
                   for t in _as_list(bound[a.name])]
        if op is None:
            reason = f"custom op {handle.qualified_name} has no lowering"
        elif op in INPLACE:
            target = bound[handle.schema.mutated_args[0]]
            if self._defers(handle, target, tensors, bound):
                return self._defer(handle, args, kwargs, target)
            rebound = self._rebind(handle, args, kwargs, target)
            if rebound is not None:
                return rebound
            reason = f"in-place op {handle.qualified_name} (capture records functional code)"
        elif op in DATA_DEPENDENT_SHAPE:
            reason = f"{handle.qualified_name}: its output shape depends on its input's values"
        if self.written and any(isinstance(t, Tensor) and t._lazy is None and
                                id(t._storage) in self.written for t in tensors):
            self.flush(f"{handle.qualified_name} reads a tensor written in place")
        if reason is None:
            reason = _device_problem(handle, tensors, bound)
        if reason is None:
            scalar_tensor = next((a.name for a in handle.schema.arguments
                                  if a.type.base != "Tensor" and isinstance(bound[a.name], Tensor)),
                                 None)
            if scalar_tensor is not None:
                reason = f"{handle.qualified_name}: a tensor given as scalar '{scalar_tensor}'"
        if reason is not None:
            return self.break_and_run(handle, args, kwargs, reason)
        meta_args = tuple(_meta_arg(a) for a in args)
        meta_kwargs = {k: _meta_arg(v) for k, v in kwargs.items()}
        out = handle.call_key(DispatchKey.Meta, *meta_args, **meta_kwargs)
        metas = list(out) if isinstance(out, (tuple, list)) else [out]
        if any(m is None for m in metas):  # (native_layer_norm_backward's masked-out gradients)
            return self.break_and_run(handle, args, kwargs, f"{handle.qualified_name}: an "
                                      "undefined (None) output, which a graph has no value for")
        region = self.region
        stop_gradients = False
        if dispatcher.tls.grad_enabled != self.grad_enabled:
            # grad mode off inside a trace that began with it on (a batch norm's running
            # statistics): the op's inputs are cut from the gradient (detach), so the
            # region still compiles its backward; the other way round it cannot
            stop_gradients = self.grad_enabled
            region.grad_mode_changed |= not self.grad_enabled
        inputs, attrs = [], []
        for a in handle.schema.arguments:
            v = bound[a.name]
            if a.type.base != "Tensor":
                if a.type.is_list and isinstance(v, int) and not isinstance(v, bool):
                    v = (v,)  # int[1] takes a bare int; the IR keeps one spelling
                attrs.append((a.name, _attr(v)))
            elif a.type.is_list:
                inputs.append(tuple(region.value_for(t, stop_gradients) for t in v))
            else:
                inputs.append(None if v is None else region.value_for(v, stop_gradients))
        device = tensors[0].device if tensors else META
        lazies = region.add(op, inputs, attrs, metas, device)
        return tuple(lazies) if isinstance(out, tuple) else (
            list(lazies) if isinstance(out, list) else lazies[0])

    def whole_step(self, call, what: str, nulls_grads_of, tensors) -> object:
        """Run a library's whole step eagerly after the pending region (see EagerStep)."""
        self.flush(f"{what} runs eagerly")
        made = {id(t): i for i, t in enumerate(self.records[-1].outputs)} if self.records \
            else {}
        places = tuple(made.get(id(t)) for t in tensors)
        tls = dispatcher.tls
        previous = tls.exclude
        tls.exclude = previous | TRACER_BIT
        try:
            result = call(*tensors)
        finally:
            tls.exclude = previous
        self.steps.append(EagerStep(call, what, user_location(), len(self.records),
                                    frozenset(map(id, nulls_grads_of)), result is None,
                                    None if None in places else places))
        return result

    # in-place writes ------------------------------------------------------------------
    def _defers(self, handle, target, tensors: list, bound: dict) -> bool:
        """Whether an in-place op can wait until the region has run: it writes a
        concrete tensor (a module's buffer, an argument, a global), and autograd records
        nothing of it (grad mode off, or no tensor of it needs a gradient). BatchNorm's
        running statistics are such writes; an in-place op on a value of the graph
        still breaks it."""
        if self.compile_region is None:
            return False
        return isinstance(target, Tensor) and target._lazy is None and \
            not target._wrapped and not (dispatcher.tls.grad_enabled and any(
                t._requires_grad for t in tensors)) and \
            _device_problem(handle, tensors, bound) is None

    def _defer(self, handle, args, kwargs, target: Tensor) -> Tensor:
        """Keep the write for after the region (flush) and return its target as the op
        does; a later op or Python read of the target's storage flushes first."""
        self.writes.append(PendingWrite(handle, args, kwargs, dispatcher.tls.grad_enabled,
                                        user_location()))
        self.written.add(id(target._storage))
        return target

    def _rebind(self, handle, args, kwargs, target) -> Tensor | None:
        """An in-place op on a value of the region (a residual block's `x += shortcut`)
        as its out-of-place op, the tensor then standing for the result; None where the
        value has views in the region (they would not see the write), is a view, or the
        result's shape is not the value's or its type cannot be cast to the value's (eager
        raises there); a result of another type is cast, as eager writes it (x.eq_(y))."""
        functional = FUNCTIONAL_TWIN.get(handle.op)
        lazy = getattr(target, "_lazy", None)
        if functional is None or lazy is None or lazy.region is not self.region or \
                lazy.value in self.region.viewed:
            return None
        out = self.record(dispatcher.ATEN[functional], args, kwargs)
        if out._lazy is None or out._lazy.region is not self.region or \
                out._shape != target._shape or not can_cast(out.dtype, target.dtype):
            return None  # (the node recorded is dead: nothing reads it)
        if out.dtype != target.dtype:
            out = self.record(dispatcher.ATEN[Op.TO_COPY], (out,), {"dtype": target.dtype})
        value = out._lazy.value
        target._lazy = LazyRef(self.region, value)
        self.region.alive[value] = weakref.ref(target)
        return target

    def _write(self, write: PendingWrite) -> None:
        """Run a waiting write on its now concrete tensors; keep it as a step the replay
        runs after the region, its tensors found again there: the region's outputs by
        their places, the others by their sources."""
        made = {id(t): i for i, t in enumerate(self.records[-1].outputs)} if self.records \
            else {}
        places: list = []

        def slot(v):
            if isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
                return ("items", type(v), [slot(x) for x in v])  # index_put_'s indices
            if not isinstance(v, Tensor) or v._wrapped:
                return ("value", v)
            if id(v) in made and id(v) in self.produced:
                places.append(made[id(v)])
                return ("out", len(places) - 1)
            if id(v) in self.known_sources:
                return ("source", self.known_sources[id(v)])
            self.note_input(v)  # (a tensor the replay cannot find: Python re-runs)
            return ("value", v)
        slots = [slot(v) for v in (*write.args, *write.kwargs.values())]
        call = _WriteStep(write.handle, len(write.args), tuple(write.kwargs), slots,
                          write.grad_enabled)
        tls = dispatcher.tls
        previous = tls.exclude
        tls.exclude = previous | TRACER_BIT
        try:
            call.apply(write.args, write.kwargs)
        finally:
            tls.exclude = previous
        self.steps.append(EagerStep(call, f"{write.handle.qualified_name} (an in-place write "
                                    "of a tensor outside the graph)", write.where,
                                    len(self.records), tensors=tuple(places), write=True))

    def note_grad_write(self, t: Tensor, value) -> None:
        """Python sets t.grad (outside a whole step): a replay would not."""
        if value is None or value._lazy is None:  # lazy: the engine under capture
            self.grad_writes.append(f"{tuple(t.shape)} {t.dtype.name} tensor")

    def break_and_run(self, handle, args, kwargs, reason: str):
        self.flush(reason, user_location())
        return handle.redispatch(DispatchKey.Tracer, *args, **kwargs)

    def run_eagerly(self, call, reason: str):
        """A graph break around `call()` (eager.tensor.run_eagerly): it runs outside
        capture, on the concrete tensors the flush made."""
        self.flush(reason, user_location())
        tls = dispatcher.tls
        previous = tls.exclude
        tls.exclude = previous | TRACER_BIT
        try:
            return call()
        finally:
            tls.exclude = previous

    # flushing -----------------------------------------------------------------------
    def flush(self, reason: str, where: str | None = None) -> None:
        """Compile and run the pending region; its live tensors become concrete; then
        the in-place writes that waited for it run."""
        writes, self.writes, self.written = self.writes, [], set()
        self._flush_region(reason, where)
        for write in writes:
            self._write(write)

    def _flush_region(self, reason: str, where: str | None) -> None:
        region = self.region
        self.region = Region(self)
        if where is not None:
            self.breaks.append(BreakRecord(reason, where))
            debug.banner("graph break", f"{reason} at {where}")
        live = region.live()
        differentiable = self._differentiable(region, live)
        if differentiable:  # eager autograd's records of the region give way to one node
            del live
            region.drop_autograd_records()
            live = region.live()
        if not live:
            return
        graph, inputs = region.graph([v for v, _ in live])
        needs_grad = tuple(t._requires_grad for t in inputs) if differentiable else None
        debug.banner(f"captured graph (ended by: {reason})", str(graph))
        from runtime.llvm.jit import compile_clock
        clock = compile_clock()
        start = time.perf_counter()
        run = self.compile_region(graph, needs_grad)
        grad_of = {id(t.grad): j for j, t in enumerate(inputs)
                   if t is not None and t.grad is not None}
        grads = tuple((grad_of[id(t)], i) for i, (_, t) in enumerate(live) if id(t) in grad_of)
        self.records.append(RegionRecord(graph, reason, inputs, [t for _, t in live],
                                         needs_grad, run, grads, len(self.steps)))
        compiling = time.perf_counter() - start
        phases = getattr(run, "phase_seconds", None)
        if phases and not getattr(run, "phases_counted", False):
            run.phases_counted = True  # a region found again costs nothing to compile
            self.seconds["passes"] += phases["passes"]
            compiling -= phases["passes"]
        self.seconds["codegen+JIT"] += compiling
        from compiler.backends.native import codegen_seconds
        start, codegen = time.perf_counter(), codegen_seconds()
        results = run_region(run, graph, inputs)
        kernels = codegen_seconds() - codegen  # kernels are generated on their first call
        self.seconds["codegen+JIT"] += kernels
        self.seconds["run"] += time.perf_counter() - start - kernels
        spent = compile_clock() - clock
        self.codegen = spent if self.codegen is None else self.codegen + spent
        for (_, t), r in zip(live, results):
            _become(t, r)
            self.produced.add(id(t))
            if differentiable:
                t.grad_fn, t.output_nr = r.grad_fn, r.output_nr
                t._set_requires_grad(r._requires_grad)
        for saved in region.saved:  # their tensors are concrete now: take today's version
            if saved.tensor is not None:  # (None: dropped for a compiled backward)
                saved.version = saved.tensor._storage.version


    def _differentiable(self, region: Region, live: list) -> bool:
        """Whether the region compiles its backward: grad mode was on throughout and
        one of its live values needs a gradient."""
        return self.compile_region is not None and self.grad_enabled and \
            not region.grad_mode_changed and any(t._requires_grad for _, t in live)


def run_region(run, graph: Graph, inputs: list) -> list:
    """Run a compiled region with capture off, as one profiler event."""
    tls = dispatcher.tls
    previous = tls.exclude
    tls.exclude = previous | TRACER_BIT
    try:
        if profile._active is None:
            return run(inputs)
        with record_function(f"kiln::{graph.name}", [list(t.shape) for t in inputs],
                             category="region"):  # (its native kernels: "kernel" events)
            return run(inputs)
    finally:
        tls.exclude = previous


def _become(t: Tensor, r: Tensor) -> None:
    """Turn lazy tensor `t` into a view of the concrete result `r`."""
    t._storage, t._shape, t._stride, t._offset = r._storage, r._shape, r._stride, r._offset
    t._np_cache = r._np_cache
    t._keys &= ~TRACER_BIT
    t._lazy = None


def _device_problem(handle, tensors: list, bound: dict) -> str | None:
    """Why an op cannot be captured for its devices, or None: a graph is on one device
    (the dispatcher already refused other mixes), so an op that joins a zero-dim CPU
    tensor to tensors on another device, or moves data to another device, runs
    eagerly."""
    devices = {str(t.device) for t in tensors if not t._wrapped}
    target = bound.get("device")
    if target is not None and devices and not any(  # "cuda" names the tensors' cuda:0
            str(target) in (d, d.split(":")[0]) for d in devices):
        return f"{handle.qualified_name} to {target}: copies between devices run eagerly"
    if len(devices) > 1:
        return (f"{handle.qualified_name} on {' and '.join(sorted(devices))}: a graph is "
                f"on one device")
    return None


def _as_list(v) -> list:
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _meta_arg(v):
    if isinstance(v, Tensor):
        return _meta_standin(v)
    if isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
        return type(v)(_meta_standin(x) if isinstance(x, Tensor) else x for x in v)
    return v


def _tracer_kernel(handle):
    def trace_op(*args, **kwargs):
        trace = active_trace()
        if trace is None:
            _materialize_args(args, kwargs)
            return handle.redispatch(DispatchKey.Tracer, *args, **kwargs)
        return trace.record(handle, args, kwargs)
    trace_op.__name__ = f"{handle.schema.name}_tracer"
    return trace_op


def _materialize_args(args, kwargs) -> None:
    for v in list(args) + list(kwargs.values()):
        for t in _as_list(v) if isinstance(v, (list, tuple, Tensor)) else []:
            if isinstance(t, Tensor) and t._lazy is not None:
                t._lazy.materialize(t)


def trace_to_graph(fn, schema, inputs: list, attrs, scalars: dict) -> Graph:
    """Capture `fn`, called as an op with `schema` would be, over stand-ins for the
    values `inputs` (scalar values stand in as the Python numbers they hold)."""
    trace = Trace(compile_region=None, known_sources={})
    region = trace.region
    named = dict(attrs)
    it = iter(inputs)
    args, kwargs = [], {}
    for a in schema.arguments:
        if a.type.base == "Tensor":
            v = next(it)
            if isinstance(v, tuple):
                value = [region.lazy_input(x.type) for x in v]
            elif v is None:
                value = None
            elif v in scalars:
                value = wrap_scalar(scalars[v])
                region.inputs.append(Value(f"in{len(region.inputs)}", v.type))
                region.input_tensors.append(None)  # keeps inputs aligned; never read
            else:
                value = region.lazy_input(v.type)
        else:
            value = named[a.name]
            value = list(value) if isinstance(value, tuple) and a.type.is_list else value
        (kwargs.__setitem__(a.name, value) if a.kwarg_only else args.append(value))
    token = start(trace)
    try:
        out = fn(*args, **kwargs)
    finally:
        stop(token)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    graph, _ = region.graph([region.value_for(t) for t in outs], keep_inputs=True)
    return graph


def _watch_data(t: Tensor) -> None:
    """The data watch (eager.tensor.set_data_watch) while any thread captures."""
    trace = getattr(_local, "trace", None)
    if trace is None or t._lazy is not None or dispatcher.tls.exclude & TRACER_BIT:
        return  # not capturing; a lazy tensor flushes itself; a region or kernel runs
    trace.note_data_access(t)


def _whole_step(call, what: str, nulls_grads_of, tensors):
    """The whole-step hook (eager.tensor.set_whole_step_hook) while any thread captures."""
    trace = getattr(_local, "trace", None)
    if trace is None or dispatcher.tls.exclude & TRACER_BIT:
        return call(*tensors)
    return trace.whole_step(call, what, nulls_grads_of, tensors)


def _run_eagerly(call, why: str):
    """The break hook (eager.tensor.set_break_hook) while any thread captures."""
    trace = getattr(_local, "trace", None)
    if trace is None or dispatcher.tls.exclude & TRACER_BIT:
        return call()
    return trace.run_eagerly(call, why)


def _watch_grad(t: Tensor, value) -> None:
    trace = getattr(_local, "trace", None)
    if trace is not None and not dispatcher.tls.exclude & TRACER_BIT:
        trace.note_grad_write(t, value)


_capturing = [0]  # threads capturing now: the hooks are set while there is one
_capturing_lock = threading.Lock()


def _count_capture(step: int) -> None:
    with _capturing_lock:
        _capturing[0] += step
        set_data_watch(_watch_data if _capturing[0] else None)
        set_whole_step_hook(*((_whole_step, _watch_grad) if _capturing[0] else (None, None)))
        set_break_hook(_run_eagerly if _capturing[0] else None)


def start(trace: Trace):
    """Make `trace` the thread's active capture; returns the token for `stop`."""
    prev = active_trace()
    _local.trace = trace
    _count_capture(1)
    tls = dispatcher.tls
    excluded = tls.exclude  # a capture inside a region's run or a whole step (a
    tls.exclude = excluded & ~TRACER_BIT  # decomposition traced while compiling) traces
    include = dispatcher.include_keys(DispatchKey.Tracer)
    include.__enter__()
    factories.set_creation_hook(trace.note_factory)
    return prev, include, excluded


def stop(token) -> None:
    prev, include, excluded = token
    include.__exit__(None, None, None)
    dispatcher.tls.exclude = excluded
    _local.trace = prev
    _count_capture(-1)
    factories.set_creation_hook(prev.note_factory if prev is not None else None)


dispatcher.register_fallback(DispatchKey.Tracer, _tracer_kernel)
