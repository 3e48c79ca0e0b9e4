"""Collectives in PyTorch's shape, each one non-blocking MPI request on the tensors' own
memory where MPI allows it.

A CPU tensor that is contiguous hands MPI its numpy storage directly: all_reduce and
broadcast work in place on it, all_gather_into_tensor and reduce_scatter_tensor read and
write the tensors given. all_gather and reduce_scatter, whose lists of tensors MPI
cannot take as one buffer, copy through one; a tensor that is not contiguous goes
through a contiguous copy. A tensor a collective writes has its version bumped, as an
in-place op would.

Before each collective the ranks exchange what they are about to run (a 16-integer
all-gather: the collective, its op, dtype, shapes and the group's count of collectives),
so that a mismatch raises the same DistError on every rank, naming the collective and
each rank's shapes, instead of corrupting memory or hanging. benchmarks/distributed.py
measures what that exchange costs.
"""
from __future__ import annotations

import enum
import zlib

import numpy as np

from eager.distributed.process_group import DistError, ProcessGroup, default_group
from ir import dtypes

COLLECTIVES = ("barrier", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
               "reduce_scatter", "reduce_scatter_tensor")
MAX_DIMS = 8  # dims the check sends; a tensor with more sends a hash of the rest
_META = 8 + MAX_DIMS  # seq, collective, op, dtype, root, list length, ndim, dims, rest


class ReduceOp(enum.Enum):
    """How all_reduce and reduce_scatter combine the ranks' values."""
    SUM = "SUM"
    AVG = "AVG"  # SUM, then divided by the world size (floating dtypes)
    PRODUCT = "PRODUCT"
    MIN = "MIN"
    MAX = "MAX"
    BAND = "BAND"
    BOR = "BOR"
    BXOR = "BXOR"

    def mpi(self, MPI):
        return getattr(MPI, {"AVG": "SUM", "PRODUCT": "PROD"}.get(self.value, self.value))


_OPS = list(ReduceOp)


class Work:
    """A collective under way (async_op=True): `wait()` polls it to the deadline, then
    runs what finishes it (copies out, AVG's division, version bumps). It holds the
    arrays MPI reads and writes until then (an in-place Iallreduce's mpi4py request does
    not keep its array alive)."""

    def __init__(self, group: ProcessGroup, requests: list, what: str, finish=None,
                 buffers: tuple = ()):
        self._group, self._requests, self._what, self._finish = group, requests, what, finish
        self._buffers = buffers
        self._done = False

    def is_completed(self) -> bool:
        if not self._done and self._group.MPI.Request.Testall(self._requests):
            self._complete()
        return self._done

    def wait(self, timeout=None) -> bool:
        if not self._done:
            seconds = None if timeout is None else timeout.total_seconds()
            self._group.wait(self._requests, self._what, seconds)
            self._complete()
        return True

    def _complete(self) -> None:
        self._done = True
        self._buffers = ()
        if self._finish is not None:
            self._finish()


def _finished(work: Work, async_op: bool):
    """The Work for async_op=True; otherwise wait for it here."""
    if async_op:
        return work
    work.wait()
    return None


def _buffer(t):
    """(numpy array MPI reads and writes, the function that puts it back into `t`)."""
    if t.device.type != "cpu":
        raise RuntimeError(f"eager.distributed's MPI backend takes CPU tensors, not "
                           f"{t.device} ones: move them with .cpu() first")
    a = t._np()
    if a.flags.c_contiguous:
        return a, t._bump
    copy = np.ascontiguousarray(a)

    def put_back() -> None:
        a[...] = copy
        t._bump()
    return copy, put_back


def _describe(collective: str, op, t, count: int = -1) -> str:
    shape = f"{t.dtype.name}{list(t.shape)}"
    parts = ([op.value] if op is not None else []) + [shape if count < 0 else f"{count} x {shape}"]
    return f"{collective}({', '.join(parts)})"


def _check(group: ProcessGroup, collective: str, op=None, t=None, root: int = -1,
           count: int = -1) -> str:
    """Exchange what each rank is about to run; raise DistError naming every rank's
    collective and shapes unless all agree. Returns the description used in errors."""
    what = _describe(collective, op, t, count) if t is not None else f"{collective}()"
    group.check_usable(what)
    mine = np.full(_META, -1, dtype=np.int64)
    mine[:3] = group.sequence, COLLECTIVES.index(collective), _OPS.index(op) if op else -1
    mine[4:6] = root, count
    if t is not None:
        mine[3] = dtypes.ALL.index(t.dtype)
        mine[6] = t.dim()
        dims = list(t.shape)
        mine[7:7 + min(len(dims), MAX_DIMS)] = dims[:MAX_DIMS]
        if len(dims) > MAX_DIMS:
            mine[_META - 1] = zlib.crc32(repr(dims[MAX_DIMS:]).encode())
    group.sequence += 1
    if group.size == 1:
        return what
    everyone = np.empty((group.size, _META), dtype=np.int64)
    group.wait([group.comm.Iallgather(mine, everyone)], what)
    if not (everyone == mine).all():
        raise DistError(_mismatch(collective, everyone, group.rank))
    return what


def _mismatch(collective: str, everyone: np.ndarray, rank: int) -> str:
    by_call: dict[str, list[int]] = {}
    out_of_step = len(set(everyone[:, 0].tolist())) > 1
    for r, row in enumerate(everyone):
        by_call.setdefault(_decode(row, out_of_step), []).append(r)
    ranks = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {call}"
                      for call, rs in by_call.items())
    return (f"{collective} on rank {rank}: the ranks called different collectives or gave "
            f"tensors that differ: {ranks}")


def _decode(row, with_sequence: bool) -> str:
    seq, collective, op, dtype, root, count, ndim = (int(v) for v in row[:7])
    args = [_OPS[op].value] if op >= 0 else []
    if dtype >= 0:
        dims = [int(d) for d in row[7:7 + min(ndim, MAX_DIMS)]] + (["..."] if ndim > MAX_DIMS
                                                                    else [])
        shape = f"{dtypes.ALL[dtype].name}{dims}".replace("'...'", "...")
        args.append(shape if count < 0 else f"{count} x {shape}")
    if root >= 0:
        args.append(f"src={root}")
    call = f"{COLLECTIVES[collective]}({', '.join(args)})"
    return f"{call} as its collective #{seq}" if with_sequence else call


def _averaged(op, arrays, size: int, then):
    """AVG's division (after MPI's SUM), then `then`."""
    if op is not ReduceOp.AVG:
        return then

    def finish() -> None:
        for a in arrays:
            a /= size
        then()
    return finish


def _reduce_op(op, t) -> ReduceOp:
    op = ReduceOp(op.value if isinstance(op, ReduceOp) else str(op).upper())
    if op is ReduceOp.AVG and not t.dtype.is_floating_point:
        raise TypeError(f"ReduceOp.AVG needs a floating-point tensor, not {t.dtype.name}")
    return op


def barrier(group=None, async_op: bool = False, device_ids=None):
    group = default_group("barrier")
    what = _check(group, "barrier")
    return _finished(Work(group, [group.comm.Ibarrier()], what), async_op)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Every rank's `tensor` becomes the reduction of all of them, in place."""
    group = default_group("all_reduce")
    op = _reduce_op(op, tensor)
    what = _check(group, "all_reduce", op, tensor)
    a, put_back = _buffer(tensor)
    request = group.comm.Iallreduce(group.MPI.IN_PLACE, a, op=op.mpi(group.MPI))
    return _finished(Work(group, [request], what, _averaged(op, [a], group.size, put_back),
                          (a,)), async_op)


def broadcast(tensor, src: int = 0, group=None, async_op: bool = False):
    """Every rank's `tensor` becomes rank `src`'s, in place."""
    group = default_group("broadcast")
    if not 0 <= src < group.size:
        raise ValueError(f"broadcast: src {src} is not a rank of a world of {group.size}")
    what = _check(group, "broadcast", None, tensor, root=src)
    a, put_back = _buffer(tensor)
    return _finished(Work(group, [group.comm.Ibcast(a, root=src)], what, put_back, (a,)),
                     async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """`output_tensor` (world size x input's elements, dim 0 the ranks) gets every rank's
    `input_tensor`, without a copy where both are contiguous."""
    group = default_group("all_gather_into_tensor")
    if output_tensor.numel() != group.size * input_tensor.numel():
        raise ValueError(f"all_gather_into_tensor: output has {output_tensor.numel()} "
                         f"elements, expected {group.size} x {input_tensor.numel()}")
    what = _check(group, "all_gather_into_tensor", None, input_tensor)
    send, _ = _buffer(input_tensor)
    out, put_back = _buffer(output_tensor)
    request = group.comm.Iallgather(send, out)
    return _finished(Work(group, [request], what, put_back, (send, out)), async_op)


def all_gather(tensor_list: list, tensor, group=None, async_op: bool = False):
    """`tensor_list[r]` gets rank r's `tensor` (one copy out of MPI's buffer each)."""
    group = default_group("all_gather")
    _same_shapes("all_gather", "tensor_list", tensor_list, tensor, group.size)
    what = _check(group, "all_gather", None, tensor)
    send, _ = _buffer(tensor)
    gathered = np.empty((group.size,) + send.shape, dtype=send.dtype)
    request = group.comm.Iallgather(send, gathered)

    def copy_out() -> None:
        for t, part in zip(tensor_list, gathered):
            t._np()[...] = part
            t._bump()
    return _finished(Work(group, [request], what, copy_out, (send, gathered)), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """`output` gets the reduction of every rank's block `rank` of `input` (dim 0 the
    blocks), without a copy where both are contiguous."""
    group = default_group("reduce_scatter_tensor")
    op = _reduce_op(op, output)
    if input.numel() != group.size * output.numel():
        raise ValueError(f"reduce_scatter_tensor: input has {input.numel()} elements, "
                         f"expected {group.size} x {output.numel()}")
    what = _check(group, "reduce_scatter_tensor", op, input)
    send, _ = _buffer(input)
    out, put_back = _buffer(output)
    request = group.comm.Ireduce_scatter_block(send, out, op=op.mpi(group.MPI))
    return _finished(Work(group, [request], what, _averaged(op, [out], group.size, put_back),
                          (send, out)), async_op)


def reduce_scatter(output, input_list: list, op=ReduceOp.SUM, group=None,
                   async_op: bool = False):
    """`output` gets the reduction of every rank's `input_list[rank]` (the list copied into
    one buffer for MPI)."""
    group = default_group("reduce_scatter")
    op = _reduce_op(op, output)
    _same_shapes("reduce_scatter", "input_list", input_list, output, group.size)
    what = _check(group, "reduce_scatter", op, output, count=len(input_list))
    send = np.stack([t._np() for t in input_list])
    out, put_back = _buffer(output)
    request = group.comm.Ireduce_scatter_block(send, out, op=op.mpi(group.MPI))
    return _finished(Work(group, [request], what, _averaged(op, [out], group.size, put_back),
                          (send, out)), async_op)


def _same_shapes(collective: str, name: str, tensors: list, like, size: int) -> None:
    if len(tensors) != size:
        raise ValueError(f"{collective}: {name} has {len(tensors)} tensors, expected one per "
                         f"rank ({size})")
    for i, t in enumerate(tensors):
        if t.shape != like.shape or t.dtype is not like.dtype:
            raise ValueError(f"{collective}: {name}[{i}] is {t.dtype.name}{list(t.shape)}, "
                             f"expected {like.dtype.name}{list(like.shape)}")


def start_all_reduce(group: ProcessGroup, array: np.ndarray, what: str) -> Work:
    """A SUM all-reduce of a contiguous array in place, started without the check (for
    DistributedDataParallel's buckets, whose layout was checked across ranks once)."""
    group.check_usable(what)
    return Work(group, [group.comm.Iallreduce(group.MPI.IN_PLACE, array, op=group.MPI.SUM)],
                what, buffers=(array,))


def progress(works: list) -> None:
    """Let MPI move the given collectives on (MPI progresses non-blocking requests only
    inside MPI calls); their Works finish in wait()."""
    requests = [r for w in works if not w._done for r in w._requests]
    if requests:
        works[0]._group.MPI.Request.Testall(requests)
