"""`python -m benchmarks [SUITE ...] [--quick] [--json PATH] [--plot DIR]
[--compare {torch,none}] [--threads N] [--list]`

Tables go to stdout, progress to stderr. The exit status is 1 when any contender gave
a wrong answer or raised, 2 on a usage error, else 0.

This module imports no numpy at load time: `--threads` must set the BLAS thread
variables before numpy is first imported, so the rest is imported inside `main`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks.registry import SUITES, lookup


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="kiln's benchmark suites, side by side "
        "with numpy and PyTorch, each answer checked before it is timed.")
    parser.add_argument("suites", nargs="*", metavar="SUITE",
                        help=f"suites to run (default: all): {', '.join(SUITES)}")
    parser.add_argument("--quick", action="store_true", help="small sizes, few rounds")
    parser.add_argument("--json", metavar="PATH", help="write all results as JSON here")
    parser.add_argument("--plot", metavar="DIR", help="draw ratio bars per suite (matplotlib)")
    parser.add_argument("--compare", choices=("torch", "none"),
                        help="torch: require PyTorch; none: leave it out "
                             "(default: use it when importable)")
    parser.add_argument("--threads", type=_positive, metavar="N",
                        help="threads for numpy/OpenBLAS, torch and the peak measurement "
                             "(default: every core this process may use)")
    parser.add_argument("--list", action="store_true", help="list suites and exit")
    args = parser.parse_args(argv)
    try:
        args.selected = lookup(args.suites)
    except ValueError as e:
        parser.error(str(e))
    return args


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


# Contenders alternate in one process, and each library's idle threads keep spinning
# after its call, holding cores that the next contender's threads need: OpenBLAS's for
# 2^28 cycles (~0.1 s, sched_yield), the OpenMP threads of PyTorch's libgomp for 300,000
# pause loops (several ms). Measured here, kiln's 2-thread GEMM after them ran at 0.5-0.7x
# of OpenBLAS, 0.9x with the spins cut to these (numpy and torch kept their speed: their
# own back-to-back calls still find their threads awake). kiln's pool spins ~20 us, then
# yields for ~0.7 ms. A value the user set is kept.
IDLE_SPIN = {"OPENBLAS_THREAD_TIMEOUT": "18", "GOMP_SPINCOUNT": "10000"}


def configure_threads(threads: int | None) -> str | None:
    """Limit numpy's BLAS pool to `threads`, and the libraries' idle spinning (see
    IDLE_SPIN); returns a warning if that was not possible. OpenBLAS reads its variables
    once, when numpy is first imported."""
    for name, value in IDLE_SPIN.items():
        os.environ.setdefault(name, value)
    if threads is None:
        return None
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "KILN_NUM_THREADS"):
        os.environ[name] = str(threads)
    if "numpy" not in sys.modules:
        return None
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return ("numpy was imported before --threads could set OPENBLAS_NUM_THREADS and "
                "threadpoolctl is not installed: numpy keeps its default thread count")
    threadpool_limits(threads)
    return None


def list_suites() -> str:
    lines = []
    for suite in SUITES.values():
        reason = suite.why_skipped()
        state = f"skipped: {reason}" if reason else "runs"
        lines.append(f"{suite.name:20} {suite.description} [{state}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.list:
        print(list_suites())
        return 0
    warning = configure_threads(args.threads)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if args.plot:
        from benchmarks.plot import missing  # matplotlib imports numpy: threads first
        if missing():
            print(f"error: {missing()}", file=sys.stderr)
            return 2

    from benchmarks import harness, limits, report  # after the thread variables are set
    from benchmarks.contenders import Lineup
    from benchmarks.progress import Progress
    from runtime.threads import usable_cores

    threads = args.threads or usable_cores()
    # torch gets the same thread count as OpenBLAS, which uses every usable core by default
    lineup = Lineup(torch={"torch": "required", "none": "off"}.get(args.compare, "auto"),
                    threads=threads, quick=args.quick)
    problem = lineup.require_torch()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    settings = harness.QUICK if args.quick else harness.FULL
    progress = Progress()

    progress.step(f"measuring machine limits on 1 and {threads} threads")
    machine_limits = limits.measure(threads, args.quick)
    progress.done()
    print(report.format_limits(machine_limits), end="\n\n", flush=True)
    results = []
    for suite in args.selected:
        results.append(harness.run_suite(suite, lineup, settings, progress))
        progress.done()
        print(report.format_suite(results[-1], settings, machine_limits), flush=True)
    failures = sum(r.failures for r in results)
    if args.json:
        document = report.to_json(results, settings, report.machine_info(
            threads, lineup.versions()), machine_limits, argv)
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
        print(f"results written to {args.json}")
    if args.plot:
        from benchmarks.plot import write_plots
        for path in write_plots(results, args.plot):
            print(f"plot written to {path}")
    if failures:
        print(f"{failures} contender result(s) FAILED (wrong answer or error)", file=sys.stderr)
    return 1 if failures else 0
