"""Samplers as in torch.utils.data: iterables of dataset indices (BatchSampler: of
lists of them) that a DataLoader draws from. Random ones take a `generator` (an
eager.Generator); without one, each pass seeds a fresh generator from the default one,
so eager.manual_seed makes the order repeat."""
from __future__ import annotations

from typing import Generic, TypeVar

import numpy as np

from eager import factories


def _generator(generator) -> np.random.Generator:
    if generator is not None:
        return factories.numpy_generator(generator)
    seed = int(factories.numpy_generator().integers(0, 1 << 63))
    return factories.Generator().manual_seed(seed).numpy


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got {name}={value!r}")
    return value


T_co = TypeVar("T_co", covariant=True)


class Sampler(Generic[T_co]):
    """The base: a sampler defines __iter__ (and __len__ where it knows it)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler[int]):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    """A permutation of the indices (another after each n); with `replacement`,
    `num_samples` draws."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None):
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement!r}")
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        _count("num_samples", self.num_samples)

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n, numbers = len(self.data_source), _generator(self.generator)
        if self.replacement:  # drawn lazily, 32 at a time as PyTorch draws them: num_samples
            for _ in range(self.num_samples // 32):  # may be far more than memory holds
                yield from numbers.integers(0, n, 32).tolist()
            yield from numbers.integers(0, n, self.num_samples % 32).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from numbers.permutation(n).tolist()
        yield from numbers.permutation(n)[:self.num_samples % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    """The given indices in a random order."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        for i in _generator(self.generator).permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    """`num_samples` indices drawn with probabilities proportional to `weights`."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        _count("num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement!r}")
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights, np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                             f"{tuple(w.shape)}")
        if (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
            raise RuntimeError("WeightedRandomSampler: weights must be finite, non-negative "
                               "and not all zero")
        if not replacement and num_samples > np.count_nonzero(w):
            raise RuntimeError(f"WeightedRandomSampler: cannot draw {num_samples} samples "
                               f"without replacement from {np.count_nonzero(w)} non-zero "
                               f"weights")
        self.weights, self.num_samples = w, num_samples
        self.replacement, self.generator = replacement, generator

    def __iter__(self):
        p = self.weights / self.weights.sum()
        drawn = _generator(self.generator).choice(len(p), self.num_samples,
                                                   replace=self.replacement, p=p)
        return iter(drawn.tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    """Lists of `batch_size` indices from `sampler`; the last one shorter unless
    `drop_last`."""

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        _count("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
