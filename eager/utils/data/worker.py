"""DataLoader's worker processes: what each one runs (loop), what it can ask about
itself (get_worker_info), how a batch crosses back to the main process, and Fetcher,
which makes a batch the same way in a worker and in the main process.

kiln tensors are not pickled (eager.save is their file format), so a batch crosses as
its structure with each tensor's values as a numpy array (to_wire / from_wire); a
CUDA tensor in a worker's batch is an error naming it.
"""
from __future__ import annotations

import os
import pickle
import queue
import random
import traceback
from dataclasses import dataclass

from eager import factories
from eager.tensor import Tensor


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    num_workers: int
    seed: int
    dataset: object


_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker: its id, the number of workers, its seed and its copy of
    the dataset (an IterableDataset splits its stream by them); None elsewhere."""
    return _info


class Fetcher:
    """One batch (or, without automatic batching, one sample) from the dataset: from a
    list of indices (map-style) or from the next items of an iterator (iterable)."""

    def __init__(self, dataset, iterable: bool, batch_size, drop_last: bool, collate_fn,
                 auto_collation: bool):
        self.dataset, self.iterable, self.auto_collation = dataset, iterable, auto_collation
        self.batch_size, self.drop_last, self.collate_fn = batch_size, drop_last, collate_fn

    def map_style(self, index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[index])
        return self.collate_fn([self.dataset[i] for i in index])

    def next_from(self, iterator):
        """StopIteration when the stream has no (full, with drop_last) batch left."""
        if not self.auto_collation:
            return self.collate_fn(next(iterator))
        items = []
        for item in iterator:
            items.append(item)
            if len(items) == self.batch_size:
                break
        if not items or (self.drop_last and len(items) < self.batch_size):
            raise StopIteration
        return self.collate_fn(items)


@dataclass(frozen=True)
class _Wire:
    values: object  # numpy array
    requires_grad: bool


def to_wire(obj):
    """`obj` with its tensors as _Wire values (picklable)."""
    if isinstance(obj, Tensor):
        if obj.device.type != "cpu":
            raise RuntimeError(f"a DataLoader worker's batch holds a tensor on {obj.device}; "
                               f"workers send CPU tensors (move it in the main process)")
        return _Wire(obj.detach().numpy().copy(), obj.requires_grad)
    return _mapped(obj, to_wire)


def from_wire(obj):
    """to_wire's inverse, in the receiving process."""
    if isinstance(obj, _Wire):
        t = factories.from_numpy(obj.values)
        return t.requires_grad_() if obj.requires_grad else t
    return _mapped(obj, from_wire)


def _mapped(obj, fn):
    if isinstance(obj, dict):
        return type(obj)((key, fn(value)) for key, value in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(fn(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(fn(v) for v in obj)
    return obj


class Failure:
    """An exception raised in a worker, carried to the main process and raised there as
    the same type (RuntimeError where that type cannot be made from a message)."""

    def __init__(self, worker_id: int, where: str, error: BaseException):
        self.kind, self.worker_id, self.where = type(error), worker_id, where
        try:
            pickle.dumps(self.kind)
        except Exception:  # noqa: BLE001 - a class the main process cannot find
            self.kind = RuntimeError
        self.text = "".join(traceback.format_exception(error))

    def reraise(self):
        message = (f"Caught {self.kind.__name__} in DataLoader worker process "
                   f"{self.worker_id}{self.where}.\nOriginal {self.text}")
        try:
            error = self.kind(message)
        except Exception:  # noqa: BLE001 - a type that takes other arguments
            error = RuntimeError(message)
        raise error


EXHAUSTED = "exhausted"  # a worker's answer when its copy of an IterableDataset has ended
PARENT_CHECK_S = 1.0  # how often a worker waiting for a task checks that its parent lives


def loop(fetcher: Fetcher, tasks, results, worker_id: int, num_workers: int, seed: int,
         init_fn) -> None:
    """A worker: seeded (kiln's default generator and Python's random) with `seed`,
    `init_fn(worker_id)` called, then tasks until None: ("reset",) starts its copy of an
    iterable dataset again; (task, index) answers (task, pickled batch on the wire,
    EXHAUSTED or Failure), pickled here so that nothing is lost in the queue's thread.
    A worker whose parent is gone (killed, or exited without closing it) returns: its
    parent changes (to init or a subreaper), as PyTorch's workers watch theirs."""
    global _info
    parent = os.getppid()  # the main process, or the forkserver that outlives it briefly
    factories.manual_seed(seed)
    random.seed(seed)
    _info = WorkerInfo(worker_id, num_workers, seed, fetcher.dataset)
    if init_fn is not None:
        try:
            init_fn(worker_id)
        except Exception as e:  # noqa: BLE001 - reported to the main process
            results.put((None, pickle.dumps(Failure(worker_id, " (in worker_init_fn)", e))))
            return
    iterator, ended = None, False
    while True:
        try:
            message = tasks.get(timeout=PARENT_CHECK_S)
        except queue.Empty:
            if os.getppid() != parent:  # nobody reads the answers: leave them unsent
                results.cancel_join_thread()
                return
            continue
        if message is None:
            return
        if message == ("reset",):
            iterator, ended = None, False
            continue
        task, index = message
        try:
            if not fetcher.iterable:
                answer = to_wire(fetcher.map_style(index))
            elif ended:
                answer = EXHAUSTED
            else:
                iterator = iterator or iter(fetcher.dataset)
                answer = to_wire(fetcher.next_from(iterator))
            payload = pickle.dumps(answer)  # here: a queue's feeder thread would drop it
        except StopIteration:
            ended, payload = True, pickle.dumps(EXHAUSTED)
        except Exception as e:  # noqa: BLE001 - reported to the main process
            payload = pickle.dumps(Failure(worker_id, "", e))
        results.put((task, payload))
