"""The command line: errors it must give before timing anything, and a smoke run."""
import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from benchmarks import cli, limits, registry
from benchmarks.harness import Case, Impl
from benchmarks.progress import Progress

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cases(quick):
    """This module doubles as a suite whose numpy contender gets 1 + 1 wrong."""
    return [Case("one plus one", [Impl("numpy", lambda: lambda: 3.0)], expected=lambda: 2.0)]


def test_a_wrong_answer_is_reported_and_makes_the_exit_status_non_zero(monkeypatch, capsys):
    monkeypatch.setattr(registry, "SUITES", {})
    monkeypatch.setattr(cli, "SUITES", registry.SUITES)
    monkeypatch.setattr(limits, "measure", lambda threads, quick: limits.Limits(
        "testcpu", 8, threads, 1.0, 2.0, {1 << 20: 3.0}))
    registry.register("wrong", __name__, "a suite with a wrong answer")
    assert cli.main(["--quick", "wrong"]) == 1
    out, err = capsys.readouterr()
    assert "FAILED correctness, not timed: max abs error 1" in out
    assert "1 contender result(s) FAILED" in err


def test_unknown_suite_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["no_such_suite"])
    assert stop.value.code == 2
    assert "unknown suite(s) no_such_suite" in capsys.readouterr().err


def test_list_shows_the_registered_suites(capsys):
    assert cli.main(["--list"]) == 0
    assert "eager_overhead" in capsys.readouterr().out


def test_compare_torch_without_torch_stops_with_a_clear_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert cli.main(["--compare", "torch", "eager_overhead"]) == 2
    assert "--compare torch needs PyTorch" in capsys.readouterr().err


def test_plot_without_matplotlib_stops_with_a_clear_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert cli.main(["--plot", str(tmp_path), "eager_overhead"]) == 2
    assert "--plot needs matplotlib" in capsys.readouterr().err


def test_threads_sets_the_blas_variables(monkeypatch):
    """(Everything it changes in this process is put back: the tests after it would
    otherwise run kiln and numpy on one thread.)"""
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "KILN_NUM_THREADS"):
        monkeypatch.setenv(name, "")  # restored after the test
    for name in cli.IDLE_SPIN:
        monkeypatch.delenv(name, raising=False)
    with contextlib.ExitStack() as undo:
        try:
            from threadpoolctl import threadpool_limits
            undo.enter_context(threadpool_limits(limits=None))  # restores numpy's threads
        except ImportError:
            pass
        warning = cli.configure_threads(1)  # numpy is imported already in this process
        assert os.environ["KILN_NUM_THREADS"] == "1"
    assert os.environ["OPENBLAS_NUM_THREADS"] == os.environ["OMP_NUM_THREADS"] == "1"
    assert all(os.environ[name] == value for name, value in cli.IDLE_SPIN.items())
    assert warning is None or "threadpoolctl is not installed" in warning


def test_a_thread_timeout_set_by_the_user_is_kept(monkeypatch):
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "25")
    cli.configure_threads(None)
    assert os.environ["OPENBLAS_THREAD_TIMEOUT"] == "25"


def test_numpy_is_not_imported_before_threads_are_configured():
    code = ("import sys; from benchmarks import cli; cli.parse_args(['--threads', '1']); "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_rewrites_one_line_on_a_terminal_and_logs_steps_elsewhere():
    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        progress = Progress(stream)
        progress.step("suite 1/2: case")
        progress.detail("round 1/3")
        progress.done()
    assert "\r" in terminal.getvalue() and "suite 1/2: case | round 1/3" in terminal.getvalue()
    assert terminal.getvalue().endswith("\r")
    assert log.getvalue().count("\n") == 1 and "round" not in log.getvalue()


@pytest.mark.slow
def test_quick_eager_overhead_run_writes_json(tmp_path):
    path = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "eager_overhead",
                           "--threads", "1", "--json", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "== eager_overhead" in done.stdout and "machine limits" in done.stdout
    assert "eager_overhead 1/" in done.stderr  # progress goes to stderr
    doc = json.loads(path.read_text())
    (suite,) = doc["suites"]
    assert suite["status"] == "ran" and doc["failures"] == 0
    assert doc["machine"]["threads"] == 1
    assert {"python", "numpy", "llvmlite", "torch", "kiln"} <= set(doc["machine"]["versions"])
    kiln = [r for c in suite["cases"] for r in c["results"] if r["contender"] == "kiln eager"]
    assert kiln and all(r["status"] == "ok" for r in kiln)
