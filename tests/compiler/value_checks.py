"""Comparing results with PyTorch's value for value, and asking whether a compiled
function ran as generated code: what test_special_values.py and test_edge_values.py
share."""
import numpy as np

from ir.ops import Op

ULPS = 4
"""Units in the last place a finite non-zero result may differ from PyTorch's."""


def mismatches(got: np.ndarray, want: np.ndarray, ulps: float = ULPS) -> np.ndarray:
    """Where `got` is not `want`: NaN for NaN, the same infinity or signed zero, and
    finite non-zero values within `ulps` of `want`'s spacing."""
    if want.dtype.kind != "f":
        return got != want
    nan = np.isnan(want)
    exact = np.isinf(want) | (want == 0)
    with np.errstate(invalid="ignore", over="ignore"):
        close = np.abs(got.astype(np.float64) - want) <= ulps * np.spacing(np.abs(want))
    ok = np.where(nan, np.isnan(got),
                  np.where(exact, (got == want) & (np.signbit(got) == np.signbit(want)),
                           np.isfinite(got) & (got != 0) & close))
    return ~ok


def not_native(cf, lowered) -> list[str]:
    """What of a compiled function did not run as generated code: nodes left outside
    kernels, kernels without native code (compiler.lower's answer), and kernels that ran
    interpreted for a layout (explain()'s lines)."""
    return [f"{n.op.name} runs interpreted" for g in lowered.optimized for n in g.nodes
            if n.op not in (Op.FUSED, Op.SCALAR) and not n.op.schema.is_view] + \
        [f"{node}: {why}" for node, why in lowered.interpreted.items()] + \
        [line.strip() for line in cf.explain().splitlines() if "interpreted" in line]
