"""Memory formats, PyTorch's `torch.memory_format` values: the order of dims a copy lays
its elements out in, and `clone(memory_format=...)`.

    contiguous_format   row-major (C order)
    preserve_format     clone's default; kiln's copies are row-major, where PyTorch keeps
                        the strides of a dense input that is not (a transpose's)
    channels_last       (N, C, H, W) stored as N, H, W, C: strides (HWC, 1, WC, C)
    channels_last_3d    (N, C, D, H, W) stored as N, D, H, W, C
"""
from __future__ import annotations

from eager.dispatcher import ATEN
from eager.tensor import Tensor, ops
from ir.ops import Op


class memory_format:  # noqa: N801 - PyTorch's name
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"eager.{self.name}"


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")

_CHANNELS_LAST_RANK = {channels_last: 4, channels_last_3d: 5}
_clone = ATEN[Op.CLONE]


def clone(input: Tensor, *, memory_format: memory_format | None = None) -> Tensor:
    """A copy of `input` (autograd: CloneBackward0), laid out as `memory_format` says."""
    if memory_format is None or memory_format is preserve_format or \
            memory_format is contiguous_format:
        return _clone(input)
    if memory_format not in _CHANNELS_LAST_RANK:
        raise TypeError(f"clone(): argument 'memory_format' must be torch.memory_format, not "
                        f"{type(memory_format).__name__}")
    rank = _CHANNELS_LAST_RANK[memory_format]
    if input.dim() != rank:
        raise RuntimeError(f"required rank {rank} tensor to use {memory_format.name} format")
    stored = ops.clone(ops.permute(input, [0, *range(2, rank), 1]))
    out = ops.permute(stored, [0, rank - 1, *range(1, rank - 1)])
    out._base = None  # the copy is held by nothing else: no view, as PyTorch's clone
    return out


Tensor.clone = clone
