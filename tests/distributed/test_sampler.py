"""DistributedSampler's shards with explicit num_replicas and rank (no MPI): PyTorch's
padding and strides; under mpiexec, programs/ddp_features.py checks it with the ranks
taken from the process group."""
import pytest

from eager.utils.data import DistributedSampler


def shards(n, replicas, **options):
    return [list(DistributedSampler(range(n), replicas, r, **options)) for r in range(replicas)]


def test_unshuffled_shards_are_strides_padded_with_the_first_indices():
    assert shards(10, 3, shuffle=False) == [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]
    assert shards(2, 4, shuffle=False) == [[0], [1], [0], [1]]


def test_drop_last_cuts_to_a_multiple_of_the_replicas():
    assert shards(10, 3, shuffle=False, drop_last=True) == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert len(DistributedSampler(range(10), 3, 0, drop_last=True)) == 3


@pytest.mark.parametrize("n, replicas", [(10, 2), (11, 3), (5, 4)])
def test_shuffled_shards_split_one_permutation_that_set_epoch_changes(n, replicas):
    samplers = [DistributedSampler(range(n), replicas, r, seed=7) for r in range(replicas)]
    orders = []
    for epoch in (0, 1):
        for s in samplers:
            s.set_epoch(epoch)
        parts = [list(s) for s in samplers]
        assert len({len(p) for p in parts}) == 1 and len(parts[0]) == len(samplers[0])
        order = [parts[i % replicas][i // replicas] for i in range(len(parts[0]) * replicas)]
        assert sorted(order[:n]) == list(range(n))
        orders.append(order)
    assert orders[0] != orders[1]
    assert [list(s) for s in samplers] == [list(s) for s in samplers], "repeatable"


def test_a_rank_outside_the_replicas_and_a_missing_group_are_errors():
    with pytest.raises(ValueError, match="Invalid rank 3"):
        DistributedSampler(range(4), 3, 3)
    with pytest.raises(RuntimeError, match="init_process_group"):
        DistributedSampler(range(4))
