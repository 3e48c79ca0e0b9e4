"""torch.distributed over MPI: `import eager.distributed as dist`.

    process_group.py  init_process_group (rank and world size from the MPI launcher),
                      the collectives' timeout, waiting on MPI requests to a deadline
    collectives.py    all_reduce, broadcast, all_gather, reduce_scatter, barrier, ...
                      on the tensors' own memory, each checked across ranks first

Run a script as `mpiexec -n 4 python script.py`; without mpiexec it is a world of one.
There is one group, the world: the `group` arguments are PyTorch's and left at None.
nn.parallel.DistributedDataParallel and utils.data.DistributedSampler build on this.

What kiln lacks of PyTorch's torch.distributed (all_to_all, process subgroups, DTensor
and device meshes, FSDP, distributed checkpoints) is named where libraries import it,
in modules of the same names here, and NotSupportedYet when used (eager/_missing.py).
"""
from eager import _missing
from eager.distributed.collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor,
                                           all_reduce, barrier, broadcast, reduce_scatter,
                                           reduce_scatter_tensor)
from eager.distributed.process_group import (DistBackendError, DistError, destroy_process_group,
                                             get_backend, get_rank, get_world_size,
                                             init_process_group, is_available, is_initialized)

__all__ = ["DistBackendError", "DistError", "ReduceOp", "Work", "all_gather",
           "all_gather_into_tensor", "all_reduce", "barrier", "broadcast",
           "destroy_process_group", "get_backend", "get_rank", "get_world_size",
           "init_process_group", "is_available", "is_initialized", "reduce_scatter",
           "reduce_scatter_tensor"]

all_to_all_single = _missing.not_supported("torch.distributed", "all_to_all_single")
all_to_all = _missing.not_supported("torch.distributed", "all_to_all")
get_process_group_ranks = _missing.not_supported("torch.distributed", "get_process_group_ranks")
new_group = _missing.not_supported("torch.distributed", "new_group")
