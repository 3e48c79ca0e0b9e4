"""DistributedSampler: each rank's share of a dataset, as torch.utils.data's.

The indices (shuffled with seed + epoch where `shuffle`, the same permutation on every
rank) are padded by repeating the first ones until they divide evenly among the ranks
(or, with drop_last, cut to a multiple of the ranks), and rank r takes every
num_replicas-th index from r: disjoint strides of one order, of equal lengths. The
permutation comes from kiln's generator, so the shards differ from PyTorch's for the same
seed; how they are made does not.
"""
from __future__ import annotations

import math

from eager import distributed, factories
from eager.utils.data.sampler import Sampler


class DistributedSampler(Sampler):
    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            if not distributed.is_initialized():
                raise RuntimeError("DistributedSampler needs num_replicas and rank, or the "
                                   "default process group (eager.distributed."
                                   "init_process_group) to take them from")
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            generator = factories.Generator().manual_seed(self.seed + self.epoch)
            indices = factories.randperm(n, generator=generator).tolist()
        else:
            indices = list(range(n))
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            padding = self.total_size - n
            indices += (indices * math.ceil(padding / n))[:padding] if padding else []
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next pass shuffles for: every rank must set the same one."""
        self.epoch = epoch
