"""DistributedDataParallel: one model per process, gradients averaged across processes
while backward still runs.

At wrap time the ranks check that their modules have the same parameters (names, shapes,
dtypes), and rank 0's parameters and buffers are broadcast to every rank. The parameters
that need gradients are cut into buckets (in reverse order of registration, about the
order backward produces their gradients; 1 MB for the first, `bucket_cap_mb` for the
rest, one dtype each). A hook after each parameter's gradient is accumulated
(`Tensor.register_post_accumulate_grad_hook`) copies the gradient into its bucket; a full
bucket starts a non-blocking MPI all-reduce at once, so it travels while backward goes on
with the layers below; later hooks move the started ones on (MPI progresses requests only
inside MPI calls). Buckets start in the same order on every rank, as MPI requires: a full
bucket waits for the ones before it. When backward ends (autograd's `queue_callback`) the
buckets still unstarted start (a parameter no gradient reached on this rank adds zeros,
and gets the average as its `.grad` too: PyTorch would ask for find_unused_parameters),
every all-reduce is waited for, with the group's timeout, and each `.grad` gets its
averaged slice of the bucket, written into it (or, with gradient_as_bucket_view, the slice
itself: the next backward overwrites it). The bucket buffers are kept from one backward to
the next. device_ids, output_device, dim, process_group (there is one group),
find_unused_parameters, check_reduction and static_graph are accepted for PyTorch's
signature and change nothing.

`no_sync()` leaves the backward passes run inside it local (gradients accumulate in
`.grad`); the first backward after it averages the sums. PyTorch decides at the forward
pass; here the backward pass decides, so a compiled forward that replays without running
this module's Python behaves alike.
"""
from __future__ import annotations

import contextlib
import zlib

import numpy as np

from eager.autograd.engine import queue_callback
from eager.autograd.grad_mode import no_grad
from eager.distributed import collectives
from eager.distributed.process_group import DistError, default_group
from eager.factories import from_numpy, tensor, zeros
from eager.nn.modules.module import Module

FIRST_BUCKET_MB = 1.0


class _Bucket:
    """Parameters whose gradients travel in one all-reduce."""

    def __init__(self, index: int, params: list):
        self.index = index
        self.params = params
        self.offsets = np.cumsum([0] + [p.numel() for p in params]).tolist()
        self.dtype = params[0].dtype.np
        # kept from one backward to the next: MPI all-reduces a fresh 7.5 MB buffer here in
        # 7 ms, one it has seen before in 1.6-2.7 ms
        self.buffer = np.empty(self.offsets[-1], dtype=self.dtype)
        self.filled: set[int] = set()  # positions of the params whose gradient is in
        self.work = None

    def describe(self, count: int) -> str:
        nbytes = self.offsets[-1] * np.dtype(self.dtype).itemsize
        size = f"{nbytes / 1e6:.2f} MB" if nbytes >= 10_000 else f"{nbytes} bytes"
        return (f"DistributedDataParallel's gradient all_reduce (bucket {self.index + 1} of "
                f"{count}: {len(self.params)} parameters, {size} of "
                f"{np.dtype(self.dtype).name})")

    def slice(self, position: int, shape) -> np.ndarray:
        return self.buffer[self.offsets[position]:self.offsets[position + 1]].reshape(shape)

    def put(self, position: int, grad) -> None:
        self.slice(position, grad.shape)[...] = grad._np()
        self.filled.add(position)

    def hand_back(self, size: int, as_view: bool) -> None:
        """Each parameter's `.grad` becomes its slice of the summed bucket / `size`: the
        slice itself (as_view), else written into the `.grad` it has."""
        for position, p in enumerate(self.params):
            averaged = self.slice(position, p.shape)
            if as_view or p.grad is None:
                averaged /= size
                p.grad = from_numpy(averaged if as_view else averaged.copy())
            else:
                np.multiply(averaged, 1 / size, out=p.grad._np())
                p.grad._bump()

    def full(self) -> bool:
        return len(self.filled) == len(self.params)


class DistributedDataParallel(Module):
    """Wraps `module` (reachable as `.module`); its forward is the module's."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False):
        super().__init__()
        self.module = module
        object.__setattr__(self, "_group", default_group("DistributedDataParallel"))
        self.broadcast_buffers = broadcast_buffers
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        self._verify_same_parameters()
        with no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                collectives.broadcast(t, src=0)
        params = [p for p in module.parameters() if p.requires_grad]
        object.__setattr__(self, "_buckets", _buckets(params, bucket_cap_mb or 25.0))
        object.__setattr__(self, "_started", 0)  # buckets started in this backward
        object.__setattr__(self, "_syncing", False)  # a backward is being synchronised
        for bucket in self._buckets:
            for position, p in enumerate(bucket.params):
                p.register_post_accumulate_grad_hook(self._hook(bucket, position))

    def forward(self, *args, **kwargs):
        if self._syncing:  # a backward raised after starting all-reduces: MPI holds them
            raise RuntimeError("DistributedDataParallel: the previous backward pass did not "
                               "finish its gradient all-reduces (it raised); the ranks' "
                               "collectives are out of step and training cannot go on")
        if self.broadcast_buffers and self._group.size > 1:
            with no_grad():
                for b in self.module.buffers():
                    collectives.broadcast(b, src=0)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate their gradients locally, unaveraged."""
        before = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before

    # gradient synchronisation ------------------------------------------------------
    def _hook(self, bucket: _Bucket, position: int):
        def gradient_ready(param) -> None:
            if not self.require_backward_grad_sync or self._group.size == 1:
                return
            if not self._syncing:
                object.__setattr__(self, "_syncing", True)
                queue_callback(self._finish_backward)
            bucket.put(position, param.grad)
            if bucket.full():
                self._start_full_buckets()
            else:
                collectives.progress([b.work for b in self._buckets[:self._started]])
        return gradient_ready

    def _start_full_buckets(self) -> None:
        while self._started < len(self._buckets) and self._buckets[self._started].full():
            self._start(self._buckets[self._started])

    def _start(self, bucket: _Bucket) -> None:
        bucket.work = collectives.start_all_reduce(
            self._group, bucket.buffer, bucket.describe(len(self._buckets)))
        object.__setattr__(self, "_started", self._started + 1)

    def _finish_backward(self) -> None:
        try:
            for bucket in self._buckets[self._started:]:
                for position, p in enumerate(bucket.params):
                    if position not in bucket.filled:  # no gradient reached it here
                        bucket.put(position, zeros(p.shape, dtype=p.dtype))
                self._start(bucket)
            for bucket in self._buckets:
                bucket.work.wait()
                bucket.hand_back(self._group.size, self.gradient_as_bucket_view)
        finally:
            for bucket in self._buckets:
                bucket.work = None
                bucket.filled.clear()
            object.__setattr__(self, "_started", 0)
            object.__setattr__(self, "_syncing", False)

    def _verify_same_parameters(self) -> None:
        """Every rank's module has the same parameters and buffers (names, shapes, dtypes),
        or every rank raises DistError showing its own list."""
        layout = [(name, tuple(t.shape), t.dtype.name) for name, t in
                  list(self.module.named_parameters()) + list(self.module.named_buffers())]
        mine = tensor([len(layout), zlib.crc32(repr(layout).encode())])
        everyone = [tensor([0, 0]) for _ in range(self._group.size)]
        collectives.all_gather(everyone, mine)
        if any(t.tolist() != mine.tolist() for t in everyone):
            others = [list(map(int, t.tolist())) for t in everyone]
            raise DistError(f"DistributedDataParallel: the ranks' modules differ (parameters "
                            f"and buffers [count, hash of names, shapes, dtypes] per rank: "
                            f"{others}); this rank's: {layout}")


def _buckets(params: list, cap_mb: float) -> list[_Bucket]:
    """Buckets in reverse registration order, one dtype each: 1 MB (or `cap_mb` if less)
    for the first (the last layers' gradients, ready first), `cap_mb` for the rest."""
    buckets, current, size, cap = [], [], 0, min(FIRST_BUCKET_MB, cap_mb) * 1e6
    for p in reversed(params):
        nbytes = p.numel() * p.dtype.itemsize
        if current and (size + nbytes > cap or p.dtype is not current[0].dtype):
            buckets.append(_Bucket(len(buckets), current))
            current, size, cap = [], 0, cap_mb * 1e6
        current.append(p)
        size += nbytes
    if current:
        buckets.append(_Bucket(len(buckets), current))
    return buckets
