"""torch.nn.modules.upsampling's names, for code that imports them from there (the
classes are defined in sampling.py: these are the same objects)."""
from eager.nn.modules.sampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = ["Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d"]
