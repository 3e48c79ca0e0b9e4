"""A profiler in PyTorch's shape: `with profile(record_shapes=True) as prof: ...`, then
`prof.key_averages().table()` or `prof.export_chrome_trace(path)` (Perfetto loads it).

While a profile is active the dispatcher hands every op call to `_record`, which times
it and nests it under the op that called it (mm under matmul). When none is active the
dispatcher pays one global lookup per call. The autograd engine marks each backward
node it runs as a region, `autograd::engine::evaluate_function: MmBackward0`, as
PyTorch's does, so the backward pass shows its ops under the node that called them.

CUDA kernel launches are events too (`cuda::launch <kernel>`, eager/backends/cuda's
device.py). Asked for CUDA activity (`activities=[..., ProfilerActivity.CUDA]` or
`use_cuda=True`), each launch is timed on the device between two CUDA events, waited
for: `device_time` of the launch's event, `cuda_time_total` of the ops above it, the CUDA
columns of the table. That synchronises every launch, as timing must. Without CUDA
tensors nothing is timed and the CUDA times are 0.
"""
from __future__ import annotations

import contextlib
import enum
import os
import threading
import time

from eager import dispatcher


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    CUDA = "CUDA"


class FunctionEvent:
    __slots__ = ("name", "input_shapes", "start_ns", "end_ns", "thread", "cpu_parent",
                 "cpu_children", "id", "category", "device_time", "flops", "bytes")

    def __init__(self, name, input_shapes, start_ns, thread, parent, id_, category="cpu_op"):
        self.name = name
        self.category = category  # "cpu_op" an op, "user_annotation" a record_function,
        # "region" a compiled region, "kernel" one of its native kernels
        self.input_shapes = input_shapes
        self.start_ns = start_ns
        self.end_ns = start_ns
        self.thread = thread
        self.cpu_parent = parent
        self.cpu_children = []
        self.id = id_
        self.device_time = 0.0  # microseconds on the device: a timed kernel launch's
        self.flops = 0  # floating-point operations, where known (a compiled kernel's)
        self.bytes = 0  # bytes its inputs and outputs hold, where known (kiln's own)

    @property
    def key(self) -> str:
        return self.name

    @property
    def cpu_time_total(self) -> float:
        """Microseconds, children included."""
        return (self.end_ns - self.start_ns) / 1e3

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(c.cpu_time_total for c in self.cpu_children)

    @property
    def cuda_time_total(self) -> float:
        """Microseconds on the device of this event's launches and its children's."""
        return self.device_time + sum(c.cuda_time_total for c in self.cpu_children)

    @property
    def self_cuda_time_total(self) -> float:
        return self.device_time

    def __repr__(self) -> str:
        return (f"<FunctionEvent name={self.name} input_shapes={self.input_shapes} "
                f"cpu_time={self.cpu_time_total:.3f}us>")


def _shapes(args, kwargs) -> list:
    shapes = []
    for v in list(args) + list(kwargs.values()):
        shape = getattr(v, "shape", None)
        shapes.append(list(shape) if shape is not None and hasattr(v, "_keys") else [])
    return shapes


class profile:  # noqa: N801 - PyTorch's name
    _active: profile | None = None

    def __init__(self, activities=None, record_shapes: bool = False, with_stack: bool = False,
                 profile_memory: bool = False, use_cuda: bool = False):
        activities = activities or [ProfilerActivity.CPU]
        self.use_cuda = use_cuda or ProfilerActivity.CUDA in activities
        self.record_shapes = record_shapes
        self._events: list[FunctionEvent] = []
        self._local = threading.local()
        self._lock = threading.Lock()
        self._t0 = 0

    def __enter__(self):
        if profile._active is not None:
            raise RuntimeError("Profiler is already enabled on this thread")
        profile._active = self
        self._t0 = time.perf_counter_ns()
        dispatcher.set_recorder(self._record)
        return self

    def __exit__(self, *exc):
        dispatcher.set_recorder(None)
        profile._active = None
        return False

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    @contextlib.contextmanager
    def _span(self, name: str, shapes: list, category: str = "cpu_op"):
        stack = self._stack()
        parent = stack[-1] if stack else None
        with self._lock:
            ev = FunctionEvent(name, shapes, time.perf_counter_ns(), threading.get_ident(),
                               parent, len(self._events), category)
            self._events.append(ev)
        if parent is not None:
            parent.cpu_children.append(ev)
        stack.append(ev)
        try:
            yield ev
        finally:
            ev.end_ns = time.perf_counter_ns()
            stack.pop()

    def _record(self, handle, args, kwargs):
        shapes = _shapes(args, kwargs) if self.record_shapes else []
        with self._span(handle.name, shapes):
            return handle.call(args, kwargs)

    # results ----------------------------------------------------------------------
    def events(self) -> list[FunctionEvent]:
        return list(self._events)

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        groups: dict = {}
        for ev in self._events:
            key = (ev.name, str(ev.input_shapes)) if group_by_input_shape else (ev.name,)
            groups.setdefault(key, []).append(ev)
        return EventList([_Average(evs, group_by_input_shape) for evs in groups.values()],
                         use_cuda=self.use_cuda)

    def export_chrome_trace(self, path: str) -> None:
        import json  # here: `import eager` need not load it (~1 ms)
        trace = []
        pid = os.getpid()
        for ev in self._events:
            trace.append({"name": ev.name, "ph": "X", "cat": ev.category, "pid": pid,
                          "tid": ev.thread, "ts": (ev.start_ns - self._t0) / 1e3,
                          "dur": (ev.end_ns - ev.start_ns) / 1e3,
                          "args": {"Input Dims": ev.input_shapes,
                                   **({"device time (us)": ev.device_time}
                                      if ev.device_time else {})}})
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)


@contextlib.contextmanager
def record_function(name: str, input_shapes: list | None = None,
                    category: str = "user_annotation"):
    """Mark a region by name in the active profile (no cost when none is active)."""
    prof = profile._active
    if prof is None:
        yield None
        return
    shapes = input_shapes if input_shapes is not None and prof.record_shapes else []
    with prof._span(name, shapes, category) as ev:
        yield ev


class _Average:
    def __init__(self, events: list[FunctionEvent], with_shapes: bool):
        self.key = events[0].name
        self.count = len(events)
        self.input_shapes = events[0].input_shapes if with_shapes else None
        self.cpu_time_total = sum(e.cpu_time_total for e in events)
        self.self_cpu_time_total = sum(e.self_cpu_time_total for e in events)
        self.cuda_time_total = sum(e.cuda_time_total for e in events)
        self.self_cuda_time_total = sum(e.self_cuda_time_total for e in events)

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / self.count


def _us(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.3f}s"
    if x >= 1e3:
        return f"{x / 1e3:.3f}ms"
    return f"{x:.3f}us"


class EventList(list):
    _SORT_KEYS = ("cpu_time", "cpu_time_total", "self_cpu_time_total", "count",
                  "cuda_time_total", "self_cuda_time_total")

    def __init__(self, averages=(), use_cuda: bool = False):
        super().__init__(averages)
        self.use_cuda = use_cuda  # the table shows the CUDA columns

    def table(self, sort_by: str | None = None, row_limit: int = 100) -> str:
        """PyTorch's summary table: one row per key, times in us/ms/s, two spaces apart."""
        rows = list(self)
        if sort_by:
            if sort_by not in self._SORT_KEYS:
                raise ValueError(f"sort_by must be one of {', '.join(self._SORT_KEYS)}, "
                                 f"got {sort_by!r}")
            rows.sort(key=lambda a: getattr(a, sort_by), reverse=True)
        rows = rows[:row_limit]
        total = sum(a.self_cpu_time_total for a in self) or 1.0
        titles = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
                  "# of Calls"]
        body = [[a.key, f"{100 * a.self_cpu_time_total / total:.2f}%",
                 _us(a.self_cpu_time_total), f"{100 * a.cpu_time_total / total:.2f}%",
                 _us(a.cpu_time_total), _us(a.cpu_time), str(a.count)] for a in rows]
        cuda_total = sum(a.self_cuda_time_total for a in self) or 1.0
        if self.use_cuda:
            titles[-1:-1] = ["Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"]
            for cells, a in zip(body, rows):
                cells[-1:-1] = [_us(a.self_cuda_time_total),
                                f"{100 * a.self_cuda_time_total / cuda_total:.2f}%",
                                _us(a.cuda_time_total), _us(a.cuda_time_total / a.count)]
        if any(a.input_shapes is not None for a in rows):
            titles.append("Input Shapes")
            for cells, a in zip(body, rows):
                cells.append(str(a.input_shapes))
        widths = [max(len(r[i]) for r in [titles] + body) for i in range(len(titles))]

        def fmt(cells):
            # the name (and the shapes) read left to right; numbers line up on the right
            out = [c.ljust(w) if i == 0 or titles[i] == "Input Shapes" else c.rjust(w)
                   for i, (c, w) in enumerate(zip(cells, widths))]
            return "  ".join(out).rstrip()
        line = "-" * (sum(widths) + 2 * (len(widths) - 1))
        out = [line, fmt(titles), line] + [fmt(cells) for cells in body]
        out += [line, f"Self CPU time total: {_us(total)}"]
        if self.use_cuda:
            out.append(f"Self CUDA time total: {_us(sum(a.self_cuda_time_total for a in self))}")
        return "\n".join(out) + "\n"
