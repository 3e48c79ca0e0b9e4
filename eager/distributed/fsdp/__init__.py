"""torch.distributed.fsdp (fully sharded data parallel): not in kiln, whose data parallel
is nn.parallel.DistributedDataParallel. Named, as libraries import them, and
NotSupportedYet when made or called."""
from eager import _missing
from eager.nn import Module

_HERE = "torch.distributed.fsdp"
FullyShardedDataParallel = _missing.lacking_class(_HERE, "FullyShardedDataParallel", Module)
FSDPModule = _missing.lacking_class(_HERE, "FSDPModule", Module)
CPUOffloadPolicy = _missing.lacking_class(_HERE, "CPUOffloadPolicy")
MixedPrecisionPolicy = _missing.lacking_class(_HERE, "MixedPrecisionPolicy")
fully_shard = _missing.not_supported(_HERE, "fully_shard")

__getattr__ = _missing.module_getattr(_HERE, "eager.distributed.fsdp")
