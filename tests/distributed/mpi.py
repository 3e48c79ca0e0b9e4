"""Launching small programs under `mpiexec -n N` for the distributed tests; the test
process itself never initialises MPI. Without mpi4py or mpiexec the tests skip, saying
which is missing (pip install -e '.[distributed]' brings both)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"


def mpiexec() -> str | None:
    """The mpiexec beside this Python (where the mpich wheel puts it), else on PATH."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def mpi_missing() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install -e '.[distributed]')"
    if mpiexec() is None:
        return "no mpiexec found beside Python or on PATH (pip install mpich)"
    return None


requires_mpi = pytest.mark.skipif(mpi_missing() is not None, reason=str(mpi_missing()))


def launch(program: str | Path, ranks: int, *args: str, timeout: float = 60,
           flags: tuple = ()) -> subprocess.CompletedProcess:
    """Run programs/<program>.py (or the script at a Path) on `ranks` processes (mpiexec's
    `flags` first); one BLAS thread each."""
    script = program if isinstance(program, Path) else PROGRAMS / f"{program}.py"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    command = [mpiexec(), *flags, "-n", str(ranks), sys.executable, str(script), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def succeeded(result: subprocess.CompletedProcess) -> str:
    """The run's stdout, after checking that it exited cleanly."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout
