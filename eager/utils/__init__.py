"""torch.utils, as far as kiln has it: `data` (datasets, samplers, DataLoader),
`checkpoint` (activation checkpointing) and `_pytree` (nested containers)."""
from eager.utils import _pytree as _pytree
from eager.utils import checkpoint, data

__all__ = ["data", "checkpoint"]
