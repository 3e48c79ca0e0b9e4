"""torch.distributed.checkpoint.state_dict, NotSupportedYet (see
eager/distributed/checkpoint)."""
from eager import _missing

_HERE = "torch.distributed.checkpoint.state_dict"
get_model_state_dict = _missing.not_supported(_HERE, "get_model_state_dict")
set_model_state_dict = _missing.not_supported(_HERE, "set_model_state_dict")
