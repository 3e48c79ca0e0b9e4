"""Tables and the JSON document, from tiny suites with made-up machine limits."""
import json

import pytest
from bench_helpers import TINY, case_of, lineup

from benchmarks import report
from benchmarks.harness import SuiteResult, run_case
from benchmarks.limits import Limits

LIMITS = Limits(cpu="testcpu", vector_width=8, threads=2, peak_gflops_1t=50.0,
                peak_gflops=100.0, copy_gbs={1 << 20: 40.0, 64 << 20: 20.0})


def tiny_suites():
    gemm = run_case(case_of({"A": 1.0, "B": 2.0, "C": 1.0}, unit="GFLOP/s", work=1e6),
                    lineup(C="needs the compiler"), TINY)
    ops = run_case(case_of({"A": 1.0}), lineup(), TINY)
    return [SuiteResult("tiny", "tiny cases", "ran", cases=[gemm, ops]),
            SuiteResult("cuda", "GPU kernels", "skipped", "needs a GPU")]


def test_json_document_has_the_documented_shape():
    suites = tiny_suites()
    machine = report.machine_info(2, {"python": "3", "numpy": "2", "llvmlite": "0",
                                      "torch": None, "kiln": "0.1.0"})
    doc = json.loads(json.dumps(report.to_json(suites, TINY, machine, LIMITS, ["--quick"])))
    assert doc["schema"] == report.SCHEMA
    assert doc["failures"] == 1
    assert doc["argv"] == ["--quick"]
    assert set(doc["settings"]) == {"rounds", "batch_s", "warmup_rounds", "self_timed_rounds",
                                    "quick"}
    assert {"cpu", "cpu_model", "features", "cores", "threads", "versions"} <= set(
        doc["machine"])
    assert doc["machine"]["threads"] == 2 and isinstance(doc["machine"]["features"], list)
    assert doc["limits"]["peak_gflops"] == 100.0
    ran, skipped = doc["suites"]
    assert (skipped["status"], skipped["reason"], skipped["cases"]) == ("skipped",
                                                                        "needs a GPU", [])
    gemm = ran["cases"][0]
    assert (gemm["unit"], gemm["work"], gemm["reference"]) == ("GFLOP/s", 1e6, "A")
    ok, failed, missing = gemm["results"]
    assert set(ok) == {"label", "contender", "status", "reason", "times_s", "median_s",
                       "min_s", "max_s", "throughput", "ratio", "fraction_of_limit"}
    assert ok["status"] == "ok" and len(ok["times_s"]) == TINY.rounds
    assert ok["ratio"] == 1.0
    assert ok["fraction_of_limit"] == ok["throughput"] / 100.0
    assert failed["status"] == "failed" and failed["median_s"] is None
    assert missing == {**missing, "status": "skipped", "reason": "needs the compiler",
                       "times_s": [], "ratio": None}


def test_table_shows_failures_skips_and_fraction_of_limit():
    text = report.format_suite(tiny_suites()[0], TINY, LIMITS)
    assert "== tiny: tiny cases" in text
    assert "A *" in text and "of limit" in text
    assert "FAILED correctness, not timed: max abs error 1" in text
    assert "skipped C: needs the compiler" in text
    skipped = report.format_suite(tiny_suites()[1], TINY, LIMITS)
    assert "skipped: needs a GPU" in skipped


def test_a_failure_message_does_not_widen_the_columns():
    lines = report.format_suite(tiny_suites()[0], TINY, LIMITS).splitlines()
    header = next(line for line in lines if line.startswith("case / contender"))
    failed = next(line for line in lines if "FAILED" in line)
    assert len(header) < len(failed)  # the message overhangs; the header is not padded to it


def test_times_and_rates_read_naturally():
    assert report.format_time(2.5e-6) == "2.5 us"
    assert report.format_time(0.0123) == "12.3 ms"
    assert report.format_time(3e-10) == "0.3 ns"
    assert report.format_spread([1e-6, 2e-6]) == "1.00-2.00 us"
    assert report.format_spread([794e-9, 2.02e-6]) == "794-2020 ns"
    assert report.format_rate(1.5e5, "ops/s") == "150k ops/s"
    assert report.format_rate(123.4, "GFLOP/s") == "123 GFLOP/s"
    assert "peak 50 GFLOP/s on 1 thread, 100 GFLOP/s on 2" in report.format_limits(LIMITS)
    assert "40 GB/s at 1 MiB, 20 GB/s at 64 MiB" in report.format_limits(LIMITS)


def test_plots_are_drawn_when_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks.plot import write_plots
    assert write_plots(tiny_suites(), str(tmp_path)) == [str(tmp_path / "tiny.png")]
    assert (tmp_path / "tiny.png").stat().st_size > 0


def test_the_gemm_suite_also_gets_its_gflops_curve(tmp_path):
    pytest.importorskip("matplotlib")
    import dataclasses

    from benchmarks.harness import CaseResult, Outcome, SuiteResult
    from benchmarks.plot import write_plots
    base = tiny_suites()[0].cases[0]
    cases = []
    for n in (64, 128):
        case = dataclasses.replace(base.case, name=f"square {n}", unit="GFLOP/s",
                                   work=2 * n ** 3)
        cases.append(CaseResult(case, [Outcome("numpy", "numpy", "ok", times=[1e-4, 1e-4])]))
    suite = SuiteResult("gemm", "squares", "ran", cases=cases)
    paths = write_plots([suite], str(tmp_path))
    assert str(tmp_path / "gemm_gflops.png") in paths
