"""How a DataLoader makes a batch of samples (default_collate) and converts a sample
when it does not batch (default_convert), as torch.utils.data does."""
from __future__ import annotations

import collections.abc as abc
import numbers

import numpy as np

from eager import factories, functional
from eager.tensor import Tensor
from ir import dtypes

_SUPPORTED = ("default_collate: batch must contain tensors, numpy arrays, numbers, dicts "
              "or lists; found {}")


def default_collate(batch):
    """Tensors stacked on a new first dim; numpy arrays and numbers as tensors (floats
    float64, ints int64); strings as a list; dicts, tuples and lists collated field by
    field (a tuple's fields as a list, a namedtuple as its type)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return functional.stack(list(batch), 0)
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "USO":
            raise TypeError(_SUPPORTED.format(elem.dtype))
        return default_collate([factories.from_numpy(np.ascontiguousarray(b)) for b in batch])
    if isinstance(elem, np.generic):
        return factories.tensor(np.array(batch))
    if isinstance(elem, float):
        return factories.tensor(batch, dtype=dtypes.float64)
    if isinstance(elem, numbers.Integral):
        return factories.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, abc.Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, abc.Sequence):
        if len({len(e) for e in batch}) > 1:
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(s)) for s in zip(*batch)]
        if isinstance(elem, tuple):
            return fields
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(_SUPPORTED.format(type(elem)))


def default_convert(data):
    """numpy arrays (and numpy numbers) as tensors, inside dicts, tuples and lists too;
    everything else as it is."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "USO":
        return factories.from_numpy(np.ascontiguousarray(data))
    if isinstance(data, np.generic) and not isinstance(data, (np.str_, np.bytes_)):
        return factories.tensor(data)
    if isinstance(data, abc.Mapping):
        return {key: default_convert(value) for key, value in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, abc.Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
