"""eager.nn: modules, parameters, functional and init, with PyTorch's behaviour."""
from eager import _missing
from eager.nn import functional as functional
from eager.nn import init as init
from eager.nn import parallel as parallel
from eager.nn import utils as utils
from eager.nn.modules import *  # noqa: F401,F403
from eager.nn.modules import __all__ as _modules_all
from eager.nn.parameter import Buffer, Parameter

__all__ = list(_modules_all) + ["Buffer", "Parameter", "functional", "init", "parallel"]

# Layers kiln lacks that libraries subclass at import (torchvision's video models subclass
# Conv3d, timm's norm layers SyncBatchNorm): Module stand-ins, making one raises
# NotSupportedYet naming it
Conv3d = _missing.lacking_class("torch.nn", "Conv3d", Module)  # noqa: F405
SyncBatchNorm = _missing.lacking_class("torch.nn", "SyncBatchNorm", Module)  # noqa: F405

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.nn", "eager.nn")
