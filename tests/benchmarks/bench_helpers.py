"""Shared pieces for the benchmark machinery's tests: tiny settings, a lineup whose
contenders are chosen by the test, and cases built from plain functions. (Not a
conftest.py: other test folders have their own, and tests import these by name.)"""
from benchmarks.contenders import Lineup
from benchmarks.harness import Case, Impl, Settings

TINY = Settings(rounds=3, batch_s=0.0, warmup_rounds=1, self_timed_rounds=2, number=1,
                quick=True)
# The suites' gates: each contender checked, then timed once (a second call, the first
# that a cache serves). Rounds and warm-ups are test_bench_harness's; in the gates they
# bought only time: four fresh processes per first-call contender instead of two.
ONCE = Settings(rounds=1, batch_s=0.0, warmup_rounds=0, self_timed_rounds=1, number=1,
                quick=True)


def lineup(**missing):
    """A lineup of contenders 'A', 'B', 'C' (and any named here, with the reason they
    are missing), without importing torch."""
    checks = {name: (lambda: None) for name in "ABC"}
    checks.update({name: (lambda reason=reason: reason) for name, reason in missing.items()})
    return Lineup(checks=checks)


def constant(value, log=None, name=None):
    """An Impl build function whose timed function returns `value` (and logs `name`)."""
    def build():
        def fn():
            if log is not None:
                log.append(name)
            return value
        return fn
    return build


def case_of(answers: dict, expected=1.0, **options) -> Case:
    """A case whose contender `name` answers `answers[name]`."""
    return Case("tiny", [Impl(name, constant(v)) for name, v in answers.items()],
                expected=lambda: expected, **options)
