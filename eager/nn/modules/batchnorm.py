"""torch.nn.modules.batchnorm's names, for code that imports them from there (the classes,
the private bases that isinstance checks name among them, are normalization.py's)."""
from eager.nn.modules.normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm,
                                            _NormBase)

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "_BatchNorm", "_NormBase"]
