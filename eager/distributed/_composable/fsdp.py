"""torch.distributed._composable.fsdp: `fully_shard`, NotSupportedYet (see
eager/distributed/fsdp)."""
from eager.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard  # noqa: F401
