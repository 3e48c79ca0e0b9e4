"""Data-parallel training over MPI on this machine: DDP step time at 1 and 2 ranks and the
scaling efficiency, the gradient all-reduce's bandwidth beside an osu-style MPI ping-pong
measured in the same run, what the collectives' cross-rank check costs, and how much of
the all-reduce hides behind backward.

    python -m benchmarks.distributed            # the report (three mpiexec launches)
    python -m benchmarks.distributed --quick    # fewer steps and repetitions
    python -m benchmarks distributed            # the step times as a suite of the harness

Every figure comes from `mpiexec -n N python -m benchmarks.distributed --worker ...`
with one BLAS and one kiln thread per rank (OMP_NUM_THREADS=KILN_NUM_THREADS=1), so one
rank leaves a core idle that two ranks use. The model: an MLP 784-1024-1024-10 (1.86 M
float32 parameters, 7.5 MB of gradients, in 2 MB buckets), SGD, 64 samples per rank per
step (weak scaling: the global batch grows with the ranks); scaling efficiency = 1-rank step time /
N-rank step time (1.0: N times the samples per second).

Bandwidths are algorithm bandwidths, bytes reduced / time. The ping-pong is osu_latency's
loop (blocking MPI_Send/MPI_Recv between ranks 0 and 1) at the gradient's size: one-way
time = round trip / 2, bandwidth = bytes / one-way time. An all-reduce of 2 ranks moves
each byte at least once each way, so half the ping-pong's bandwidth is about its best.

Overlap: backward alone (in no_sync), DDP's bucket all-reduces alone (started together
and waited for, as at the end of backward), and backward with DDP's all-reduces; hidden =
(backward + all-reduces - backward with them) / all-reduces, 0 when none hides. MPI moves
a non-blocking collective on only inside MPI calls, which DDP makes from each parameter's
gradient hook; this model has six parameters, so there are few such calls.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.contenders import mpi_missing, mpiexec

ROOT = Path(__file__).resolve().parents[1]
INPUTS, HIDDEN, CLASSES, PER_RANK = 784, 1024, 10, 64
BUCKET_MB = 2  # buckets [last layer, b2], [w2], [b1], [w1]: w2's can travel during layer 1
MODEL = f"MLP {INPUTS}-{HIDDEN}-{HIDDEN}-{CLASSES}, {PER_RANK} samples per rank, SGD"


def launch(ranks: int, *worker_args: str) -> dict:
    """Rank 0's JSON from a worker run on `ranks` processes."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
        KILN_NUM_THREADS="1")
    out = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, "-m",
                          "benchmarks.distributed", "--worker", *worker_args],
                         env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"mpiexec -n {ranks} worker {worker_args} failed "
                           f"(exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# the workers, run under mpiexec ---------------------------------------------------------
def _times(fn, repeat: int) -> list[float]:
    """Seconds of each of `repeat` calls (after one more untimed)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _timed(fn, repeat: int) -> float:
    """Median seconds of `repeat` calls (after one more untimed)."""
    return statistics.median(_times(fn, repeat))


def _step_worker(steps: int) -> dict:
    """Median step time; with several ranks, backward alone / all-reduces alone / both."""
    import numpy as np

    import eager
    import eager.distributed as dist
    from eager.distributed import collectives
    from eager.nn.functional import cross_entropy
    from eager.nn.parallel import DistributedDataParallel
    from examples.mlp_classifier import make_model
    dist.init_process_group("mpi")
    rng = np.random.default_rng(dist.get_rank())
    x = eager.tensor(rng.standard_normal((PER_RANK, INPUTS), dtype=np.float32))
    y = eager.tensor(rng.integers(0, CLASSES, PER_RANK))
    model = DistributedDataParallel(make_model(HIDDEN, CLASSES, INPUTS),
                                    bucket_cap_mb=BUCKET_MB)
    opt = eager.optim.SGD(model.parameters(), lr=1e-3)

    def step() -> None:
        loss = cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def backward() -> float:
        """Seconds of one backward pass (not its forward)."""
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        start = time.perf_counter()
        loss.backward()
        return time.perf_counter() - start

    def all_reduces() -> None:
        """DDP's buckets all-reduced (their own buffers, as in backward), nothing else."""
        works = [collectives.start_all_reduce(model._group, b.buffer, "all_reduce")
                 for b in model._buckets]
        for w in works:
            w.wait()

    dist.barrier()
    times = _times(step, steps)
    result = {"rank": dist.get_rank(), "ranks": dist.get_world_size(),
              "step_s": statistics.median(times), "step_times": times}
    if dist.get_world_size() > 1:
        with model.no_sync():
            alone = statistics.median(backward() for _ in range(steps))
        result.update(backward_s=alone, all_reduce_s=_timed(all_reduces, steps),
                      backward_with_sync_s=statistics.median(backward() for _ in range(steps)),
                      buckets=len(model._buckets))
    dist.destroy_process_group()
    return result


def _comm_worker(repeat: int) -> dict:
    """Ping-pong and all-reduce of the gradient's bytes, and the cross-rank check's cost."""
    import numpy as np

    import eager
    import eager.distributed as dist
    from eager.distributed import collectives, process_group
    dist.init_process_group("mpi")
    group = process_group.default_group()
    comm, MPI, rank = group.comm, group.MPI, group.rank
    params = (INPUTS + 1) * HIDDEN + (HIDDEN + 1) * HIDDEN + (HIDDEN + 1) * CLASSES
    big, small = np.ones(params, np.float32), np.ones(2, np.float32)

    def ping_pong(buffer):
        def run() -> None:
            if rank == 0:
                comm.Send(buffer, dest=1)
                comm.Recv(buffer, source=1)
            elif rank == 1:
                comm.Recv(buffer, source=0)
                comm.Send(buffer, dest=0)
        return run

    tensor, scalar = eager.from_numpy(big.copy()), eager.from_numpy(small[:1].copy())
    figures = {
        "rank": rank, "bytes": big.nbytes,
        "ping_pong_one_way_s": _timed(ping_pong(big), repeat) / 2,
        "ping_pong_latency_s": _timed(ping_pong(small), 10 * repeat) / 2,
        "mpi_allreduce_s": _timed(lambda: comm.Allreduce(MPI.IN_PLACE, big, MPI.SUM), repeat),
        "kiln_all_reduce_s": _timed(lambda: dist.all_reduce(tensor), repeat),
        "mpi_allreduce_scalar_s": _timed(
            lambda: comm.Allreduce(MPI.IN_PLACE, small[:1], MPI.SUM), 10 * repeat),
        "kiln_all_reduce_scalar_s": _timed(lambda: dist.all_reduce(scalar), 10 * repeat),
        "check_s": _timed(lambda: collectives._check(group, "all_reduce",
                                                     dist.ReduceOp.SUM, scalar), 10 * repeat),
    }
    dist.destroy_process_group()
    return figures


# the report and the suite -----------------------------------------------------------------
def measure(quick: bool) -> dict:
    steps, repeat = (10, 10) if quick else (40, 40)
    load = os.getloadavg()[0]  # other work on the cores skews every figure here
    one, two = launch(1, "step", str(steps)), launch(2, "step", str(steps))
    return {"one_rank": one, "two_ranks": two, "comm": launch(2, "comm", str(repeat)),
            "load_average": load, "cores": os.cpu_count()}


def report(figures: dict) -> str:
    one, two, comm = figures["one_rank"], figures["two_ranks"], figures["comm"]
    mb = comm["bytes"] / 1e6

    def gbs(seconds: float) -> float:
        return comm["bytes"] / seconds / 1e9
    hidden = (two["backward_s"] + two["all_reduce_s"] - two["backward_with_sync_s"])
    lines = [
        f"DDP step, {MODEL} (load average {figures.get('load_average', 0):.1f} on "
        f"{figures.get('cores', '?')} cores before the run):",
        f"  1 rank  {one['step_s'] * 1e3:7.2f} ms/step   {PER_RANK / one['step_s']:7.0f} "
        f"samples/s",
        f"  2 ranks {two['step_s'] * 1e3:7.2f} ms/step   {2 * PER_RANK / two['step_s']:7.0f} "
        f"samples/s   scaling efficiency {one['step_s'] / two['step_s']:.0%}",
        f"gradient all-reduce, {mb:.1f} MB float32, 2 ranks:",
        f"  MPI ping-pong (osu_latency loop)  {comm['ping_pong_one_way_s'] * 1e3:6.2f} ms "
        f"one way  {gbs(comm['ping_pong_one_way_s']):5.2f} GB/s   "
        f"(8 bytes: {comm['ping_pong_latency_s'] * 1e6:.1f} us)",
        f"  MPI_Allreduce (mpi4py)            {comm['mpi_allreduce_s'] * 1e3:6.2f} ms"
        f"          {gbs(comm['mpi_allreduce_s']):5.2f} GB/s",
        f"  eager.distributed.all_reduce      {comm['kiln_all_reduce_s'] * 1e3:6.2f} ms"
        f"          {gbs(comm['kiln_all_reduce_s']):5.2f} GB/s",
        f"  cross-rank check per collective: {comm['check_s'] * 1e6:.1f} us; a 4-byte "
        f"all_reduce {comm['kiln_all_reduce_scalar_s'] * 1e6:.1f} us with it, MPI_Allreduce "
        f"{comm['mpi_allreduce_scalar_s'] * 1e6:.1f} us",
        f"overlap, 2 ranks, {two['buckets']} bucket(s): backward alone "
        f"{two['backward_s'] * 1e3:.2f} ms, all-reduces alone {two['all_reduce_s'] * 1e3:.2f} "
        f"ms, backward with them {two['backward_with_sync_s'] * 1e3:.2f} ms: "
        f"{max(0.0, hidden / two['all_reduce_s']):.0%} of the all-reduce hidden",
    ]
    return "\n".join(lines)


QUICK_STEPS, QUICK_LAUNCH_ROUNDS = 10, 4


def cases(quick: bool) -> list:
    """The harness's view: DDP step time at 1 and 2 ranks. A timed call is one launch of
    40 steps; with --quick, one launch's steps in groups of QUICK_STEPS give several
    calls' medians (an mpiexec launch and its imports cost seconds: launching each of
    the check's and rounds' calls anew made this suite a third of the quick run)."""
    from benchmarks.harness import Case, Impl

    def ranks(n: int):
        if not quick:
            return lambda: (lambda: launch(n, "step", "40")["step_s"])
        return lambda: _GroupedSteps(n).next
    return [Case(f"DDP step, {MODEL}", [Impl("kiln eager", ranks(1), label="kiln DDP, 1 rank"),
                                         Impl("kiln eager", ranks(2), label="kiln DDP, 2 ranks")],
                 unit="steps/s", self_timed=True)]


class _GroupedSteps:
    """Median step times of groups of QUICK_STEPS steps, QUICK_LAUNCH_ROUNDS groups to a
    launch on `ranks` processes, launched again when they are used up."""

    def __init__(self, ranks: int):
        self.ranks, self.medians = ranks, []

    def next(self) -> float:
        if not self.medians:
            times = launch(self.ranks, "step", str(QUICK_STEPS * QUICK_LAUNCH_ROUNDS))[
                "step_times"]
            self.medians = [statistics.median(times[i:i + QUICK_STEPS])
                            for i in range(0, len(times), QUICK_STEPS)]
        return self.medians.pop(0)


def notes(quick: bool) -> str:
    return ("2 ranks do twice the samples per step (weak scaling); "
            "python -m benchmarks.distributed reports bandwidth, ping-pong and overlap")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and repetitions")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        kind, count = args.worker
        figures = (_step_worker if kind == "step" else _comm_worker)(int(count))
        if figures.pop("rank") == 0:
            print(json.dumps(figures))
        return
    reason = mpi_missing()
    if reason:
        sys.exit(f"benchmarks.distributed: skipped: {reason}")
    figures = measure(args.quick)
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
