"""torch.distributed.checkpoint (DCP: sharded checkpoints of DTensors): not in kiln, which
saves with eager.save and safetensors. Named for the libraries that import it; using it
is NotSupportedYet."""
from eager import _missing

_HERE = "torch.distributed.checkpoint"
save = _missing.not_supported(_HERE, "save")
load = _missing.not_supported(_HERE, "load")

__getattr__ = _missing.module_getattr(_HERE, "eager.distributed.checkpoint")
