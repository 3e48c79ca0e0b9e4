"""torch.nn.modules.batchnorm's names, for code that imports them from there (the classes,
the private bases that isinstance checks name among them, are normalization.py's)."""
from eager import _missing
from eager.nn.modules.module import Module
from eager.nn.modules.normalization import (BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm,
                                            _NormBase)

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "_BatchNorm",
           "_NormBase"]

# timm's norm layers subclass SyncBatchNorm at import: a stand-in (kiln has no batch norm
# across processes), making one raises NotSupportedYet naming it
SyncBatchNorm = _missing.lacking_class("torch.nn", "SyncBatchNorm", Module)
