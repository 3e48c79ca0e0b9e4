"""torch.nn.modules.flatten's names (the classes are layers.py's and normalization.py's)."""
from eager.nn.modules.layers import Flatten
from eager.nn.modules.normalization import Unflatten

__all__ = ["Flatten", "Unflatten"]
