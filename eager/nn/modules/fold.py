"""torch.nn.modules.fold's names (the classes are conv.py's)."""
from eager.nn.modules.conv import Fold, Unfold

__all__ = ["Fold", "Unfold"]
