"""torch.distributed.tensor.placement_types: how a DTensor lies on one dimension of a
device mesh (sharded along a tensor dim, replicated, or partial sums). kiln has no
DTensor; the placements are plain descriptions, so libraries that build them at import
(transformers' tensor-parallel plans) load. Printed and compared as PyTorch's."""
from __future__ import annotations

from dataclasses import dataclass


class Placement:
    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self, reduce_op: str | None = None) -> bool:
        return False


@dataclass(frozen=True)
class Shard(Placement):
    dim: int

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim

    def __repr__(self) -> str:
        return f"Shard(dim={self.dim})"

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True)
class _StridedShard(Placement):
    """A shard of interleaved chunks (not a Shard: is_shard() is False, as PyTorch's)."""
    dim: int
    split_factor: int = 1

    def __repr__(self) -> str:
        return f"_StridedShard(dim={self.dim}, sf={self.split_factor})"

    def __str__(self) -> str:
        return f"_S({self.dim}, {self.split_factor})"


@dataclass(frozen=True)
class Replicate(Placement):
    def is_replicate(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "Replicate()"

    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True)
class Partial(Placement):
    reduce_op: str = "sum"

    def is_partial(self, reduce_op: str | None = None) -> bool:
        return reduce_op is None or reduce_op == self.reduce_op

    def __repr__(self) -> str:
        return f"Partial({self.reduce_op})"

    def __str__(self) -> str:
        return f"P({self.reduce_op})"
