"""torch.utils, as far as kiln has it: `data` (datasets, samplers, DataLoader)."""
from eager.utils import data

__all__ = ["data"]
