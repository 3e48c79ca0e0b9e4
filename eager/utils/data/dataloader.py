"""DataLoader as in torch.utils.data: batches of a dataset, made in the main process or
in worker processes (num_workers > 0), in the sampler's order either way.

Workers are started with the platform's default method ("fork" on Linux), or
`multiprocessing_context`; "spawn" and "forkserver" pickle the dataset, which fails for a
dataset holding kiln tensors (they are not pickled) with an error saying so. The main
process keeps prefetch_factor batches per worker asked for; it waits for answers in
short slices, so a worker that died or a `timeout` that passed is an error, never a
hang.
"""
from __future__ import annotations

import itertools
import pickle
import time
import warnings
from typing import Generic, TypeVar

from eager import factories
from eager.utils.data import worker
from eager.utils.data.collate import default_collate, default_convert
from eager.utils.data.dataset import IterableDataset
from eager.utils.data.sampler import BatchSampler, RandomSampler, SequentialSampler

_POLL_S = 0.1  # how often a waiting main process checks its workers


T_co = TypeVar("T_co", covariant=True)


class DataLoader(Generic[T_co]):
    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = ""):
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing. let num_workers > 0 to enable "
                             "multiprocessing, otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable:
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                which = "sampler" if sampler is not None else "batch_sampler"
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"{which} option, but got {which}={sampler or batch_sampler}")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if not self.iterable:
            if sampler is None:
                sampler = (RandomSampler(dataset, generator=generator) if shuffle
                           else SequentialSampler(dataset))
            if batch_size is not None and batch_sampler is None:
                batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        elif batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size!r}")
        if pin_memory:
            warnings.warn("'pin_memory' argument is set as true, but kiln does not pin CPU "
                          "tensors' memory, so pinned memory won't be used", stacklevel=2)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.timeout, self.worker_init_fn = num_workers, timeout, worker_init_fn
        self.prefetch_factor = 2 if num_workers and prefetch_factor is None else prefetch_factor
        self.persistent_workers, self.pin_memory = persistent_workers, pin_memory
        self.multiprocessing_context = multiprocessing_context
        auto_collation = batch_sampler is not None or (self.iterable and batch_size is not None)
        self.collate_fn = collate_fn or (default_collate if auto_collation else default_convert)
        self._fetcher = worker.Fetcher(dataset, self.iterable, batch_size, drop_last,
                                       self.collate_fn, auto_collation)
        self._workers = None

    @property
    def _indices(self):
        """What one fetch takes (map-style): the batch sampler's lists, or the sampler's
        single indices without automatic batching."""
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __iter__(self):
        # each pass draws a seed from `generator` first, with or without workers (the
        # workers' seeds), so a seeded loader shuffles alike either way, as PyTorch's
        seed = int(factories.numpy_generator(self.generator).integers(0, 1 << 63))
        if self.num_workers == 0:
            return self._in_main_process()
        if self._workers is None or not self.persistent_workers:
            if self._workers is not None:
                self._workers.close()
            self._workers = _Workers(self, seed)
        return self._workers.epoch(self)

    def _in_main_process(self):
        if self.iterable:
            iterator = iter(self.dataset)
            while True:
                try:
                    yield self._fetcher.next_from(iterator)
                except StopIteration:
                    return
        for index in self._indices:
            yield self._fetcher.map_style(index)

    def __len__(self) -> int:
        if not self.iterable:
            return len(self._indices)
        n = len(self.dataset)  # TypeError where the stream's length is unknown
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __del__(self):
        if getattr(self, "_workers", None) is not None:
            self._workers.close()


class _Workers:
    """num_workers processes, a task queue each and one answer queue; epoch() yields the
    batches of one pass over the data."""

    def __init__(self, loader: DataLoader, seed: int):
        import multiprocessing  # here: `import eager` need not load it (~5 ms)
        context = multiprocessing.get_context(loader.multiprocessing_context)
        self.answers = context.Queue()
        self.tasks, self.processes = [], []
        self._epochs = itertools.count()
        self.timeout = loader.timeout
        for i in range(loader.num_workers):
            tasks = context.Queue()
            process = context.Process(
                target=worker.loop, daemon=True, name=f"kiln DataLoader worker {i}",
                args=(loader._fetcher, tasks, self.answers, i, loader.num_workers, seed + i,
                      loader.worker_init_fn))
            try:
                process.start()
            except (TypeError, pickle.PicklingError, AttributeError) as e:
                self.close()
                raise RuntimeError(
                    f"DataLoader could not start its workers with the "
                    f"{context.get_start_method()!r} method, which pickles the dataset: {e} "
                    f"(kiln tensors are not pickled; the 'fork' method shares the dataset "
                    f"instead)") from None
            self.tasks.append(tasks)
            self.processes.append(process)

    def epoch(self, loader: DataLoader):
        epoch, n = next(self._epochs), len(self.processes)
        if epoch and loader.iterable:
            for tasks in self.tasks:
                tasks.put(("reset",))
        if loader.iterable:
            work = ((i % n, None) for i in itertools.count())
        else:
            work = ((i % n, index) for i, index in enumerate(loader._indices))
        live = set(range(n))  # workers whose stream has not ended (iterable)
        asked, waiting, kept = 0, {}, {}
        next_task = 0
        try:
            while True:
                while len(waiting) < loader.prefetch_factor * n and live:
                    try:
                        who, index = next(work)
                    except StopIteration:
                        break
                    if who not in live:
                        continue
                    self.tasks[who].put(((epoch, asked), index))
                    waiting[(epoch, asked)] = who
                    asked += 1
                if next_task == asked and not waiting:
                    return
                while (epoch, next_task) not in kept:
                    task, answer = self._answer()
                    if task in waiting:  # not a task of an epoch left unfinished
                        kept[task] = waiting.pop(task), answer
                who, answer = kept.pop((epoch, next_task))
                next_task += 1
                if isinstance(answer, worker.Failure):
                    answer.reraise()
                if isinstance(answer, str) and answer == worker.EXHAUSTED:
                    live.discard(who)
                    continue
                yield worker.from_wire(answer)
        finally:
            if not loader.persistent_workers:
                self.close()

    def _answer(self):
        """The next (task, answer) from any worker, checking in slices that every worker
        lives and that `timeout` has not passed."""
        import queue
        start = time.monotonic()
        while True:
            try:
                task, payload = self.answers.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [p for p in self.processes if not p.is_alive()]
                if dead:
                    self.close()
                    pids = ", ".join(str(p.pid) for p in dead)
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited "
                                       f"unexpectedly (exit code "
                                       f"{', '.join(str(p.exitcode) for p in dead)})") from None
                if self.timeout and time.monotonic() - start > self.timeout:
                    self.close()
                    raise RuntimeError(f"DataLoader timed out after {self.timeout} "
                                       f"seconds") from None
                continue
            answer = pickle.loads(payload)
            if task is None:  # worker_init_fn failed
                self.close()
                answer.reraise()
            return task, answer

    def close(self) -> None:
        """Ask every worker to stop, wait briefly, then end those that did not."""
        for tasks, process in zip(self.tasks, self.processes):
            if process.is_alive():
                try:
                    tasks.put(None)
                except (OSError, ValueError):
                    pass
        for process in self.processes:
            process.join(timeout=1)
            if process.is_alive():
                process.terminate()
                process.join(timeout=1)
        for q in [*self.tasks, self.answers]:
            q.cancel_join_thread()
            q.close()
        self.tasks, self.processes = [], []
