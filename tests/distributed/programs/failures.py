"""Collectives that cannot complete, under mpiexec with a 2 s timeout. The mode:

shape     every rank all-reduces, the last one a tensor of another shape
kind      the last rank broadcasts while the others all-reduce
exits     the last rank leaves (sys.exit(0), MPI finalised) before an all-reduce
crashes   the last rank dies (os._exit(3), no MPI finalise) before an all-reduce
ddp       the last rank leaves before the backward of a DistributedDataParallel step
raises    backward raises on every rank after DDP started a bucket; the next forward says so
"""
import datetime
import os
import sys

import eager
import eager.distributed as dist
from eager.nn.parallel import DistributedDataParallel
from examples.mlp_classifier import make_model

# Everything slow comes before the first collective: with a 2 s timeout, a rank still
# importing under load would otherwise time the others out before the failure under test.
module = make_model(8, 2, 3)

mode = sys.argv[1]
dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=2))
rank, world = dist.get_rank(), dist.get_world_size()
last = rank == world - 1
dist.barrier()
print(f"rank {rank} ready", flush=True)
if mode == "shape":
    dist.all_reduce(eager.ones(4, 3 if not last else 2))
elif mode == "kind":
    t = eager.ones(4, 3)
    dist.broadcast(t, src=0) if last else dist.all_reduce(t)
elif mode in ("exits", "crashes"):
    if last:
        sys.exit(0) if mode == "exits" else os._exit(3)
    dist.all_reduce(eager.ones(4, 3))
elif mode == "ddp":
    model = DistributedDataParallel(module)
    loss = model(eager.ones(5, 3)).sum()
    if last:
        sys.exit(0)
    loss.backward()
elif mode == "raises":
    model = DistributedDataParallel(module, bucket_cap_mb=1e-5)
    hidden = model.module[0](eager.ones(5, 3))
    hidden.register_hook(lambda grad: 1 / 0)  # after the later layers' buckets started
    try:
        model.module[4](model.module[3](model.module[2](model.module[1](hidden)))).sum() \
            .backward()
    except ZeroDivisionError:
        print(f"rank {rank}: backward raised", flush=True)
    model(eager.ones(5, 3))
print(f"rank {rank} finished: the failure went unnoticed", flush=True)
