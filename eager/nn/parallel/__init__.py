"""torch.nn.parallel: DistributedDataParallel over eager.distributed (MPI)."""
from eager import _missing
from eager.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.nn.parallel", "eager.nn.parallel")
