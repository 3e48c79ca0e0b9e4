"""A profiler in PyTorch's shape: `with profile(record_shapes=True) as prof: ...`, then
`prof.key_averages().table()` or `prof.export_chrome_trace(path)` (Perfetto loads it).

While a profile is active the dispatcher hands every op call to `_record`, which times
it and nests it under the op that called it (mm under matmul). When none is active the
dispatcher pays one global lookup per call.
"""
from __future__ import annotations

import contextlib
import enum
import json
import os
import threading
import time

from eager import dispatcher


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    CUDA = "CUDA"


class FunctionEvent:
    __slots__ = ("name", "input_shapes", "start_ns", "end_ns", "thread", "cpu_parent",
                 "cpu_children", "id")

    def __init__(self, name, input_shapes, start_ns, thread, parent, id_):
        self.name = name
        self.input_shapes = input_shapes
        self.start_ns = start_ns
        self.end_ns = start_ns
        self.thread = thread
        self.cpu_parent = parent
        self.cpu_children = []
        self.id = id_

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
                 profile_memory: bool = False):
        activities = activities or [ProfilerActivity.CPU]
        if ProfilerActivity.CUDA in activities:
            raise RuntimeError("CUDA activity profiling is not available: kiln has no CUDA "
                               "backend yet")
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
    def _span(self, name: str, shapes: list):
        stack = self._stack()
        parent = stack[-1] if stack else None
        with self._lock:
            ev = FunctionEvent(name, shapes, time.perf_counter_ns(), threading.get_ident(),
                               parent, len(self._events))
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
        return EventList([_Average(evs, group_by_input_shape) for evs in groups.values()])

    def export_chrome_trace(self, path: str) -> None:
        trace = []
        pid = os.getpid()
        for ev in self._events:
            trace.append({"name": ev.name, "ph": "X", "cat": "cpu_op", "pid": pid,
                          "tid": ev.thread, "ts": (ev.start_ns - self._t0) / 1e3,
                          "dur": (ev.end_ns - ev.start_ns) / 1e3,
                          "args": {"Input Dims": ev.input_shapes}})
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)


@contextlib.contextmanager
def record_function(name: str):
    """Mark a region by name in the active profile (no cost when none is active)."""
    prof = profile._active
    if prof is None:
        yield None
        return
    with prof._span(name, []) as ev:
        yield ev


class _Average:
    def __init__(self, events: list[FunctionEvent], with_shapes: bool):
        self.key = events[0].name
        self.count = len(events)
        self.input_shapes = events[0].input_shapes if with_shapes else None
        self.cpu_time_total = sum(e.cpu_time_total for e in events)
        self.self_cpu_time_total = sum(e.self_cpu_time_total for e in events)

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
    def table(self, sort_by: str | None = None, row_limit: int = 100) -> str:
        rows = list(self)
        if sort_by:
            rows.sort(key=lambda a: getattr(a, sort_by.replace("cpu_time_total", "cpu_time_total")),
                      reverse=True)
        rows = rows[:row_limit]
        total = sum(a.self_cpu_time_total for a in self) or 1.0
        shapes = any(a.input_shapes is not None for a in rows)
        name_w = max([len("Name")] + [len(a.key) for a in rows]) + 2
        head = ["Name".ljust(name_w), "Self CPU %".rjust(12), "Self CPU".rjust(12),
                "CPU total %".rjust(12), "CPU total".rjust(12), "CPU time avg".rjust(14),
                "# of Calls".rjust(12)]
        if shapes:
            head.append("  Input Shapes")
        line = "-" * len("".join(head))
        out = [line, "".join(head), line]
        for a in rows:
            cells = [a.key.ljust(name_w), f"{100 * a.self_cpu_time_total / total:.2f}%".rjust(12),
                     _us(a.self_cpu_time_total).rjust(12),
                     f"{100 * a.cpu_time_total / total:.2f}%".rjust(12),
                     _us(a.cpu_time_total).rjust(12), _us(a.cpu_time).rjust(14),
                     str(a.count).rjust(12)]
            if shapes:
                cells.append("  " + str(a.input_shapes))
            out.append("".join(cells))
        out.append(line)
        out.append(f"Self CPU time total: {_us(total)}")
        return "\n".join(out) + "\n"
