"""no_sync, checkpointing and DistributedSampler under mpiexec.

no_sync: two backward passes inside it leave each rank's own gradient sums (they differ
between ranks); the backward after it gives every rank the average over ranks of all
three passes' sums, which each rank computes alone from every rank's data.
A parameter only the last rank's backward reaches: every rank gets the last rank's
gradient / world size for it (small buckets, so that the ranks' hooks fill them in
different orders and the buckets must still start in one order).
Checkpoint: rank 0 saves with eager.save, every rank loads it into a fresh model.
DistributedSampler: the ranks' shards (gathered) are disjoint, of equal length, and with
the padding cover the dataset; set_epoch changes the order the same way on every rank."""
import datetime
import sys

import numpy as np

import eager
import eager.distributed as dist
from eager.nn.functional import cross_entropy
from eager.nn.parallel import DistributedDataParallel
from eager.utils.data import DistributedSampler
from examples.mlp_classifier import make_model

dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=20))
rank, world = dist.get_rank(), dist.get_world_size()
eager.set_default_dtype(eager.float64)
checkpoint = sys.argv[1]


def micro_batch(r: int, i: int):
    rng = np.random.default_rng(100 * r + i)
    return eager.tensor(rng.standard_normal((5, 3))), eager.tensor(rng.integers(0, 2, 5))


def gathered(values: list) -> np.ndarray:
    mine = eager.tensor(values)
    parts = [eager.zeros_like(mine) for _ in range(world)]
    dist.all_gather(parts, mine)
    return np.stack([p.numpy() for p in parts])


# no_sync, then a synchronising backward
eager.manual_seed(0)
ddp = DistributedDataParallel(make_model(8, 2, 3))
with ddp.no_sync():
    for i in range(2):
        x, y = micro_batch(rank, i)
        cross_entropy(ddp(x), y).backward()
local = gathered(ddp.module[0].weight.grad.reshape(-1).tolist())
assert world == 1 or not np.allclose(local[0], local[1]), "inside no_sync: local gradients"
x, y = micro_batch(rank, 2)
cross_entropy(ddp(x), y).backward()
reference = make_model(8, 2, 3)
reference.load_state_dict(ddp.module.state_dict())
for r in range(world):
    for i in range(3):
        cross_entropy(reference(*micro_batch(r, i)[:1]), micro_batch(r, i)[1]).backward()
for (name, p), q in zip(ddp.module.named_parameters(), reference.parameters()):
    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy() / world, rtol=1e-12,
                               err_msg=f"rank {rank}: {name}'s gradient after no_sync")

# a parameter only the last rank's backward reaches
class Branches(eager.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = eager.nn.Linear(3, 2), eager.nn.Linear(3, 2)

    def forward(self, x, use_b: bool):
        return self.a(x) + self.b(x) if use_b else self.a(x)


branches = DistributedDataParallel(Branches(), bucket_cap_mb=1e-5)
assert len(branches._buckets) == 4
x, _ = micro_batch(rank, 3)
branches(x, rank == world - 1).sum().backward()
alone = Branches()
alone.load_state_dict(branches.module.state_dict())
alone(micro_batch(world - 1, 3)[0], True).sum().backward()
np.testing.assert_allclose(branches.module.b.weight.grad.numpy(),
                           alone.b.weight.grad.numpy() / world, rtol=1e-12)
grads = gathered(branches.module.a.weight.grad.reshape(-1).tolist())
assert (grads == grads[0]).all(), "every rank has the same averaged gradient"

# a checkpoint from rank 0, loaded on every rank
if rank == 0:
    with eager.no_grad():
        ddp.module[0].weight.add_(1.0)  # only rank 0's weights change
    eager.save(ddp.module.state_dict(), checkpoint)
dist.barrier()
restored = make_model(8, 2, 3)
restored.load_state_dict(eager.load(checkpoint))
weights = gathered(restored[0].weight.reshape(-1).tolist())
assert (weights == weights[0]).all(), "every rank loaded rank 0's checkpoint"

# DistributedSampler, its ranks from the process group
sampler = DistributedSampler(range(11), shuffle=True, seed=3)
orders = []
for epoch in range(2):
    sampler.set_epoch(epoch)
    shards = gathered(list(sampler))
    order = shards.T.reshape(-1).tolist()  # rank r holds positions r, r + world, ...
    assert len(sampler) == shards.shape[1] == -(-11 // world)
    assert sorted(order[:11]) == list(range(11)), "a permutation, then its first ones again"
    assert order[11:] == order[:len(order) - 11], "padding repeats the first indices"
    orders.append(order)
assert orders[0] != orders[1], "set_epoch reshuffles"
dist.destroy_process_group()
print(f"rank {rank}: no_sync, checkpoint and sampler ok")
