"""torch.autograd.graph, as far as kiln has it: the backward graph's Node and the
saved-tensor hooks (what activation checkpointing and offloading are built on), with
save_on_cpu, the offloading one."""
from eager.autograd.function import Node, saved_tensors_hooks

__all__ = ["Node", "saved_tensors_hooks", "save_on_cpu"]


class save_on_cpu(saved_tensors_hooks):  # noqa: N801 - PyTorch's name
    """Within the block, tensors saved for backward are kept on the CPU and moved back to
    their device when backward unpacks them (pin_memory: kiln's host memory is never
    pinned, so it only makes the copy back non-blocking, as PyTorch's does)."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda"):
        def pack_to_cpu(tensor):
            return tensor.device, tensor.cpu()

        def unpack_from_cpu(packed):
            device, tensor = packed
            return tensor.to(device, non_blocking=pin_memory)
        super().__init__(pack_to_cpu, unpack_from_cpu)
