"""torch.distributed.tensor._utils: DTensor's layout arithmetic, NotSupportedYet (kiln has
no DTensor; transformers imports it at import)."""
from eager import _missing

compute_local_shape_and_global_offset = _missing.not_supported(
    "torch.distributed.tensor._utils", "compute_local_shape_and_global_offset")
