"""compile(): cached compiled entries behind guards, with graph breaks and eager fallback.

Each distinct guard key gets an entry, made by running the function once under capture.
An entry whose capture was one region with no break, no random numbers and no other
live tensor than its outputs *replays*: later calls check the key, read the inputs from
their sources and run the compiled graph without running Python. Any other entry re-runs
the Python under capture at each call; each region is compiled once and found again by
its text.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from compiler import capture, dynamic, guards
from compiler.compiled_backward import TrainingRegion
from eager import dispatcher, factories
from eager.autograd.grad_mode import no_grad
from eager.profiler import profile
from compiler.backends import get_backend
from eager.tensor import Tensor

RECOMPILE_LIMIT = 8   # captures that compiled something, before running eagerly
ENTRY_LIMIT = 64      # guard keys kept (the oldest is dropped, captured again if called)
REGION_LIMIT = 256    # region texts kept, each with what it runs


@dataclass
class Entry:
    key: tuple
    mode: str                      # "replay" or "python"
    why_python: str = ""
    run: object = None             # replay: the compiled region
    graph: object = None
    sources: list = field(default_factory=list)
    out_tree: object = None
    out_slots: list = field(default_factory=list)  # ("graph", i) or ("value", v)
    regions: list = field(default_factory=list)
    runs: list = field(default_factory=list)  # per region, what it was compiled to
    needs_grad: tuple | None = None  # replay: per graph input, when backward is compiled
    breaks: list = field(default_factory=list)
    calls: int = 0
    seconds: dict = field(default_factory=dict)
    codegen: object = None         # runtime.llvm.jit.CompileClock of the first call's kernels
    direct: object = None          # replay as one kernel call on the arguments
    steps: list = field(default_factory=list)  # capture.EagerStep: whole steps, replayed
    program: list = field(default_factory=list)  # replay: ReplayRegion or (step, tensors)


class CompileCheckError(AssertionError):
    pass


class CompiledFunction:
    recompile_limit = RECOMPILE_LIMIT

    def __init__(self, fn, *, backend="native", fullgraph: bool = False,
                 dynamic: bool | None = None, check: bool = False, module=None):
        self.fn = fn
        self.module = module
        self.backend = get_backend(backend) if isinstance(backend, str) else backend
        self.fullgraph = fullgraph
        # None: a region's sizes become symbolic once two shapes share its skeleton;
        # True: probed at the first call; False: every shape compiled for its sizes
        self.dynamic = dynamic
        self.check_calls = 3 if check else 0
        self.guards = guards.GuardSet(fn, module)
        self.entries: dict[tuple, Entry] = {}
        self.history: list[str] = []
        self.region_cache: dict[str, object] = {}
        self.families: dict[tuple, dynamic.Family] = {}  # compiled graphs by skeleton
        self.compiles = 0     # regions compiled (not found again, not an instance)
        self.recompiles = 0   # entries whose capture compiled a region
        self.gave_up = False
        self._lock = threading.RLock()
        functools.update_wrapper(self, fn)

    # calling ------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if self.gave_up:
            return self.fn(*args, **kwargs)
        key, leaves = self.guards.key_and_leaves(args, kwargs)
        entry = self.entries.get(key)
        if entry is None:
            with self._lock:
                entry = self.entries.get(key)
                if entry is None:
                    if self.recompiles >= self.recompile_limit:
                        return self._give_up(key, args, kwargs)
                    return self._first_call(key, args, kwargs)
        entry.calls += 1
        if entry.direct is not None and not self.check_calls and profile._active is None \
                and not dispatcher.tls.include:
            return entry.direct(args)[0]  # one kernel over the arguments as given
        drawn_from = factories.get_rng_state() if self.check_calls else None
        out = self._replay(entry, leaves) if entry.mode == "replay" else \
            self._run_python(entry, args, kwargs)[0]
        if self.check_calls:
            self._check(entry, out, args, kwargs, drawn_from)
        return out

    def _give_up(self, key, args, kwargs):
        self.gave_up = True
        last = self._why_new(key, args, kwargs)
        warnings.warn(f"kiln.compile: {self.__name__} was recompiled {RECOMPILE_LIMIT} times "
                      f"(last because {last}); running it eagerly from now on", stacklevel=3)
        return self.fn(*args, **kwargs)

    def _why_new(self, key, args, kwargs) -> str:
        if not self.entries:
            return "first call"
        last = list(self.entries.values())[-1].key
        return self.guards.difference(last, key, self._arg_paths(args, kwargs))

    @staticmethod
    def _arg_paths(args, kwargs) -> list[str]:
        leaves: list = []
        guards.flatten((args, kwargs), "arg", leaves)
        return [_readable_path(p) for p, _ in leaves]

    def _first_call(self, key, args, kwargs):
        reason = self._why_new(key, args, kwargs)
        if self.entries:
            self.history.append(f"entry {len(self.entries) + 1}: {reason}")
        entry = Entry(key=key, mode="python")
        drawn_from = factories.get_rng_state() if self.check_calls else None
        compiled = self.compiles
        out, trace = self._run_python(entry, args, kwargs)
        if self.dynamic and not trace.steps and self._probe(args, kwargs):
            self._adopt_symbolic(entry, trace)  # (probing would run whole steps again)
        self._plan(entry, trace, out)
        self.recompiles += self.compiles > compiled
        entry.calls = 1
        if len(self.entries) >= ENTRY_LIMIT:  # the oldest is captured again if called
            del self.entries[next(iter(self.entries))]
        self.entries[key] = entry
        if self.check_calls:
            self._check(entry, out, args, kwargs, drawn_from)
        return out

    def _run_python(self, entry: Entry, args, kwargs):
        known = self.guards.known_sources(args, kwargs)
        trace = capture.Trace(self._compile_region, known)
        start = time.perf_counter()
        token = capture.start(trace)
        try:
            out = self.fn(*args, **kwargs)
            leaves: list = []
            guards.flatten(out, "out", leaves)
            trace.flush("return")
        finally:
            capture.stop(token)
        trace.seconds["trace"] = time.perf_counter() - start - sum(
            v for k, v in trace.seconds.items() if k != "trace")
        if trace.breaks and self.fullgraph:
            b = trace.breaks[0]
            raise RuntimeError(f"kiln.compile(fullgraph=True): graph break in "
                               f"{self.__name__}: {b.reason} at {b.where}")
        if not entry.regions:
            entry.regions = [r.graph for r in trace.records]
            entry.runs = [r.run for r in trace.records]
            entry.breaks = list(trace.breaks)
            entry.steps = list(trace.steps)
            entry.seconds = dict(trace.seconds)
            entry.codegen = trace.codegen
        return out, trace

    # dynamic sizes ------------------------------------------------------------------
    def _probe(self, args, kwargs) -> bool:
        """dynamic=True: capture again with dim 0 of the tensor arguments one larger (see
        dynamic.probe_arguments), so that the regions' sizes become symbolic at the first
        call where the graphs allow (the probe's own results are dropped). Whether a
        probe ran."""
        for probe in dynamic.probe_arguments(args, kwargs):
            try:
                self._run_python(Entry(key=None, mode="python"), *probe)
            except Exception as e:  # the function cannot take those sizes
                self.history.append(f"dynamic=True: probing other sizes failed ({e})")
                continue
            return True
        return False

    def _adopt_symbolic(self, entry: Entry, trace) -> None:
        """After probing: the first call's regions run the symbolic code they instantiate
        (compiled for the probe), not the code compiled for their own sizes."""
        for record in trace.records:
            found = dynamic.instantiated(self.families.get(dynamic.skeleton(record.graph)),
                                         record.graph) if record.needs_grad is None else None
            if found is not None:
                record.run = self.region_cache[str(record.graph)] = found[1]
        entry.runs = [r.run for r in trace.records]

    def _compile_region(self, graph, needs_grad: tuple | None = None):
        """The region compiled (found again by its text); with `needs_grad` (per input,
        whether it needs a gradient) as a compiled forward and backward pair. Without it,
        a region of sizes not seen before may run the code of a symbolic graph it
        instantiates (compiler/dynamic.py)."""
        text = str(graph)
        key = text if needs_grad is None else (text, needs_grad)
        run = self.region_cache.get(key)
        if run is not None:
            return run
        with self._lock:
            run = self.region_cache.get(key)
            if run is None:
                run = self._compile_new(graph, needs_grad)
                if len(self.region_cache) >= REGION_LIMIT:
                    del self.region_cache[next(iter(self.region_cache))]
                self.region_cache[key] = run
        return run

    def _compile_new(self, graph, needs_grad):
        if needs_grad is not None:  # compiled backward graphs are made for one set of
            self.compiles += 1       # sizes; a training step's grads and state, too
            return TrainingRegion(graph, needs_grad, self.backend)
        if self.dynamic is False:
            self.compiles += 1
            return self.backend.compile(graph)
        run, compiled = dynamic.compile_sizes(self.families, graph, self.backend.compile,
                                              self.history)
        self.compiles += compiled
        return run

    # replay -------------------------------------------------------------------------
    def _plan(self, entry: Entry, trace: capture.Trace, out) -> None:
        """Decide whether the entry can replay without Python, and record how."""
        leaves: list = []
        tree = guards.flatten(out, "out", leaves)
        why = _why_not_replayable(trace, leaves)
        if why:
            entry.why_python = why
            return
        record = trace.records[0] if trace.records else None
        program, produced, first = [], {}, {}  # produced: id -> place among all results
        for k, rec in enumerate(trace.records):
            program += [(s, tuple(first[k - 1] + o for o in s.tensors))
                        for s in trace.steps if s.after_regions == k]
            sources = []
            for t in rec.input_tensors:
                src = trace.known_sources.get(id(t))
                sources.append(src if src is not None else ("constant", t))
            program.append(ReplayRegion(
                rec.run, rec.graph, sources, rec.needs_grad, rec.grads,
                tuple((i, t.grad_fn) for i, t in enumerate(rec.outputs)
                      if rec.needs_grad is None and t.requires_grad)))
            first[k] = len(produced)
            produced.update((id(t), first[k] + i) for i, t in enumerate(rec.outputs))
        last = len(trace.records)
        program += [(s, tuple(first[last - 1] + o for o in s.tensors))
                    for s in trace.steps if s.after_regions == last]
        slots = []
        for _, v in leaves:
            if isinstance(v, Tensor) and id(v) in produced:
                slots.append(("graph", produced[id(v)]))
            elif isinstance(v, Tensor) and id(v) in trace.known_sources:
                slots.append(("source", trace.known_sources[id(v)]))
            else:
                slots.append(("value", v))
        entry.mode = "replay"
        entry.program = program
        entry.out_tree, entry.out_slots = tree, slots
        if record is None:
            return
        entry.graph, entry.needs_grad, entry.run = record.graph, record.needs_grad, record.run
        entry.sources = program[-1].sources if len(program) == 1 else []
        if len(program) > 1 or program[0].grad_slots or program[0].used_history:
            return  # more than one graph's results: no dynamic sizes, no direct call
        sources = entry.sources
        if tree == 0 and slots == [("graph", 0)] and len(sources) == len(
                leaves_of_args(entry.key)) and all(s[0] == "arg" for s in sources) and \
                sorted(sources) == [("arg", i) for i in range(len(sources))]:  # each once
            entry.direct = _direct(entry.run, [index for _, index in sources])

    def _replay(self, entry: Entry, leaves: list):
        results = []
        for action in entry.program:
            if type(action) is ReplayRegion:
                results += action(leaves)
            else:  # a whole step, on the results it took at capture
                step, tensors = action
                if step.write:  # (its tensors found again from the arguments too)
                    step.call(*[results[o] for o in tensors], leaves=leaves)
                else:
                    step.call(*[results[o] for o in tensors])
        if entry.out_tree == 0:  # a single result
            return self._slot(entry.out_slots[0], results, leaves)
        out = [self._slot(slot, results, leaves) for slot in entry.out_slots]
        return guards.unflatten(entry.out_tree, out)

    @staticmethod
    def _slot(slot, results, leaves):
        kind, v = slot
        if kind == "graph":
            return results[v]
        return guards.resolve(v, leaves) if kind == "source" else v

    # check=True ---------------------------------------------------------------------
    def _check(self, entry: Entry, out, args, kwargs, drawn_from) -> None:
        """Run the function again eagerly, in float64, and compare the outputs. The eager
        run draws random numbers from where the compiled call started (`drawn_from`, the
        default generator's state then), so dropout's masks agree, and leaves the
        generator where the compiled call left it. A function that takes whole steps (an
        optimiser's step, zero_grad, backward) changes state besides its outputs: running
        it again would take them twice, so it is refused, after this call took them
        once."""
        self.check_calls -= 1
        whole = [s for s in entry.steps if not s.write]  # (writes are undone below)
        if whole:
            self.check_calls = 0
            steps = ", ".join(dict.fromkeys(s.what for s in whole))
            raise CompileCheckError(
                f"kiln.compile(check=True): {self.__name__} takes whole steps ({steps}) that "
                f"change state besides its outputs; check=True compares by running the "
                f"function again eagerly, which would take them twice (this call took them "
                f"once, compiled). Check a function without them (the model's forward and "
                f"loss), or compare with an eager run by hand")
        wide = [_widen(a) for a in args]
        random_state = factories.get_rng_state()
        factories.set_rng_state(drawn_from)
        with _undoing_writes():  # a module's running statistics, counters: written once
            try:
                expected = self.fn(*wide, **{k: _widen(v) for k, v in kwargs.items()})
            except RuntimeError:
                # what the function reads besides its arguments (a module's parameters)
                # stays float32: compare at the arguments' own precision
                expected = self.fn(*args, **kwargs)
            finally:
                factories.set_rng_state(random_state)
        got_leaves, want_leaves = [], []
        guards.flatten(out, "out", got_leaves)
        guards.flatten(expected, "out", want_leaves)
        for (path, got), (_, want) in zip(got_leaves, want_leaves):
            if not isinstance(got, Tensor):
                continue
            a = got.detach()._host_np().astype(np.float64)
            b = want.detach()._host_np().astype(np.float64)
            tol = 1e-4 if got.dtype.name in ("float32", "float16") else 1e-9
            if a.shape != b.shape or not np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True):
                diff = f"shape {a.shape} vs {b.shape}" if a.shape != b.shape else \
                    f"max abs diff {np.nanmax(np.abs(a - b)):.3g}"
                graphs = "\n".join(str(g) for e in self.entries.values() for g in e.regions)
                raise CompileCheckError(f"kiln.compile(check=True): {self.__name__} output "
                                        f"{_readable_path(path)} differs from eager execution "
                                        f"({diff}); compiled graphs:\n{graphs}")

    # explain ------------------------------------------------------------------------
    def explain(self) -> str:
        from compiler.explain import explain
        return explain(self)


@contextlib.contextmanager
def _undoing_writes():
    """Inside the block every tensor an op writes in place (BatchNorm's running_mean.mul_,
    num_batches_tracked.add_) keeps a copy of its values from before its first write, and
    gets them back after: check=True's eager run of the function leaves no state behind.
    Writes outside ops (.data =, .grad =) are not seen; whole steps are refused before."""
    previous, saved, seen = dispatcher._recorder, [], set()

    def record(handle, args, kwargs):
        for i in handle._mutated:
            t = args[i] if i < len(args) else kwargs.get(handle.schema.arguments[i].name)
            if isinstance(t, Tensor) and id(t) not in seen:
                seen.add(id(t))
                saved.append((t, t.detach().clone()))
        return previous(handle, args, kwargs) if previous else handle.call(args, kwargs)
    dispatcher.set_recorder(record)
    try:
        yield
    finally:
        dispatcher.set_recorder(previous)
        with no_grad():
            for t, values in reversed(saved):  # the earliest copy wins where views overlap
                t.copy_(values)


@dataclass
class ReplayRegion:
    """One compiled region of a replaying entry: where its inputs come from and what its
    results become besides results."""
    run: object
    graph: object
    sources: list
    needs_grad: tuple | None
    grad_slots: tuple = ()   # (input, output): the output becomes the input's .grad
    used_history: tuple = () # (output, its grad_fn): history a backward in the call freed

    def __call__(self, leaves: list) -> list:
        inputs = [leaves[s[1]] if s[0] == "arg" else guards.resolve(s, leaves)
                  for s in self.sources]
        if self.needs_grad is None:  # no result needs history: the interpreter records
            with no_grad():          # none (a .grad stays without one)
                results = capture.run_region(self.run, self.graph, inputs)
        else:
            results = capture.run_region(self.run, self.graph, inputs)
        for i, o in self.grad_slots:  # as the engine left them: zero_grad set None
            inputs[i].grad = results[o]
        for o, node in self.used_history:
            results[o].grad_fn = node  # freed: a second backward raises as eagerly
            results[o]._set_requires_grad(True)
        return results


def _direct(run, order: list[int]):
    """The call of a region that is one native kernel on the arguments themselves, graph
    input i being argument order[i]; None for other regions."""
    on_arguments = getattr(run, "on_arguments", None)
    return None if on_arguments is None else on_arguments(order)


def leaves_of_args(key: tuple) -> tuple:
    """The argument leaves a guard key describes (its second part)."""
    return key[1]


def _why_not_replayable(trace: capture.Trace, out_leaves) -> str:
    if trace.breaks:
        return f"{len(trace.breaks)} graph break(s)"
    if trace.random:
        return "it draws random numbers"
    if trace.untracked_inputs:
        return f"it reads a tensor kiln cannot find again ({trace.untracked_inputs[0]})"
    returned_value = next((s.what for s in trace.steps if not s.returned_none), None)
    if returned_value:
        return f"{returned_value} returned a value"
    if trace.grad_writes:
        return f"Python sets the .grad of a {trace.grad_writes[0]} (not in a whole step)"
    foreign = next((s.what for s in trace.steps if s.tensors is None), None)
    if foreign:
        return f"{foreign} takes a tensor its graph did not make"
    returned = {id(v) for _, v in out_leaves if isinstance(v, Tensor)}
    unreturned = []  # results neither returned nor read after their region
    for k, record in enumerate(trace.records):
        if record.needs_grad is None and any(t.requires_grad and not _used_up(t)
                                             for t in record.outputs):
            return "its results need eager autograd history (grad mode changed inside it)"
        kept = returned | {id(record.outputs[o]) for _, o in record.grads} | {
            id(record.outputs[o]) for s in trace.steps if s.after_regions == k + 1 and s.write
            for o in s.tensors}  # read by the writes after it
        unreturned += [t for t in record.outputs if id(t) not in kept]
        why = _why_grads_not_replayable(trace, record)
        if why:
            return why
    if unreturned and not _dropped(trace, unreturned):
        return "it keeps tensors besides its outputs (autograd history or side effects)"
    return ""


def _dropped(trace: capture.Trace, results: list) -> bool:
    """Whether nothing holds `results` now the function has returned but the trace's
    own records: temporaries it let go (the logits of `_, loss = model(x, y)`), which a
    replay computes and lets go too. One walk of the heap finds their referrers; any
    other (an attribute, a list, a closure, autograd's saved tensors) keeps them."""
    ours = {id(record.outputs) for record in trace.records} | {id(results)}
    return all(id(r) in ours for r in gc.get_referrers(*results))


def _used_up(t: Tensor) -> bool:
    """Whether t's autograd history was freed by a backward that ran inside the call."""
    return getattr(t.grad_fn, "_released", False)


def _why_grads_not_replayable(trace: capture.Trace, record) -> str:
    """A replay sets the .grad the region's backward computed: that is eager's result
    only where a whole step of the same call (zero_grad) set that .grad to None before
    the region, and nothing replaced it after."""
    nulled = set().union(*(s.nulls for s in trace.steps[:record.after_steps]))
    for i, o in record.grads:
        p = record.input_tensors[i]
        if id(p) not in nulled:
            return (f"the gradient of a {tuple(p.shape)} {p.dtype.name} tensor would "
                    f"accumulate into what it held before the call (no "
                    f"zero_grad(set_to_none=True) before backward)")
        if p.grad is not record.outputs[o]:
            return f"Python replaced the .grad of a {tuple(p.shape)} tensor after backward"
    return ""


def _widen(v):
    if isinstance(v, Tensor) and v.dtype.name in ("float32", "float16"):
        w = v.detach().double()
        return w.requires_grad_(v.requires_grad) if v.requires_grad else w
    if isinstance(v, (list, tuple)):
        return type(v)(_widen(x) for x in v)
    return v


def _readable_path(path: str) -> str:
    if path.startswith("arg[0]"):
        return "args" + path[len("arg[0]"):]
    if path.startswith("arg[1]"):
        return "kwargs" + path[len("arg[1]"):]
    return path
