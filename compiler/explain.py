"""`f.explain()`: one page on what compile() did for a function."""
from __future__ import annotations

import inspect

from compiler import dynamic


def _where(fn) -> str:
    try:
        return f"{inspect.getsourcefile(fn)}:{inspect.getsourcelines(fn)[1]}"
    except (TypeError, OSError):
        return "<unknown location>"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _lowering(run) -> list[str]:
    """What the native backend made of a region: kernels, native or interpreted, and why."""
    graph = getattr(run, "graph", None)
    if graph is None:
        return []
    fused = [n for n in graph.nodes if n.op.name == "FUSED"]
    lines = [f"    after the passes: {len(fused)} fused kernel(s), "
             f"{len(run.kernels)} as {getattr(run, 'kernels_are', 'native code')}"]
    for node, why in run.native_reasons.items():
        lines.append(f"      {node} runs interpreted: {why}")
    for kernel in run.kernels.values():
        if kernel.fallback_reason:
            lines.append(f"      a {kernel.kind} kernel ran interpreted for one layout: "
                         f"{kernel.fallback_reason}")
    waited = [k for k in run.kernels.values() if getattr(k, "calls_while_compiling", 0)]
    if waited:
        calls = sum(k.calls_while_compiling for k in waited)
        lines.append(f"      {len(waited)} kernel(s) ran interpreted ({calls} call(s) in all) "
                     f"while background workers compiled them")
    return lines


def _region_lines(run) -> list[str]:
    """A region's lowering; for one with a compiled backward, both of its graphs'."""
    describe = getattr(run, "describe", None)
    if describe is None:
        return _lowering(run)
    return describe() + ["    forward lowering:"] + _lowering(run.forward) + \
        ["    backward lowering:"] + (_lowering(run.backward) if run.backward_calls else
                                     ["    not compiled yet: backward has not run"])


def _whole_step_lines(entry) -> list[str]:
    """Where a training step's graph ends: the whole steps (an optimiser's zero_grad
    and step) that ran eagerly between its regions, and the gradients its graph sets."""
    if not entry.steps:
        return []
    lines = ["  whole steps and in-place writes, run eagerly between graphs (not captured "
             "op by op):"]
    for step in entry.steps:
        lines.append(f"    - {step.what} after {step.after_regions} region(s), at {step.where}")
    regions = [a for a in entry.program if not isinstance(a, tuple)]
    for k, region in enumerate(regions, 1):
        if region.grad_slots:
            lines.append(f"  region {k} sets the .grad of {len(region.grad_slots)} input(s) "
                         f"(its outputs {', '.join(str(o) for _, o in region.grad_slots)})")
    return lines


def _symbolic_lines(cf, graph, run) -> list[str]:
    """Which symbolic graph a region's code was compiled from, with its sizes' values."""
    general = dynamic.symbolic_source(cf.families, graph, run)
    if general is None:
        return []
    binding = dynamic.bind(general, graph)
    sizes = ", ".join(f"{s}={v}" for s, v in binding.items())
    return [f"    runs the code of its graph with symbolic sizes ({sizes}):"] + \
        ["      " + ln for ln in str(general).splitlines()]


def explain(cf) -> str:
    lines = [f"kiln.compile: {cf.__name__} ({_where(cf.fn)})",
             f"backend: {cf.backend.name} — {cf.backend.note}",
             f"entries: {len(cf.entries)}, {cf.recompiles} of which compiled code "
             f"(recompile limit {cf.recompile_limit}); dynamic={cf.dynamic}"]
    if cf.gave_up:
        lines.append("gave up after the recompile limit: the function now runs eagerly")
    for n, entry in enumerate(cf.entries.values(), 1):
        mode = ("replays its graph and whole steps without running Python" if entry.steps
                else "replays its graph without running Python") if entry.mode == "replay" else \
            f"re-runs its Python under capture at each call ({entry.why_python})"
        lines += ["", f"entry {n}: ran {entry.calls} time(s); {mode}", "  guards:"]
        paths = [f"arg {i}" for i in range(len(entry.key[1]))]
        lines += [f"    - {g}" for g in cf.guards.describe(entry.key, paths)]
        if entry.breaks:
            lines.append("  graph breaks:")
            lines += [f"    - {b.reason} at {b.where}" for b in entry.breaks]
        else:
            lines.append("  graph breaks: none")
        lines += _whole_step_lines(entry)
        lines.append(f"  graphs captured: {len(entry.regions)}")
        for i, g in enumerate(entry.regions, 1):
            lines.append(f"  region {i}:")
            lines += ["    " + ln for ln in str(g).splitlines()]
            run = entry.runs[i - 1] if i <= len(entry.runs) else cf.region_cache.get(str(g))
            lines += _symbolic_lines(cf, g, run) + _region_lines(run)
        if entry.seconds:
            lines.append("  time: " + ", ".join(f"{k} {_ms(v)}" for k, v in entry.seconds.items()))
        if entry.codegen is not None:
            lines.append("  kernels: " + entry.codegen.describe())
    if cf.history:
        lines += ["", "recompiles:"] + [f"  - {h}" for h in cf.history]
    return "\n".join(lines) + "\n"
