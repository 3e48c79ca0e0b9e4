"""torch._dynamo, as far as libraries reach into it when no compiler runs. kiln's compiler
(eager.compile) is not TorchDynamo: the hints below do in eager what PyTorch's do there
(mark the function or tensor, return it), and kiln's capture does not read them; its
result is the eager result either way. `disable` is torch.compiler.disable's graph break.
Every other name is NotSupportedYet (eager/_missing.py)."""
from eager import _missing
from eager.compiler import allow_in_graph, assume_constant_result, disable, is_compiling
from eager.tensor import Tensor

__all__ = ["is_compiling", "disable", "assume_constant_result", "allow_in_graph",
           "mark_static_address"]


def mark_static_address(t, guard: bool = False) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"mark_static_address expects a tensor but received {type(t)}")
    t._dynamo_static_input_type = "guarded" if guard else "unguarded"


__getattr__ = _missing.module_getattr("torch._dynamo", "eager._dynamo")
