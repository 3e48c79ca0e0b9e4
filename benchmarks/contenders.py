"""Who runs a benchmark case, and whether each one can run here.

A contender is a name ("kiln eager", "numpy", "torch eager") and a check that returns
None when it is available or the reason it is not. A missing contender is reported as
skipped, never as failed. Suites use the same kind of check for their own needs
(`compiler_missing`, `gpu_missing`, `mpi_missing`).

"kiln compiled" is `eager.compile` with its default backend, which runs what it can as
generated kernels and the rest through the interpreter of eager ops (`explain()` on a
compiled function says which). "torch.compile" is PyTorch's default (inductor), which
builds C++ on its first call; SLOW_TO_START leaves it out of --quick runs.

Nothing heavy is imported at module level: torch is imported by the first check that
needs it, so a run that does not use it never pays its import time.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
from typing import Callable

Check = Callable[[], "str | None"]


def kiln_missing() -> str | None:
    try:
        importlib.import_module("eager")
    except Exception as e:  # noqa: BLE001 - any failure to import is the reason
        return f"import eager failed: {type(e).__name__}: {e}"
    return None


def kiln_compiled_missing() -> str | None:
    return kiln_missing() or compiler_missing()


def numpy_missing() -> str | None:
    return None


def scipy_missing() -> str | None:
    """numpy has no erf: the numpy spelling of GELU takes scipy's."""
    try:
        importlib.import_module("scipy.special")
    except Exception as e:  # noqa: BLE001
        return f"scipy is not importable ({type(e).__name__}: {e})"
    return None


def torch_missing() -> str | None:
    try:
        importlib.import_module("torch")
    except Exception as e:  # noqa: BLE001 - a broken install is as missing as none
        return f"torch is not importable ({type(e).__name__}: {e})"
    return None


def torch_compile_missing() -> str | None:
    reason = torch_missing()
    if reason:
        return reason
    compiler = os.environ.get("CXX") or "g++"
    if shutil.which(compiler) is None:
        return f"torch.compile's CPU backend needs a C++ compiler ({compiler} not found)"
    return None


def compiler_missing() -> str | None:
    """None once kiln's compiler can compile; until then, why it cannot."""
    try:
        compiler = importlib.import_module("compiler")
        compiler.compile(lambda x: x)
    except NotImplementedError:
        return "needs the compiler (not built yet)"
    except Exception as e:  # noqa: BLE001
        return f"needs the compiler ({type(e).__name__}: {e})"
    return None


def mpiexec() -> str | None:
    """The mpiexec beside this Python (where the mpich wheel puts it), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else shutil.which("mpiexec")


def mpi_missing() -> str | None:
    """None where mpi4py and an mpiexec are installed (the 'distributed' extra)."""
    if importlib.util.find_spec("mpi4py") is None:
        return "needs mpi4py and MPI (pip install -e '.[distributed]')"
    if mpiexec() is None:
        return "needs mpiexec, beside Python or on PATH (pip install -e '.[distributed]')"
    return None


def gpu_missing() -> str | None:
    from runtime.cuda.current import driver
    from runtime.cuda.driver import CudaUnavailable
    try:
        driver()
    except CudaUnavailable as e:
        return f"needs a GPU ({e})"
    return None


CONTENDERS: dict[str, Check] = {
    "kiln eager": kiln_missing,
    "kiln eager, per-tensor step": kiln_missing,
    "kiln compiled": kiln_compiled_missing,
    "kiln GEMM": kiln_compiled_missing,
    "numpy": numpy_missing,
    "numpy + scipy": scipy_missing,
    "torch eager": torch_missing,
    "torch.compile": torch_compile_missing,
}

# Contenders too slow to start for a --quick run, with the reason they are left out.
SLOW_TO_START: dict[str, str] = {
    "torch.compile": "left out of --quick: its first call imports and starts inductor "
                     "(~20 s here); run without --quick to include it",
}


class Lineup:
    """The contenders of one run: which are available, asked once each and remembered.

    torch: "auto" uses PyTorch when importable, "required" makes its absence an error
    (see `require_torch`), "off" leaves it out. threads: applied to torch when it is loaded.
    quick: leave out the contenders in SLOW_TO_START.
    """

    def __init__(self, torch: str = "auto", threads: int | None = None,
                 checks: dict[str, Check] | None = None, quick: bool = False):
        if torch not in ("auto", "required", "off"):
            raise ValueError(f"torch must be 'auto', 'required' or 'off', not {torch!r}")
        self.torch = torch
        self.threads = threads
        self.quick = quick
        self.checks = dict(CONTENDERS if checks is None else checks)
        self._answers: dict[str, str | None] = {}

    def why_skipped(self, name: str) -> str | None:
        """None if contender `name` runs in this lineup, else the reason it does not."""
        if name not in self._answers:
            self._answers[name] = self._ask(name)
        return self._answers[name]

    def _ask(self, name: str) -> str | None:
        if name.startswith("torch") and self.torch == "off":
            return "left out (--compare none)"
        if self.quick and name in SLOW_TO_START:
            return SLOW_TO_START[name]
        check = self.checks.get(name)
        if check is None:
            return f"unknown contender {name!r}"
        reason = check()
        if reason is None and name.startswith("torch") and self.threads:
            import torch
            torch.set_num_threads(self.threads)
        return reason

    def require_torch(self) -> str | None:
        """The error to stop on when torch is required but missing, else None."""
        if self.torch != "required":
            return None
        reason = self.why_skipped("torch eager")
        if reason is None:
            return None
        return (f"--compare torch needs PyTorch, but {reason}; install it "
                f"(pip install -e '.[compare]') or drop --compare torch")

    def versions(self) -> dict[str, str | None]:
        """Versions of the libraries in this run; torch's only if the run loaded it."""
        import platform
        import llvmlite
        import numpy
        kiln = None if self.why_skipped("kiln eager") else sys.modules["eager"].__version__
        return {"python": platform.python_version(), "numpy": numpy.__version__,
                "llvmlite": llvmlite.__version__, "kiln": kiln,
                "torch": getattr(sys.modules.get("torch"), "__version__", None)}
