"""The harness on tiny cases: order of calls, the correctness gate, skips and errors."""
import numpy as np
import pytest
from bench_helpers import TINY, case_of, constant, lineup

from benchmarks.harness import Case, Impl, calibrate, mismatch, run_case


def test_contenders_alternate_after_the_correctness_check():
    log = []
    case = Case("tiny", [Impl(n, constant(1.0, log, n)) for n in "ABC"], expected=lambda: 1.0)
    result = run_case(case, lineup(), TINY)
    # one correctness call each, then warm-up and timed rounds taken in turns, each round
    # starting one contender later (none always follows the same one)
    rounds = TINY.warmup_rounds + TINY.rounds
    assert log == list("ABC") + [name for r in range(rounds)
                                 for name in ("ABC" * 2)[r % 3:r % 3 + 3]]
    assert log[3:6] == list("ABC") and log[6:9] == list("BCA")
    assert all(len(o.times) == TINY.rounds for o in result.outcomes)


def test_a_wrong_answer_is_failed_and_never_timed():
    log = []
    case = Case("tiny", [Impl("A", constant(1.0, log, "A")), Impl("B", constant(2.0, log, "B"))],
                expected=lambda: 1.0)
    result = run_case(case, lineup(), TINY)
    good, wrong = result.outcomes
    assert good.status == "ok" and len(good.times) == TINY.rounds
    assert wrong.status == "failed" and wrong.times == []
    assert "max abs error 1" in wrong.reason
    assert log.count("B") == 1  # the correctness call only


def test_a_missing_contender_is_skipped_with_its_reason():
    result = run_case(case_of({"A": 1.0, "torch eager": 1.0}),
                      lineup(**{"torch eager": "torch is not importable"}), TINY)
    assert [o.status for o in result.outcomes] == ["ok", "skipped"]
    assert result.outcomes[1].reason == "torch is not importable"


def test_a_contender_that_raises_is_an_error_not_a_crash():
    def broken():
        raise ValueError("no kernel")
    case = Case("tiny", [Impl("A", constant(1.0)), Impl("B", broken)], expected=lambda: 1.0)
    result = run_case(case, lineup(), TINY)
    assert result.outcomes[1].status == "error"
    assert result.outcomes[1].reason == "ValueError: no kernel"


def test_ratio_is_relative_to_the_first_available_reference():
    case = case_of({"A": 1.0, "B": 1.0}, reference=("missing", "B"))
    result = run_case(case, lineup(), TINY)
    assert result.reference.label == "B"
    assert result.ratio(result.outcomes[1]) == 1.0
    default = run_case(case_of({"A": 1.0, "B": 1.0}), lineup(), TINY)
    assert default.reference.label == "A"


def test_throughput_uses_the_unit_and_the_work_per_call():
    result = run_case(case_of({"A": 1.0}, unit="GFLOP/s", work=4e9), lineup(), TINY)
    outcome = result.outcomes[0]
    assert result.throughput(outcome) == pytest.approx(4 / outcome.median)
    assert run_case(case_of({"A": 1.0}, unit=""), lineup(), TINY).throughput(outcome) is None


def test_self_timed_impls_report_their_own_durations():
    case = Case("import", [Impl("A", constant(0.25))], self_timed=True)
    result = run_case(case, lineup(), TINY)
    assert result.outcomes[0].times == [0.25] * TINY.self_timed_rounds


def test_context_is_entered_around_every_batch():
    entered = []

    class Recorder:
        def __enter__(self):
            entered.append(True)

        def __exit__(self, *exc):
            return False
    case = Case("tiny", [Impl("A", constant(1.0), context=Recorder)], expected=lambda: 1.0)
    run_case(case, lineup(), TINY)
    assert len(entered) == 1 + TINY.warmup_rounds + TINY.rounds


def test_mismatch_compares_tensors_tuples_and_shapes():
    assert mismatch((np.ones(2, np.float32), 3.0), (np.ones(2), 3.0), 1e-6, 0) is None
    assert "shape (2,)" in mismatch(np.ones(2), np.ones(3), 1e-6, 0)
    assert "result 1" in mismatch((1.0, 2.0), (1.0, 2.5), 1e-6, 0)
    assert "2 results" in mismatch((1.0, 2.0), 1.0, 1e-6, 0)


def test_calibrate_sizes_batches_to_the_target():
    assert calibrate(lambda: None, 0.0) == 1
    assert calibrate(lambda: None, 1e-4) > 1


def test_calibrate_is_not_fooled_by_one_slow_call():
    """One call that stalls (a launcher loaded at a kernel's second call) must not size
    every batch at one call."""
    import time
    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.05)
    assert calibrate(fn, 2e-3) > 1


def test_labels_within_a_case_are_unique():
    with pytest.raises(ValueError, match="share a label"):
        Case("tiny", [Impl("A", constant(1.0)), Impl("A", constant(1.0))])
