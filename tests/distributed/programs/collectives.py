"""Every collective against numpy, run under mpiexec: each rank makes its tensors from a
seed of its rank, so every rank can compute the numpy answer from all ranks' data."""
import datetime

import numpy as np

import eager
import eager.distributed as dist

dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()


def data(r: int, shape=(3, 4), dtype=np.float64) -> np.ndarray:
    values = np.random.default_rng(r).uniform(0.5, 1.5, shape)
    return values.astype(dtype) if dtype != np.int64 else (values * 10).astype(np.int64)


def everyone(shape=(3, 4), dtype=np.float64) -> np.ndarray:
    return np.stack([data(r, shape, dtype) for r in range(world)])


def check(name: str, got, want) -> None:
    got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-12, atol=0):
        raise AssertionError(f"rank {rank}: {name}: got {got}, expected {want}")


for op, reduce in [("SUM", np.sum), ("AVG", np.mean), ("MAX", np.max), ("MIN", np.min),
                   ("PRODUCT", np.prod)]:
    t = eager.tensor(data(rank))
    address, version = t.data_ptr(), t._version
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    check(f"all_reduce {op}", t, reduce(everyone(), axis=0))
    assert t.data_ptr() == address and t._version == version + 1, "all_reduce is in place"

t = eager.tensor(data(rank, dtype=np.int64))
dist.all_reduce(t)
check("all_reduce int64", t, everyone(dtype=np.int64).sum(0))
t = eager.tensor(data(rank, dtype=np.int64))
dist.all_reduce(t, op=dist.ReduceOp.BOR)
check("all_reduce BOR", t, np.bitwise_or.reduce(everyone(dtype=np.int64), axis=0))
t = eager.tensor(data(rank, (4, 3))).t()  # not contiguous: through a copy
dist.all_reduce(t, op=dist.ReduceOp.MAX)
check("all_reduce of a transposed view", t, everyone((4, 3)).max(0).T)
work = dist.all_reduce(t := eager.tensor(data(rank)), async_op=True)
assert work.wait() and work.is_completed()
check("all_reduce async_op", t, everyone().sum(0))

t = eager.tensor(data(rank))
dist.broadcast(t, src=world - 1)
check("broadcast", t, data(world - 1))

outputs = [eager.zeros(3, 4, dtype=eager.float64) for _ in range(world)]
dist.all_gather(outputs, eager.tensor(data(rank)))
check("all_gather", eager.stack(outputs), everyone())
output = eager.zeros(world * 3, 4, dtype=eager.float64)
dist.all_gather_into_tensor(output, eager.tensor(data(rank)))
check("all_gather_into_tensor", output, everyone().reshape(world * 3, 4))

blocks = everyone((world, 2, 5))  # [rank giving, block, ...]
for op, reduce in [("SUM", np.sum), ("MAX", np.max), ("AVG", np.mean)]:
    output = eager.zeros(2, 5, dtype=eager.float64)
    dist.reduce_scatter(output, [eager.tensor(b) for b in data(rank, (world, 2, 5))],
                        op=getattr(dist.ReduceOp, op))
    check(f"reduce_scatter {op}", output, reduce(blocks[:, rank], axis=0))
output = eager.zeros(2, 5, dtype=eager.float64)
dist.reduce_scatter_tensor(output, eager.tensor(data(rank, (world, 2, 5))))
check("reduce_scatter_tensor", output, blocks[:, rank].sum(0))

dist.barrier()
dist.destroy_process_group()
print(f"rank {rank} of {world}: collectives match numpy")
