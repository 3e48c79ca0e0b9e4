"""torch.nn.modules.instancenorm's names (the classes are normalization.py's)."""
from eager.nn.modules.normalization import (InstanceNorm1d, InstanceNorm2d, InstanceNorm3d,
                                            _InstanceNorm, _NormBase)

__all__ = ["InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "_InstanceNorm", "_NormBase"]
