"""torch.nn.modules.dropout's names (the classes are layers.py's and normalization.py's)."""
from eager.nn.modules.layers import Dropout
from eager.nn.modules.normalization import Dropout1d, Dropout2d, Dropout3d

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d"]
