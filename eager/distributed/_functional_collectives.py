"""torch.distributed._functional_collectives (collectives returning new tensors, traced by
Dynamo): named for the libraries that import them, NotSupportedYet when called; kiln's
collectives are eager.distributed's in-place ones."""
from eager import _missing

_HERE = "torch.distributed._functional_collectives"
wait_tensor = _missing.not_supported(_HERE, "wait_tensor")
all_to_all_single_autograd = _missing.not_supported(_HERE, "all_to_all_single_autograd")
all_reduce = _missing.not_supported(_HERE, "all_reduce")
all_gather_tensor = _missing.not_supported(_HERE, "all_gather_tensor")
reduce_scatter_tensor = _missing.not_supported(_HERE, "reduce_scatter_tensor")
