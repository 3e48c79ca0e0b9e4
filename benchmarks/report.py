"""Results as text tables for people and as one JSON document for machines."""
from __future__ import annotations

import datetime
import os
import platform

from benchmarks.harness import CaseResult, Outcome, Settings, SuiteResult
from runtime.llvm.target import selected

SCHEMA = "kiln-benchmarks/1"


def format_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_spread(times: list[float]) -> str:
    """min-max in the unit of the min: '794-2020 ns', never an exponent."""
    low, high = min(times), max(times)
    unit = format_time(low).split()[1]
    scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
    return f"{_digits(low / scale)}-{_digits(high / scale)} {unit}"


def _digits(x: float) -> str:
    """About three significant digits, in fixed point."""
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def format_rate(value: float, unit: str) -> str:
    if unit in ("GFLOP/s", "GB/s"):
        return f"{value:.3g} {unit}"
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{suffix} {unit}"
    return f"{value:.3g} {unit}"


def format_limits(limits) -> str:
    copies = ", ".join(f"{gbs:.3g} GB/s at {format_bytes(size)}"
                       for size, gbs in sorted(limits.copy_gbs.items()))
    return (f"machine limits ({limits.cpu}, <{limits.vector_width} x float> FMA): "
            f"peak {limits.peak_gflops_1t:.0f} GFLOP/s on 1 thread, "
            f"{limits.peak_gflops:.0f} GFLOP/s on {limits.threads}; "
            f"bandwidth (best of copy, add, sum, memcpy; read + write) {copies}")


def format_bytes(size: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"


def format_suite(suite: SuiteResult, settings: Settings, limits=None) -> str:
    title = f"== {suite.name}: {suite.description}"
    if suite.status == "skipped":
        return f"{title}\n   skipped: {suite.reason}\n"
    with_limit = limits is not None and any(limits.for_work(c.case.unit, c.case.work)
                                            for c in suite.cases)
    head = ["case / contender", "median", "spread", "throughput", "ratio"]
    if with_limit:
        head.append("of limit")
    rows, skips = [head], {}
    for case in suite.cases:
        rows.append([case.case.name])
        for outcome in case.outcomes:
            if outcome.status == "skipped":
                skips.setdefault(outcome.reason, []).append(outcome.label)
            else:
                rows.append(_row(case, outcome, limits, with_limit))
    lines = [title, f"   times per call: median of {settings.rounds} rounds "
                    f"({settings.self_timed_rounds} for subprocess timings), spread min-max; "
                    f"ratio = time / reference (*), lower is faster"]
    # a FAILED/ERROR row's message runs past the columns, so it sets only the name's width
    widths = [max(len(r[i]) for r in rows if len(r) > i and len(r) > 1
                  and (i == 0 or not _is_problem(r))) for i in range(len(head))]
    for row in rows:
        if len(row) == 1:
            lines.append(row[0])
        elif _is_problem(row):
            lines.append(f"{row[0].ljust(widths[0])}  {row[1]}")
        else:
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:])]
            lines.append("  ".join(cells).rstrip())
    for reason, labels in skips.items():
        lines.append(f"   skipped {', '.join(sorted(set(labels)))}: {reason}")
    if suite.notes:
        lines += ["", suite.notes.rstrip()]
    return "\n".join(lines) + "\n"


def _is_problem(row: list[str]) -> bool:
    return row[1].startswith(("FAILED", "ERROR"))


def _row(case: CaseResult, outcome: Outcome, limits, with_limit: bool) -> list[str]:
    mark = " *" if outcome is case.reference else ""
    name = f"  {outcome.label}{mark}"
    if outcome.status == "failed":
        return [name, f"FAILED correctness, not timed: {outcome.reason}"]
    if outcome.status == "error":
        return [name, f"ERROR: {outcome.reason}"]
    rate = case.throughput(outcome)
    ratio = case.ratio(outcome)
    row = [name, format_time(outcome.median), format_spread(outcome.times),
           "-" if rate is None else format_rate(rate, case.case.unit),
           "-" if ratio is None else f"{ratio:.2f}"]
    if with_limit:
        fraction = _fraction(case, outcome, limits)
        row.append("-" if fraction is None else f"{100 * fraction:.1f}%")
    return row


def _fraction(case: CaseResult, outcome: Outcome, limits) -> float | None:
    limit = limits.for_work(case.case.unit, case.case.work) if limits is not None else None
    rate = case.throughput(outcome)
    return None if not limit or rate is None else rate / limit


def machine_info(threads: int, versions: dict) -> dict:
    """The machine, and the CPU target code was generated for (KILN_CPU's, if set)."""
    target = selected()
    return {"cpu": target.name, "cpu_model": _cpu_model(), "features": sorted(target.enabled),
            "cores": os.cpu_count(), "threads": threads, "platform": platform.platform(),
            "versions": versions}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def to_json(suites: list[SuiteResult], settings: Settings, machine: dict, limits,
            argv: list[str]) -> dict:
    """The whole run as one JSON-ready document (schema SCHEMA)."""
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(argv),
        "settings": {"rounds": settings.rounds, "batch_s": settings.batch_s,
                     "warmup_rounds": settings.warmup_rounds,
                     "self_timed_rounds": settings.self_timed_rounds, "quick": settings.quick},
        "machine": machine,
        "limits": None if limits is None else limits.to_json(),
        "suites": [_suite_json(s, limits) for s in suites],
        "failures": sum(s.failures for s in suites),
    }


def _suite_json(suite: SuiteResult, limits) -> dict:
    return {"name": suite.name, "description": suite.description, "status": suite.status,
            "reason": suite.reason, "cases": [_case_json(c, limits) for c in suite.cases]}


def _case_json(case: CaseResult, limits) -> dict:
    ref = case.reference
    return {"name": case.case.name, "unit": case.case.unit, "work": case.case.work,
            "reference": None if ref is None else ref.label,
            "results": [_outcome_json(case, o, limits) for o in case.outcomes]}


def _outcome_json(case: CaseResult, outcome: Outcome, limits) -> dict:
    timed = outcome.status == "ok"
    return {"label": outcome.label, "contender": outcome.contender,
            "status": outcome.status, "reason": outcome.reason, "times_s": outcome.times,
            "median_s": outcome.median if timed else None,
            "min_s": min(outcome.times) if timed else None,
            "max_s": max(outcome.times) if timed else None,
            "throughput": case.throughput(outcome), "ratio": case.ratio(outcome),
            "fraction_of_limit": _fraction(case, outcome, limits)}
