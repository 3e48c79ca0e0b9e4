"""torch.nn.modules.linear's names, for code that imports them from there (the classes
are defined in layers.py: these are the same objects)."""
from eager.nn.modules.layers import Identity, Linear

__all__ = ["Identity", "Linear"]
