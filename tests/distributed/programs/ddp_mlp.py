"""20 steps of DistributedDataParallel training of the MLP (float64, SGD with momentum),
each rank on its slice of a global batch, against one process training on the whole
batch: rank 0 trains the reference too and compares; every rank checks that it holds
rank 0's weights. Options: --compile (eager.compile the DDP model), --compile-step
(eager.compile the whole step: zero_grad, forward, loss, backward, optimiser step),
--bucket-mb (small: one bucket per parameter or so), --bucket-view (each .grad a view of
its bucket)."""
import argparse
import datetime

import numpy as np

import eager
import eager.distributed as dist
from eager.nn.functional import cross_entropy
from eager.nn.parallel import DistributedDataParallel
from examples.mlp_classifier import make_model

parser = argparse.ArgumentParser()
parser.add_argument("--compile", action="store_true")
parser.add_argument("--compile-step", action="store_true")
parser.add_argument("--bucket-mb", type=float, default=None)
parser.add_argument("--bucket-view", action="store_true")
args = parser.parse_args()
STEPS, PER_RANK, INPUTS, HIDDEN, CLASSES = 20, 8, 6, 16, 4

dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=20))
rank, world = dist.get_rank(), dist.get_world_size()
eager.set_default_dtype(eager.float64)


def batches():
    rng = np.random.default_rng(0)
    for _ in range(STEPS):
        yield (rng.standard_normal((PER_RANK * world, INPUTS)),
               rng.integers(0, CLASSES, PER_RANK * world))


def train(model, forward, part: slice, compile_step: bool = False):
    """The step function it ran (compiled or not)."""
    opt = eager.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        loss = cross_entropy(forward(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    step = eager.compile(step) if compile_step else step
    for x, y in batches():
        step(eager.tensor(x[part]), eager.tensor(y[part]))
    return step


eager.manual_seed(rank)  # each rank starts elsewhere: DDP broadcasts rank 0's weights
ddp = DistributedDataParallel(make_model(HIDDEN, CLASSES, INPUTS), bucket_cap_mb=args.bucket_mb,
                              gradient_as_bucket_view=args.bucket_view)
if args.bucket_mb is not None:
    assert len(ddp._buckets) > 1, "small buckets: several of them"
forward = eager.compile(ddp) if args.compile else ddp
step = train(ddp, forward, slice(rank * PER_RANK, (rank + 1) * PER_RANK), args.compile_step)
if args.compile:  # one graph, forward and backward compiled, replayed without Python
    explained = forward.explain()
    assert "graph breaks: none" in explained and "replays its graph without running Python" \
        in explained and f"backward ran {STEPS} time(s) compiled" in explained, explained
if args.compile_step:  # DDP's hooks (all-reduce, .grad set) run in backward()'s whole
    # step: the step replays (the weights equal one process's below)
    assert "replays its graph and whole steps without running Python" in step.explain(), \
        step.explain()
for name, p in ddp.module.state_dict().items():
    theirs = p.clone()
    dist.broadcast(theirs, src=0)
    assert eager.equal(theirs, p), f"rank {rank}: {name} differs from rank 0's"
if rank == 0:
    eager.manual_seed(0)
    alone = make_model(HIDDEN, CLASSES, INPUTS)
    train(alone, alone, slice(None))
    for (name, mine), theirs in zip(ddp.module.state_dict().items(), alone.state_dict().values()):
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    print(f"DDP on {world} ranks equals one process on the combined batch")
dist.destroy_process_group()
