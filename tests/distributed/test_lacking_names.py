"""What kiln lacks of torch.distributed is importable where libraries import it at load
time (transformers' tensor/expert parallel and checkpoint modules, when
torch.distributed.is_available()), and NotSupportedYet when used. The placements are
plain descriptions, printed and compared as PyTorch's."""
import pytest

import eager
from eager._missing import NotSupportedYet
from eager.alias import torch_is_eager


def test_placements_print_and_compare_as_pytorchs():
    pytest.importorskip("torch", reason="PyTorch (the 'compare' extra) is not installed")
    from torch.distributed.tensor import placement_types as theirs

    from eager.distributed.tensor import placement_types as ours
    for make in (lambda m: m.Shard(1), lambda m: m.Replicate(), lambda m: m.Partial(),
                 lambda m: m._StridedShard(0, split_factor=2)):
        a, b = make(ours), make(theirs)
        assert (repr(a), str(a)) == (repr(b), str(b))
        assert (a.is_shard(), a.is_replicate(), a.is_partial()) == \
            (b.is_shard(), b.is_replicate(), b.is_partial())
        assert a == make(ours) and hash(a) == hash(make(ours))
    assert ours.Shard(0).is_shard(0) and not ours.Shard(0).is_shard(1)
    assert ours.Shard(0) != ours.Replicate()


def test_dtensor_device_mesh_fsdp_and_dcp_load_and_raise_naming_themselves():
    with torch_is_eager():
        import torch
        from torch.distributed import all_to_all_single, get_process_group_ranks
        from torch.distributed._composable.fsdp import fully_shard
        from torch.distributed._functional_collectives import wait_tensor
        from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
        assert not isinstance(torch.ones(2), DTensor) and issubclass(DTensor, torch.Tensor)
        assert Shard(-1).dim == -1 and Replicate().is_replicate()
        calls = {"all_to_all_single": lambda: all_to_all_single(torch.ones(2), torch.ones(2)),
                 "get_process_group_ranks": lambda: get_process_group_ranks(None),
                 "fully_shard": lambda: fully_shard(torch.nn.Linear(1, 1)),
                 "wait_tensor": lambda: wait_tensor(torch.ones(1)),
                 "HuggingFaceStorageReader": lambda: HuggingFaceStorageReader("x"),
                 "DeviceMesh": lambda: DeviceMesh("cpu", [0]),
                 "FullyShardedDataParallel": lambda: FullyShardedDataParallel(None),
                 "DTensor": lambda: DTensor(),
                 "distribute_tensor": lambda: distribute_tensor(torch.ones(1), None, []),
                 "compute_local_shape_and_global_offset":
                     lambda: compute_local_shape_and_global_offset((2,), None, [])}
        for name, call in calls.items():
            with pytest.raises(NotSupportedYet, match=rf"\.{name} is not supported by kiln"):
                call()
    assert eager.distributed.all_gather_into_tensor  # kiln's own collectives are still there
