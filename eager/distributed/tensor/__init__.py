"""torch.distributed.tensor (DTensor: a tensor laid out over a device mesh). kiln has no
DTensor and no device mesh: `DTensor` is a class no tensor of kiln's is an instance of,
and making one, `distribute_tensor` or `distribute_module` raise NotSupportedYet naming
them. The placements (Shard, Replicate, Partial) are plain descriptions
(placement_types.py), so libraries that describe layouts at import load."""
from eager import _missing
from eager.distributed.tensor.placement_types import Partial, Placement, Replicate, Shard
from eager.tensor import Tensor

__all__ = ["DTensor", "distribute_tensor", "distribute_module", "Shard", "Replicate",
           "Partial", "Placement"]

_HERE = "torch.distributed.tensor"
DTensor = _missing.lacking_class(_HERE, "DTensor", Tensor)
distribute_tensor = _missing.not_supported(_HERE, "distribute_tensor")
distribute_module = _missing.not_supported(_HERE, "distribute_module")

__getattr__ = _missing.module_getattr(_HERE, "eager.distributed.tensor")
