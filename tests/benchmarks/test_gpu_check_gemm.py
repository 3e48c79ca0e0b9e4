"""benchmarks/gpu_check.py's SGEMM check without a GPU: its copies, arguments and grid
through the emulated device (runtime/cuda/emulated.py), whose launches run the kernels'
IR on the emulator; its events time the host's clock."""
import pytest

from benchmarks import gpu_check
from runtime.cuda.emulated import EmulatedDriver


@pytest.mark.slow
def test_the_sgemm_check_runs_its_kernels_and_checks_their_results():
    driver = EmulatedDriver()
    result = gpu_check.check_sgemm(driver, size=32, repeats=1, edge_sizes=(37, 35, 19))
    assert driver.launches == 4  # two warm-up calls, one timed, the epilogue's product
    assert driver.resources() == dict.fromkeys(driver.resources(), 0)
    assert result["error_of_bound"] <= 1 and result["epilogue_error_of_bound"] <= 1
    assert result["kiln_ms"] > 0
    assert result["kiln_gflops"] == pytest.approx(2 * 32 ** 3 / result["kiln_ms"] / 1e6)
    assert result["registers"] == 0  # the emulator has none; ptxas_report says
    assert result["passed"] == ("cublas" in result or result["of_cublas"] >= 0.7)
