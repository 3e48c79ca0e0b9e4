"""DistributedDataParallel under mpiexec: 20 steps equal one process training on the
combined batch (float64), eagerly, with small buckets, compiled, as a compiled whole
step; no_sync, a parameter only one rank uses, a checkpoint from rank 0 and
DistributedSampler (programs/ddp_features.py); examples/ddp_train.py."""
import pytest

from tests.distributed.mpi import ROOT, launch, requires_mpi, succeeded


@requires_mpi
@pytest.mark.parametrize("ranks, options", [
    (2, ()), (3, ()), (3, ("--bucket-mb", "0.0005")), (2, ("--bucket-mb", "0.0005", "--bucket-view"))])
def test_ddp_training_equals_one_process_on_the_combined_batch(ranks, options):
    out = succeeded(launch("ddp_mlp", ranks, *options))
    assert f"DDP on {ranks} ranks equals one process on the combined batch" in out


@requires_mpi
@pytest.mark.slow
@pytest.mark.parametrize("option", ["--compile", "--compile-step"])
def test_compiled_ddp_training_equals_one_process_on_the_combined_batch(option):
    out = succeeded(launch("ddp_mlp", 2, option))
    assert "DDP on 2 ranks equals one process on the combined batch" in out


@requires_mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_no_sync_a_parameter_one_rank_uses_and_a_rank0_checkpoint(ranks, tmp_path):
    out = succeeded(launch("ddp_features", ranks, str(tmp_path / "checkpoint.pt")))
    for rank in range(ranks):
        assert f"rank {rank}: no_sync, checkpoint and sampler ok" in out


@requires_mpi
def test_the_ddp_example_trains_on_three_ranks():
    out = succeeded(launch(ROOT / "examples" / "ddp_train.py", 3, "--epochs", "3"))
    assert "epoch   2" in out and "checkpoint loaded on all 3 ranks, weights equal" in out
