"""The distributed suite: registered, skipped with its reason where mpi4py is missing (so
`python -m benchmarks --quick` still runs), and its report's arithmetic, on made-up
figures (running it takes mpiexec: python -m benchmarks.distributed)."""
import importlib.util

from benchmarks import contenders, distributed, registry


def test_the_suite_is_skipped_naming_the_extra_without_mpi4py(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(contenders.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mpi4py" else real(name, *a))
    reason = registry.SUITES["distributed"].why_skipped()
    assert reason == "needs mpi4py and MPI (pip install -e '.[distributed]')"


def test_the_report_gives_efficiency_bandwidths_and_the_hidden_share():
    figures = {
        "one_rank": {"ranks": 1, "step_s": 0.008},
        "two_ranks": {"ranks": 2, "step_s": 0.010, "backward_s": 0.004, "all_reduce_s": 0.002,
                      "backward_with_sync_s": 0.005, "buckets": 2},
        "comm": {"bytes": 7_500_000, "ping_pong_one_way_s": 0.0005,
                 "ping_pong_latency_s": 2e-6, "mpi_allreduce_s": 0.0015,
                 "kiln_all_reduce_s": 0.002, "mpi_allreduce_scalar_s": 2e-6,
                 "kiln_all_reduce_scalar_s": 1e-5, "check_s": 7e-6}}
    text = distributed.report(figures)
    assert "scaling efficiency 80%" in text
    assert "15.00 GB/s" in text and "3.75 GB/s" in text  # ping-pong, kiln's all_reduce
    assert "cross-rank check per collective: 7.0 us" in text
    assert "50% of the all-reduce hidden" in text  # (4 + 2 - 5) / 2


def test_quick_rounds_are_medians_of_groups_of_one_launchs_steps(monkeypatch):
    launches = []

    def launch(ranks, mode, steps):
        launches.append((ranks, mode, steps))
        return {"step_times": [float(len(launches) * 100 + i) for i in range(int(steps))]}
    monkeypatch.setattr(distributed, "launch", launch)
    monkeypatch.setattr(distributed, "QUICK_STEPS", 3)
    monkeypatch.setattr(distributed, "QUICK_LAUNCH_ROUNDS", 2)
    (case,) = distributed.cases(quick=True)
    one_rank = case.impls[0].build()
    assert [one_rank() for _ in range(3)] == [101.0, 104.0, 201.0]
    assert launches == [(1, "step", "6"), (1, "step", "6")]
