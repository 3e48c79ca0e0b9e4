"""`--plot DIR`: one bar chart per suite of each contender's time ratio to the reference,
and for the gemm suite the GFLOP/s of each contender against the size N of the square
products.

matplotlib is optional: `missing()` says why plots cannot be drawn, before any timing.
"""
from __future__ import annotations

import os

from benchmarks.harness import SuiteResult


def missing() -> str | None:
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return (f"--plot needs matplotlib, which is not installed ({e}); "
                f"pip install matplotlib, or drop --plot")
    return None


def write_plots(suites: list[SuiteResult], directory: str) -> list[str]:
    """Draw DIR/<suite>.png for every suite that ran; returns the paths written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    paths = []
    for suite in suites:
        bars = [(f"{case.case.name}: {o.label}", case.ratio(o))
                for case in suite.cases for o in case.outcomes if case.ratio(o) is not None]
        if not bars:
            continue
        names, ratios = zip(*bars)
        fig, ax = plt.subplots(figsize=(9.0, 1.0 + 0.3 * len(bars)))
        ys = range(len(bars))[::-1]  # first case at the top
        # bars grow from 1 (the reference), right when slower, left when faster
        colors = ["tab:red" if r > 1.05 else "tab:green" if r < 0.95 else "tab:gray"
                  for r in ratios]
        ax.barh(ys, [r - 1.0 for r in ratios], left=1.0, color=colors)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_xlim(min(min(ratios), 1.0) / 2, max(max(ratios), 1.0) * 2)
        for y, r in zip(ys, ratios):
            ax.annotate(f"{r:.2f}", (r, y), xytext=(3 if r >= 1 else -3, 0),
                        textcoords="offset points", va="center", ha="left" if r >= 1 else
                        "right", fontsize=7)
        ax.set_yticks(list(ys), names, fontsize=8)
        ax.set_xlabel("time / reference (log scale; lower is faster)")
        ax.set_title(suite.name, fontsize=10)
        fig.tight_layout()
        path = os.path.join(directory, f"{suite.name}.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
        if suite.name == "gemm":
            paths += _gemm_curve(plt, suite, directory)
    return paths


def _gemm_curve(plt, suite: SuiteResult, directory: str) -> list[str]:
    """GFLOP/s against N for the square cases ("square N"), one line per contender."""
    lines: dict[str, list] = {}
    for case in suite.cases:
        kind, _, size = case.case.name.partition(" ")
        if kind != "square" or not size.isdigit():
            continue
        for o in case.outcomes:
            rate = case.throughput(o)
            if rate is not None:
                lines.setdefault(o.label, []).append((int(size), rate))
    if not lines:
        return []
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for label, points in lines.items():
        xs, ys = zip(*sorted(points))
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (square N x N x N float32 product)")
    ax.set_ylabel("GFLOP/s")
    ax.legend(fontsize=8)
    ax.set_title("gemm", fontsize=10)
    fig.tight_layout()
    path = os.path.join(directory, "gemm_gflops.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return [path]
