"""torch.autograd.graph, as far as kiln has it: the backward graph's Node and the
saved-tensor hooks (what activation checkpointing and offloading are built on)."""
from eager.autograd.function import Node, saved_tensors_hooks

__all__ = ["Node", "saved_tensors_hooks"]
