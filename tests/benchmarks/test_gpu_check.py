"""benchmarks/gpu_check.py as one run: end to end on the emulated device at its small
size (so the script is known to work before it meets a GPU), its exit status from the
results' correctness, the test subset's counts read from pytest's report."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks import gpu_check
from runtime.cuda import current
from runtime.cuda import driver as cuda
from runtime.cuda.emulated import EmulatedDriver


@pytest.mark.slow
def test_the_whole_check_runs_on_the_emulated_device_and_reports_every_figure(tmp_path):
    out = tmp_path / "gpu.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--size", "small",
                           "--json", str(out)], cwd=gpu_check.ROOT, capture_output=True,
                          text=True, env=dict(os.environ, KILN_CUDA="emulate"))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["device"]["name"] == "kiln CUDA emulator" and report["correct"] is True
    tests = report["tests"]
    assert tests["ok"] and tests["passed"] > 0 and tests["failures"] == tests["errors"] == 0
    assert "-m gpu" in tests["command"] and "test_runtime_cuda_emulated.py" in tests["command"]
    sgemm, elementwise = report["sgemm"], report["elementwise"]
    assert sgemm["size"] == 32 and sgemm["error_of_bound"] <= 1
    assert elementwise["kernel_source"].startswith("runtime/cuda/codegen/kernel_ir.py")
    assert elementwise["elements"] == 4099 and elementwise["error_of_tolerance"] <= 1
    assert all(elementwise[key] > 0 for key in ("kiln_ms", "kiln_gbps", "copy_ms",
                                                   "copy_gbps", "of_copy"))
    assert report["targets_met"]["elementwise_of_copy"] == elementwise["of_copy"]


def _fake_checks(monkeypatch, elementwise_error):
    monkeypatch.setattr(gpu_check, "run_tests", lambda: {
        "ok": True, "passed": 1, "failures": 0, "errors": 0, "skipped": 0})
    monkeypatch.setattr(gpu_check, "check_sgemm", lambda driver, **_: {
        "kiln_gflops": 1.0, "error_of_bound": 0.5, "epilogue_error_of_bound": 0.5,
        "cublas": "PyTorch is not installed", "passed": True})
    monkeypatch.setattr(gpu_check, "check_elementwise", lambda driver, **_: {
        "kiln_gbps": 1.0, "of_copy": 0.9, "error_of_tolerance": elementwise_error,
        "passed": elementwise_error <= 1})


@pytest.mark.parametrize("error, status", [(0.5, 0), (1.5, 1)])
def test_the_exit_status_says_whether_every_result_is_correct(monkeypatch, tmp_path,
                                                              error, status):
    _fake_checks(monkeypatch, error)
    out = tmp_path / "gpu.json"
    with current.use_driver(EmulatedDriver()):
        assert gpu_check.main(["--size", "small", "--json", str(out)]) == status
    report = json.loads(out.read_text())
    assert report["correct"] is (status == 0)
    assert report["targets_met"]["met"] is (status == 0)


def test_without_a_device_the_check_says_why_and_exits_2(monkeypatch, tmp_path):
    def unavailable():
        raise cuda.CudaUnavailable("no CUDA device was found")

    monkeypatch.setattr(current, "driver", unavailable)
    out = tmp_path / "gpu.json"
    assert gpu_check.main(["--json", str(out)]) == 2
    assert json.loads(out.read_text())["device"] == {"unavailable": "no CUDA device was found"}


def test_the_test_subset_is_counted_from_pytests_report(monkeypatch, tmp_path):
    tests = tmp_path / "test_subset.py"
    tests.write_text("import pytest\n"
                     "pytestmark = pytest.mark.gpu\n"
                     "def test_passes(): pass\n"
                     "def test_fails(): assert False\n"
                     "def test_skips(): pytest.skip('no reason')\n")
    monkeypatch.setattr(gpu_check, "cuda_test_files", lambda: [str(tests)])
    result = gpu_check.run_tests()
    assert (result["passed"], result["failures"], result["skipped"]) == (1, 1, 1)
    # (the test's class name is its path from pytest's rootdir, which depends on where
    # the checkout and the temporary folder are)
    assert len(result["failed"]) == 1 and result["ok"] is False
    assert result["failed"][0].endswith("test_subset::test_fails")
