"""The suite registry and the contenders' availability, torch included or simulated
missing."""
import sys

import pytest
from bench_helpers import TINY, lineup

from benchmarks import cli, registry
from benchmarks.contenders import Lineup
from benchmarks.harness import Case, Impl, run_suite


@pytest.fixture
def suites(monkeypatch):
    """An empty registry for the test to fill; the real one is restored afterwards."""
    monkeypatch.setattr(registry, "SUITES", {})
    monkeypatch.setattr(cli, "SUITES", registry.SUITES)
    return registry.SUITES


def cases(quick):
    """This module doubles as a suite module for the registry tests."""
    return [Case(f"quick={quick}", [Impl("A", lambda: lambda: 1.0)], expected=lambda: 1.0)]


def test_eager_overhead_is_registered_and_runs_here():
    suite = registry.SUITES["eager_overhead"]
    assert suite.why_skipped() is None
    assert [s.name for s in registry.lookup([])] == list(registry.SUITES)


def test_lookup_names_the_unknown_and_the_known_suites():
    with pytest.raises(ValueError, match="unknown suite.*nope.*known: .*eager_overhead"):
        registry.lookup(["eager_overhead", "nope"])


def test_a_suite_runs_its_cases_with_the_quick_flag(suites):
    registry.register("tiny", __name__, "a tiny suite")
    result = run_suite(suites["tiny"], lineup(), TINY)
    assert result.status == "ran"
    assert [c.case.name for c in result.cases] == ["quick=True"]
    assert result.failures == 0


def test_a_suite_with_a_missing_requirement_is_skipped_with_the_reason(suites):
    registry.register("cuda", "benchmarks.no_such_module", "GPU kernels",
                      requires=(lambda: None, lambda: "needs a GPU (no CUDA device was found)"))
    result = run_suite(suites["cuda"], lineup(), TINY)
    assert (result.status, result.reason) == ("skipped", "needs a GPU (no CUDA device was found)")
    assert "cuda" in cli.list_suites() and "skipped: needs a GPU" in cli.list_suites()


def test_registering_a_name_twice_is_an_error(suites):
    registry.register("tiny", __name__, "a tiny suite")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("tiny", __name__, "again")


def test_torch_missing_is_a_skip_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    assert "torch is not importable" in Lineup().why_skipped("torch eager")
    assert Lineup().require_torch() is None
    assert "--compare torch needs PyTorch" in Lineup(torch="required").require_torch()


def test_torch_can_be_left_out_and_unknown_contenders_are_skipped():
    assert "left out" in Lineup(torch="off").why_skipped("torch eager")
    assert "unknown contender" in Lineup().why_skipped("jax")
    assert Lineup().why_skipped("numpy") is None


def test_eager_overhead_runs_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    from benchmarks import eager_overhead
    from benchmarks.harness import run_case
    matmul = eager_overhead.cases(quick=True)[0]
    result = run_case(matmul, Lineup(), TINY)
    status = {o.label: o.status for o in result.outcomes}
    assert status == {"kiln eager": "ok", "numpy": "ok", "torch eager": "skipped"}
    assert result.reference.label == "numpy"
