"""Where a compiled model step's time goes, kernel by kernel, against the machine's
limits: each native kernel's time a step, its GFLOP/s and GB/s, and the fraction of its
roofline time (the larger of flops / peak FLOP/s and bytes / copy bandwidth) it takes;
then the time in compiled regions outside their kernels (the graph's bookkeeping and
ops run interpreted) and outside the regions (Python, eager ops between graphs).

    python -m benchmarks.profile_step gpt_step [THREADS]
    python -m benchmarks.profile_step resnet_step [THREADS]

The step is benchmarks/model_step.py's, compiled by kiln (the whole step one function),
run under the alias in this process; it is profiled after every kernel is native (the
compile workers waited for), over PROFILED steps.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field

PROFILED = 3


@dataclass
class Line:
    name: str
    calls: int = 0
    seconds: float = 0.0
    flops: int = 0
    bytes: int = 0
    children: list = field(default_factory=list)


def kernel_lines(events, steps: int) -> tuple[list[Line], float, float]:
    """Per native kernel name (category "kernel"): its totals a step; and the seconds a
    step spent in compiled regions (category "region", a region inside another counted
    once), and in their kernels."""
    lines: dict[str, Line] = {}
    in_regions = in_kernels = 0.0
    for ev in events:
        seconds = ev.cpu_time_total / 1e6
        if ev.category == "region":
            if not any(up.category == "region" for up in _ancestors(ev)):
                in_regions += seconds
            continue
        if ev.category != "kernel":
            continue
        line = lines.setdefault(ev.name, Line(ev.name))
        line.calls += 1
        line.seconds += seconds
        line.flops += ev.flops
        line.bytes += ev.bytes
        in_kernels += seconds
    for line in lines.values():
        line.calls //= steps
        line.seconds /= steps
        line.flops //= steps
        line.bytes //= steps
    return sorted(lines.values(), key=lambda ln: -ln.seconds), in_regions / steps, \
        in_kernels / steps


def _ancestors(ev):
    while ev.cpu_parent is not None:
        ev = ev.cpu_parent
        yield ev


def roofline_seconds(line: Line, limits) -> float:
    """The least time the line's work takes at the machine's limits."""
    bandwidth = limits.for_work("GB/s", line.bytes / max(line.calls, 1)) or float("inf")
    return max(line.flops / (limits.peak_gflops * 1e9), line.bytes / (bandwidth * 1e9))


def report(case: str, threads: int) -> str:
    import eager
    from eager import alias
    from benchmarks import limits as machine
    with alias.torch_is_eager():
        from benchmarks import model_step
        eager.set_num_threads(threads)
        step = model_step.CASES[case](True)
        from runtime.llvm.compile_service import wait_for_kernels
        for _ in range(3):  # captured, then every kernel native
            step().item()
            wait_for_kernels()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            step().item()
            times.append(time.perf_counter() - start)
        with eager.profiler.profile() as prof:
            for _ in range(PROFILED):
                step().item()
    limits = machine.measure(threads, quick=True)
    lines, in_regions, in_kernels = kernel_lines(prof.events(), PROFILED)
    step_s = statistics.median(times)
    out = [f"{case}, kiln compiled, {threads} thread(s), {limits.cpu} "
           f"({limits.vector_width * 32}-bit vectors): step {step_s * 1e3:.1f} ms; "
           f"peak {limits.peak_gflops:.0f} GFLOP/s",
           f"{'kernel':60} {'calls':>5} {'ms':>8} {'%step':>6} {'GFLOP/s':>8} {'GB/s':>7} "
           f"{'%roof':>6}"]
    for line in lines:
        roof = roofline_seconds(line, limits)
        out.append(f"{line.name[:60]:60} {line.calls:5d} {line.seconds * 1e3:8.2f} "
                   f"{100 * line.seconds / step_s:6.1f} "
                   f"{line.flops / line.seconds / 1e9 if line.seconds else 0:8.1f} "
                   f"{line.bytes / line.seconds / 1e9 if line.seconds else 0:7.1f} "
                   f"{100 * roof / line.seconds if line.seconds else 0:6.1f}")
    roof_total = sum(roofline_seconds(line, limits) for line in lines)
    out += [f"kernels: {in_kernels * 1e3:.1f} ms ({100 * in_kernels / step_s:.0f}% of the step; "
            f"at their rooflines {roof_total * 1e3:.1f} ms)",
            f"in regions outside kernels (bookkeeping, interpreted ops): "
            f"{(in_regions - in_kernels) * 1e3:.1f} ms",
            f"outside regions (Python, eager ops between graphs): "
            f"{(step_s - in_regions) * 1e3:.1f} ms"]
    return "\n".join(out)


if __name__ == "__main__":
    print(report(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1))
