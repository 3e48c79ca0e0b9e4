"""Running one benchmark case: check every contender's answer, then time them in turns.

A Case is one piece of work done by several contenders (its Impls). Running it:
1. build each available Impl (inputs are made here, outside any timing);
2. correctness gate: call each once and compare with the float64 numpy answer; a wrong
   answer is reported as FAILED and never timed;
3. calibrate how many calls make one batch of about `batch_s` seconds, per Impl;
4. warm-up and timed rounds, alternating A B C, B C A, C A B ..., so that drift of a
   shared, noisy machine (clock changes, neighbours) hits every contender alike, and
   so does following any one contender (whose idle threads may still hold cores).
Each round gives one time per call; results report the median and the min-max spread.
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# Throughput units: the divisor that turns `work` per second into the unit.
UNITS = {"GFLOP/s": 1e9, "GB/s": 1e9, "steps/s": 1.0, "ops/s": 1.0}


@dataclass
class Impl:
    """One contender's way of doing a case. `build()` makes its inputs and returns the
    zero-argument function that is timed; `context` (optional) is entered around every
    batch of calls, e.g. an active profiler. `full_only`: why it runs in the full suite
    alone (a cost of many seconds that --quick, the README's main job, leaves out)."""
    contender: str
    build: Callable[[], Callable[[], Any]]
    label: str = ""
    context: Callable[[], Any] | None = None
    full_only: str = ""

    def __post_init__(self):
        self.label = self.label or self.contender


@dataclass
class Case:
    """`expected()` gives the float64 numpy answer (None: nothing to check). `work` is
    the amount one call does in the unit's base quantity (flop, byte, step, op); unit ''
    means no throughput. `reference` lists labels to compare against, first available
    wins (default: the first Impl that ran). A self-timed Impl returns its own duration
    in seconds, for work timed elsewhere (e.g. inside a fresh process)."""
    name: str
    impls: list[Impl]
    expected: Callable[[], Any] | None = None
    unit: str = "ops/s"
    work: float = 1.0
    reference: tuple[str, ...] = ()
    self_timed: bool = False
    rounds: int | None = None  # self-timed rounds, where not the settings' (heavy ones)
    rtol: float = 1e-4
    atol: float = 1e-5

    def __post_init__(self):
        labels = [impl.label for impl in self.impls]
        if len(set(labels)) != len(labels):
            raise ValueError(f"case {self.name!r}: two Impls share a label in {labels}")


@dataclass(frozen=True)
class Settings:
    rounds: int
    batch_s: float  # target duration of one batch of calls
    warmup_rounds: int
    self_timed_rounds: int
    number: int | None = None  # calls per batch; None: calibrate to batch_s
    quick: bool = False  # suites pick small sizes


QUICK = Settings(rounds=7, batch_s=0.002, warmup_rounds=1, self_timed_rounds=3, quick=True)
FULL = Settings(rounds=21, batch_s=0.02, warmup_rounds=3, self_timed_rounds=9)


@dataclass
class Outcome:
    """What happened to one Impl: ok (timed), skipped, failed (wrong answer) or error."""
    label: str
    contender: str
    status: str
    reason: str = ""
    times: list[float] = field(default_factory=list)  # seconds per call, one per round

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class CaseResult:
    case: Case
    outcomes: list[Outcome]

    @property
    def reference(self) -> Outcome | None:
        timed = {o.label: o for o in self.outcomes if o.status == "ok"}
        for label in self.case.reference:
            if label in timed:
                return timed[label]
        return next(iter(timed.values()), None)

    def ratio(self, outcome: Outcome) -> float | None:
        """Time relative to the reference: 2.0 means twice as slow."""
        ref = self.reference
        if outcome.status != "ok" or ref is None:
            return None
        return outcome.median / ref.median

    def throughput(self, outcome: Outcome) -> float | None:
        if outcome.status != "ok" or self.case.unit not in UNITS:
            return None
        return self.case.work / outcome.median / UNITS[self.case.unit]


@dataclass
class SuiteResult:
    name: str
    description: str
    status: str  # "ran" or "skipped"
    reason: str = ""
    cases: list[CaseResult] = field(default_factory=list)
    notes: str = ""

    @property
    def failures(self) -> int:
        return sum(o.status in ("failed", "error") for c in self.cases for o in c.outcomes)


def run_suite(suite, lineup, settings: Settings, progress=None) -> SuiteResult:
    """Every case of a registered suite, or the reason it is skipped."""
    result = SuiteResult(suite.name, suite.description, "ran")
    reason = suite.why_skipped()
    if reason:
        result.status, result.reason = "skipped", reason
        return result
    cases = suite.cases(settings.quick)
    for i, case in enumerate(cases):
        if progress is not None:
            progress.step(f"{suite.name} {i + 1}/{len(cases)}: {case.name}")
        result.cases.append(run_case(case, lineup, settings, progress))
    result.notes = suite.notes(settings.quick) if hasattr(suite, "notes") else ""
    return result


def run_case(case: Case, lineup, settings: Settings, progress=None) -> CaseResult:
    outcomes, runnable = [], []
    expected = case.expected() if case.expected else None
    for impl in case.impls:
        outcome = Outcome(impl.label, impl.contender, "ok")
        outcomes.append(outcome)
        reason = lineup.why_skipped(impl.contender) or (
            settings.quick and impl.full_only and f"left out of --quick: {impl.full_only}")
        if reason:
            outcome.status, outcome.reason = "skipped", reason
            continue
        _note(progress, f"checking {impl.label}")
        fn = _guarded(outcome, impl.build)
        if fn is None:
            continue
        problem = _guarded(outcome, lambda: _check(impl, fn, expected, case))
        if not problem and outcome.status == "ok" and not case.self_timed:
            _guarded(outcome, lambda: settle(fn, impl.context))
        if problem:
            outcome.status, outcome.reason = "failed", problem
        elif outcome.status == "ok":
            runnable.append((outcome, impl, fn))
    if runnable:
        _time_in_turns(case, runnable, settings, progress)
    return CaseResult(case, outcomes)


def _guarded(outcome: Outcome, step: Callable[[], Any]):
    """Run a step of one Impl; an exception makes it an error outcome, not a crash."""
    try:
        return step()
    except Exception as e:  # noqa: BLE001 - reported as this contender's error
        outcome.status, outcome.reason = "error", f"{type(e).__name__}: {e}"
        return None


def settle(fn: Callable[[], Any], context=None, limit: int = 5) -> None:
    """Call `fn` until its calls hand no more kernels to kiln's background compile
    workers, waiting for them after each, so that timed calls run every kernel natively
    (as a program's calls do once the workers are done: runtime/llvm/compile_service.py). A
    kernel can wait for another: the epilogue of a GEMM is planned once the GEMM runs."""
    import sys
    service = sys.modules.get("runtime.llvm.compile_service")  # loaded once anything compiled
    if service is None or not service.submitted():
        return
    for _ in range(limit):
        before = service.submitted()
        service.wait_for_kernels()
        with _entered(context):
            fn()
        if service.submitted() == before:
            return


def _check(impl: Impl, fn, expected, case: Case) -> str | None:
    with _entered(impl.context):
        result = fn()
    if expected is None:
        return None
    return mismatch(result, expected, case.rtol, case.atol)


def mismatch(result, expected, rtol: float, atol: float) -> str | None:
    """None if `result` (tensors, arrays, numbers, or tuples of them) matches `expected`
    within tolerance; otherwise what is wrong."""
    got, want = as_arrays(result), as_arrays(expected)
    if len(got) != len(want):
        return f"{len(got)} results, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        where = f"result {i}: " if len(want) > 1 else ""
        if g.shape != w.shape:
            return f"{where}shape {g.shape}, expected {w.shape}"
        if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
            err = np.max(np.abs(g - w))
            return f"{where}max abs error {err:.3g} (rtol {rtol:g}, atol {atol:g})"
    return None


def as_arrays(value) -> list[np.ndarray]:
    """float64 numpy arrays from a kiln or torch tensor, array, number, or tuple of them."""
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in as_arrays(v)]
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if str(value.dtype).endswith("bfloat16"):  # torch's numpy() takes none
            value = value.float()
        value = value.numpy()
    return [np.asarray(value, dtype=np.float64)]


def _time_in_turns(case: Case, runnable: list, settings: Settings, progress) -> None:
    turns = []
    for outcome, impl, fn in runnable:
        _note(progress, f"calibrating {outcome.label}")
        number = 1 if case.self_timed else settings.number or _guarded(
            outcome, lambda: calibrate(fn, settings.batch_s, impl.context))
        if outcome.status == "ok":
            turns.append((outcome, _batch(fn, number, impl.context, case.self_timed)))
    # a self-timed round (a fresh process, a first call) needs no warm-up: the check's
    # call was one
    rounds, warmup = (case.rounds or settings.self_timed_rounds, 0) if case.self_timed \
        else (settings.rounds, settings.warmup_rounds)
    total = warmup + rounds
    for r in range(total):
        warming = r < warmup
        _note(progress, f"round {r + 1}/{total}{' (warm-up)' if warming else ''}")
        for outcome, run in turns[r % len(turns):] + turns[:r % len(turns)]:
            if outcome.status != "ok":
                continue  # it raised in an earlier round
            seconds = _guarded(outcome, run)
            if outcome.status == "ok" and not warming:
                outcome.times.append(seconds)


def calibrate(fn: Callable[[], Any], batch_s: float, context=None) -> int:
    """Calls per batch so that a batch lasts about `batch_s` seconds. Each size is timed
    twice and the shorter counts: a one-off slow call (a kernel's launcher loaded at its
    second call) once made every batch of an eager row reduction one call long, timing
    the timer and cold caches (6 us a call read as 15-40)."""
    number = 1
    while True:
        batch = _batch(fn, number, context, False)
        elapsed = min(batch(), batch()) * number
        if elapsed >= batch_s / 5 or number >= 1 << 30:
            return max(1, round(number * batch_s / max(elapsed, 1e-9)))
        number *= 10


def _batch(fn, number: int, context, self_timed: bool) -> Callable[[], float]:
    """A function timing one batch of `number` calls; returns seconds per call."""
    def run() -> float:
        collecting = gc.isenabled()
        gc.disable()  # as timeit does: a collection would land on whoever is unlucky
        try:
            with _entered(context):
                if self_timed:
                    return sum(fn() for _ in range(number)) / number
                start = time.perf_counter()
                for _ in range(number):
                    fn()
                return (time.perf_counter() - start) / number
        finally:
            if collecting:
                gc.enable()
    return run


def _entered(context):
    """The Impl's context manager, or one that does nothing."""
    return context() if context is not None else contextlib.nullcontext()


def _note(progress, text: str) -> None:
    if progress is not None:
        progress.detail(text)
