"""Datasets as in torch.utils.data: map-style (Dataset: __getitem__ and __len__) and
iterable (IterableDataset: __iter__), and the ways to combine and split them."""
from __future__ import annotations

import bisect
import math
from typing import Generic, Sequence, TypeVar

from eager import factories
from eager.tensor import Tensor

T_co = TypeVar("T_co", covariant=True)


class Dataset(Generic[T_co]):
    """A map-style dataset: `dataset[i]` for i in range(len(dataset)). Generic in its
    items, as PyTorch's: `class Images(Dataset[Tensor])`."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T_co]):
    """A dataset read as a stream: DataLoader iterates it (in each worker process, where
    there are workers: get_worker_info() tells a worker which part is its own)."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")

    def __add__(self, other):
        raise TypeError("IterableDatasets are not added with +; chain their iterators")


class ChainDataset(IterableDataset):
    """Iterable datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError("ChainDataset only supports IterableDataset")

    def __iter__(self):
        for d in self.datasets:
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


class StackDataset(Dataset):
    """Item i of each dataset, as a tuple (positional) or a dict (by keyword)."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("Supported either ``tuple``- (via ``args``) or``dict``- (via "
                             "``kwargs``) like input/output, but both types are given.")
        self.datasets = args or kwargs
        lengths = {len(d) for d in (args or kwargs.values())}
        if len(lengths) > 1:
            raise ValueError("Size mismatch between datasets")
        self._length = lengths.pop() if lengths else 0

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self) -> int:
        return self._length


class TensorDataset(Dataset[tuple[Tensor, ...]]):
    """Item i is (t[i] for t in tensors); every tensor has the same first dim."""

    def __init__(self, *tensors: Tensor):
        for t in tensors:
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset takes tensors, not {type(t).__name__}")
        if any(t.dim() == 0 for t in tensors):
            raise ValueError("TensorDataset: a zero-dim tensor has no first dim to index")
        if len({t.shape[0] for t in tensors}) > 1:
            raise ValueError(f"Size mismatch between tensors: first dims "
                             f"{[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0] if self.tensors else 0


class ConcatDataset(Dataset[T_co]):
    """The datasets one after another (map-style ones only)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes, total = [], 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        if which == len(self.datasets):
            raise IndexError(f"index {index} is out of range for a ConcatDataset of "
                             f"{len(self)} items")
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class Subset(Dataset[T_co]):
    """The items of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


def random_split(dataset: Dataset, lengths: Sequence, generator=None) -> list[Subset]:
    """Subsets of the given lengths (counts, or fractions summing to 1: each floor of its
    share, the remainder one each to the first subsets) over a random permutation."""
    n = len(dataset)
    lengths = list(lengths)
    if lengths and math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        for i, fraction in enumerate(lengths):
            if not 0 <= fraction <= 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        counts = [math.floor(n * f) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(not isinstance(k, int) or k < 0 for k in lengths):
        raise ValueError(f"random_split: lengths must be non-negative ints or fractions "
                         f"summing to 1, got {lengths}")
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input "
                         f"dataset! ({sum(lengths)} against {n})")
    order = factories.randperm(n, generator=generator).tolist()
    subsets, start = [], 0
    for k in lengths:
        subsets.append(Subset(dataset, order[start:start + k]))
        start += k
    return subsets
