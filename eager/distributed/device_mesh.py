"""torch.distributed.device_mesh: kiln's distributed world is one flat MPI group, with no
device mesh; `DeviceMesh` and `init_device_mesh` are named (libraries import them) and
NotSupportedYet when used."""
from eager import _missing

DeviceMesh = _missing.lacking_class("torch.distributed.device_mesh", "DeviceMesh")
init_device_mesh = _missing.not_supported("torch.distributed.device_mesh", "init_device_mesh")
