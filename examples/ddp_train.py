"""Data-parallel training of the spiral MLP over MPI, one process per rank:

    mpiexec -n 4 python examples/ddp_train.py          (any -n; plain python is one rank)
    mpiexec -n 2 python examples/ddp_train.py --compile --epochs 5

Each rank reads its own shard of the data (DistributedSampler), runs forward and backward
on it, and DistributedDataParallel averages the gradients across ranks while backward
runs, so every rank takes the same optimiser step as one process on the whole batch
would. Rank 0 saves a checkpoint (eager.save); every rank loads it back and the ranks
check that they hold the same weights.

Install MPI with the project: pip install -e '.[distributed]' (mpi4py, mpich).
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile

if __package__ in (None, ""):  # run as a script: the repository's packages first
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import eager  # noqa: E402
import eager.distributed as dist  # noqa: E402
from eager import nn  # noqa: E402
from eager.nn.parallel import DistributedDataParallel  # noqa: E402
from eager.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402
from examples.mlp_classifier import make_model, spiral  # noqa: E402


def train(epochs: int, batch: int, hidden: int, lr: float, compile: bool,
          checkpoint: str) -> float:
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = spiral(200)
    data = TensorDataset(eager.tensor(x), eager.tensor(y))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=batch // world, sampler=sampler)
    eager.manual_seed(rank)  # different initial weights: DDP broadcasts rank 0's
    model = DistributedDataParallel(make_model(hidden))
    forward = eager.compile(model) if compile else model
    opt = eager.optim.Adam(model.parameters(), lr=lr)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total, count = 0.0, 0
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(forward(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, count = total + loss.item() * len(yb), count + len(yb)
        mean = eager.tensor([total / count])
        dist.all_reduce(mean, dist.ReduceOp.AVG)
        if rank == 0:
            print(f"epoch {epoch:3d}  loss {mean.item():.4f}  ({world} ranks)", flush=True)
    if rank == 0:
        eager.save(model.module.state_dict(), checkpoint)
    dist.barrier()  # the file is complete before any rank reads it
    restored = make_model(hidden)
    restored.load_state_dict(eager.load(checkpoint))
    _check_same_weights(restored)
    with eager.no_grad():
        accuracy = (restored(eager.tensor(x)).argmax(1) == eager.tensor(y)).float().mean()
    return accuracy.item()


def _check_same_weights(model) -> None:
    """Every rank holds rank 0's weights, bit for bit."""
    for name, p in model.state_dict().items():
        theirs = p.clone()
        dist.broadcast(theirs, src=0)
        if not eager.equal(theirs, p):
            raise RuntimeError(f"rank {dist.get_rank()}: {name} differs from rank 0's")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=48, help="global batch, split across ranks")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--compile", action="store_true", help="eager.compile the DDP model")
    parser.add_argument("--checkpoint", default=None, help="where rank 0 saves (default: a "
                        "temporary file)")
    parser.add_argument("--timeout", type=float, default=60, help="collectives' timeout, s")
    args = parser.parse_args(argv)
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=args.timeout))
    with tempfile.TemporaryDirectory() as folder:
        # every rank names rank 0's file (on several machines: give a shared --checkpoint)
        path = _from_rank0(args.checkpoint or os.path.join(folder, "ddp_mlp.pt"))
        accuracy = train(args.epochs, args.batch, args.hidden, args.lr, args.compile, path)
        dist.barrier()  # no rank still reads when rank 0's folder goes
    if dist.get_rank() == 0:
        print(f"accuracy {accuracy:.1%}; checkpoint loaded on all {dist.get_world_size()} "
              f"ranks, weights equal")
    dist.destroy_process_group()


def _from_rank0(text: str) -> str:
    """Rank 0's `text` on every rank."""
    encoded = eager.zeros(1024, dtype=eager.int32)
    if dist.get_rank() == 0:
        codes = text.encode()
        encoded[:len(codes)] = eager.tensor(list(codes), dtype=eager.int32)
    dist.broadcast(encoded, src=0)
    return bytes(c for c in encoded.tolist() if c).decode()


if __name__ == "__main__":
    main()
