"""torch.nn.modules.pixelshuffle's names, for code that imports them from there (the
classes are defined in sampling.py: these are the same objects)."""
from eager.nn.modules.sampling import PixelShuffle, PixelUnshuffle

__all__ = ["PixelShuffle", "PixelUnshuffle"]
