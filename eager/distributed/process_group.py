"""The process group: MPI's world (through mpi4py), its rank and size, and waiting on MPI
requests until a deadline.

Every collective is a non-blocking MPI request polled until it completes or the group's
timeout passes (MPI moves a request on only inside MPI calls, so the first milliseconds
poll without pause, yielding the core to any process that wants it, as MPI's own blocking
calls spin; later polls sleep between, up to 0.2 ms), so a rank that died or never joins ends in a
DistBackendError naming the collective, never in a hang. A timed-out request cannot be
taken back, so the group is then broken: later collectives raise at once, and when the
process exits it calls MPI_Abort instead of MPI_Finalize (which would wait for the
request), after a short grace so that the other ranks, timing out too, say why.

mpi4py is imported by init_process_group, not by `import eager.distributed`.
"""
from __future__ import annotations

import atexit
import datetime
import os
import sys
import time

DEFAULT_TIMEOUT = datetime.timedelta(seconds=60)
SPIN_S = 5e-3  # poll without sleeping this long (a 7.5 MB all-reduce here: 1.4 ms)
LONGEST_SLEEP_S = 200e-6  # then sleep between polls, doubling up to this
ABORT_GRACE_S = 5.0  # at most this long (and half the timeout) before MPI_Abort


class DistError(RuntimeError):
    """A collective the ranks did not agree on (PyTorch's torch.distributed.DistError)."""
    __module__ = "eager.distributed"


class DistBackendError(DistError):
    """A collective that did not complete: a rank died or never joined it."""
    __module__ = "eager.distributed"


def _mpi():
    """mpi4py's MPI module (initialising MPI), or a RuntimeError saying how to get it."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError("eager.distributed's MPI backend needs mpi4py and an MPI "
                           "library: pip install -e '.[distributed]' (mpi4py, mpich)") from e
    return MPI


def is_available() -> bool:
    """Whether mpi4py can be imported (without importing it)."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


class ProcessGroup:
    """A duplicate of MPI_COMM_WORLD (so the user's own MPI traffic never meets ours),
    with the collectives' timeout and the count of collectives run (checked across ranks:
    a rank that skipped one is found)."""

    def __init__(self, MPI, comm, timeout: datetime.timedelta):
        self.MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout_s = timeout.total_seconds()
        self.sequence = 0
        self.broken: str | None = None

    def check_usable(self, what: str) -> None:
        if self.broken is not None:
            raise DistBackendError(f"{what} on rank {self.rank}: the process group is broken "
                                   f"by an earlier error: {self.broken}")

    def wait(self, requests: list, what: str, timeout_s: float | None = None) -> None:
        """Poll `requests` until all complete; past the deadline, or on an MPI error,
        break the group and raise DistBackendError naming `what`."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            self._poll(requests, what, timeout_s)
        except KeyboardInterrupt:  # the request stays pending: abort at exit, not finalise
            self.broken = f"{what} on rank {self.rank} of {self.size} was interrupted"
            raise

    def _poll(self, requests: list, what: str, timeout_s: float) -> None:
        start = time.monotonic()
        pause = 0.0
        while True:
            try:
                if self.MPI.Request.Testall(requests):
                    return
            except self.MPI.Exception as e:
                self._break(f"{what} on rank {self.rank} of {self.size} failed in MPI: "
                            f"{e.Get_error_string()}")
            waited = time.monotonic() - start
            if waited > timeout_s:
                self._break(f"{what} on rank {self.rank} of {self.size} did not complete "
                            f"within the {timeout_s:g} s timeout: not every rank joined it "
                            f"(a rank has died, or runs a different collective)")
            if waited < SPIN_S:
                os.sched_yield()
            else:
                pause = min(LONGEST_SLEEP_S, max(2 * pause, 20e-6))
                time.sleep(pause)

    def _break(self, message: str):
        self.broken = message
        raise DistBackendError(message)

    def at_exit(self) -> None:
        """MPI_Abort where a collective was left pending (MPI_Finalize would wait for it);
        first a grace, so that the other ranks' timeouts, close behind, print theirs."""
        if self.broken is None:
            return
        print(f"[rank {self.rank}] eager.distributed: aborting every rank: {self.broken}",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        time.sleep(min(ABORT_GRACE_S, self.timeout_s / 2))
        self.comm.Abort(1)


_group: ProcessGroup | None = None


def init_process_group(backend: str = "mpi", init_method=None, timeout=None,
                       world_size: int = -1, rank: int = -1, store=None,
                       group_name: str = "", pg_options=None, device_id=None) -> None:
    """Join the MPI job this process was launched in (`mpiexec -n N python ...`; a plain
    `python ...` is a world of one). The rank and world size come from MPI; given ones
    must agree. `timeout` (a datetime.timedelta, default 60 s) bounds every collective."""
    global _group
    if backend not in ("mpi", None):
        raise ValueError(f"eager.distributed supports backend='mpi' only, not {backend!r}")
    if _group is not None:
        raise RuntimeError("trying to initialize the default process group twice!")
    if timeout is not None and not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta, not {type(timeout).__name__}")
    MPI = _mpi()
    comm = MPI.COMM_WORLD.Dup()
    group = ProcessGroup(MPI, comm, timeout or DEFAULT_TIMEOUT)
    for name, given, actual in (("world_size", world_size, group.size),
                                ("rank", rank, group.rank)):
        if given not in (-1, None) and given != actual:
            comm.Free()
            raise ValueError(f"init_process_group({name}={given}), but MPI launched this "
                             f"process with {name} {actual}")
    _group = group
    atexit.register(group.at_exit)  # runs before mpi4py's MPI_Finalize (registered earlier)


def destroy_process_group(group=None) -> None:
    global _group
    if _group is None:
        raise ValueError("Default process group has not been initialized, please make sure "
                         "to call init_process_group.")
    if _group.broken is None:
        _group.comm.Free()
    _group = None


def default_group(what: str = "this") -> ProcessGroup:
    if _group is None:
        raise ValueError(f"{what} needs the default process group: call "
                         "eager.distributed.init_process_group() first")
    return _group


def is_initialized() -> bool:
    return _group is not None


def get_rank(group=None) -> int:
    return default_group("get_rank").rank


def get_world_size(group=None) -> int:
    return default_group("get_world_size").size


def get_backend(group=None) -> str:
    default_group("get_backend")
    return "mpi"
