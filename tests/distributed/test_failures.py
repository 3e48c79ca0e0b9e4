"""Collectives that cannot complete end every rank with an error naming the collective
and the shapes, never a hang. A failure the checks can see (shapes, kinds) is reported as
such, not as the timeout (2 s in programs/failures.py) that a rank left waiting would hit.
The launch's own guard is generous: it is there to end a hang, not to time the ranks."""
import pytest

from tests.distributed.mpi import launch, requires_mpi

TIMED_OUT = "did not complete within the 2 s timeout"


def _ended(mode: str, ranks: int, flags=()) -> str:
    """The stderr of a run of programs/failures.py that every rank entered and none passed."""
    result = launch("failures", ranks, mode, timeout=180, flags=flags)
    report = f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode != 0, report
    assert "the failure went unnoticed" not in result.stdout, report
    for rank in range(ranks):
        assert f"rank {rank} ready" in result.stdout, report
    return result.stderr


@requires_mpi
def test_a_shape_mismatch_raises_on_every_rank_naming_each_ranks_shape():
    err = _ended("shape", 2)
    for rank in range(2):
        assert (f"DistError: all_reduce on rank {rank}: the ranks called different collectives "
                f"or gave tensors that differ: rank 0: all_reduce(SUM, float32[4, 3]); "
                f"rank 1: all_reduce(SUM, float32[4, 2])") in err, err
    assert TIMED_OUT not in err, err  # found by the check, not by waiting


@requires_mpi
def test_different_collectives_on_different_ranks_raise_on_every_rank():
    err = _ended("kind", 3)
    assert err.count("ranks 0, 1: all_reduce(SUM, float32[4, 3]); rank 2: "
                     "broadcast(float32[4, 3], src=0)") == 3, err
    assert TIMED_OUT not in err, err


@requires_mpi
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["exits", "ddp"])
def test_a_rank_that_leaves_ends_the_others_with_a_timeout_error(mode):
    ranks = 3 if mode == "exits" else 2
    err = _ended(mode, ranks)
    what = ("all_reduce(SUM, float32[4, 3])" if mode == "exits" else
            "DistributedDataParallel's gradient all_reduce (bucket 1 of 1: 6 parameters")
    for rank in range(ranks - 1):
        assert f"DistBackendError: {what}" in err, err
        assert f"on rank {rank} of {ranks} {TIMED_OUT}" in err, err
        assert f"[rank {rank}] eager.distributed: aborting every rank" in err, err


@requires_mpi
def test_a_forward_after_a_backward_that_raised_midway_says_the_ranks_are_out_of_step():
    """The first rank to find it raises and the abort ends the other, which may not have
    got as far (under load it had not): one report at least, and no rank went on."""
    err = _ended("raises", 2)
    assert err.count("RuntimeError: DistributedDataParallel: the previous backward pass did "
                     "not finish its gradient all-reduces") >= 1, err


@requires_mpi
def test_a_rank_that_crashes_ends_the_job_at_once():
    """mpiexec (hydra) ends every rank when one dies without finalising MPI: the others
    are ended by the launcher, before their timeout could report."""
    err = _ended("crashes", 2)
    assert TIMED_OUT not in err, err


@requires_mpi
@pytest.mark.slow
def test_a_crash_with_the_launcher_keeping_the_others_ends_them_with_the_error():
    err = _ended("crashes", 3, flags=("-disable-auto-cleanup",))
    for rank in range(2):
        assert f"all_reduce(SUM, float32[4, 3]) on rank {rank} of 3 {TIMED_OUT}" in err, err
