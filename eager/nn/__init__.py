"""eager.nn: modules, parameters, functional and init, with PyTorch's behaviour."""
from eager import _missing
from eager.nn import attention as attention
from eager.nn import functional as functional
from eager.nn import init as init
from eager.nn import parallel as parallel
from eager.nn import utils as utils
from eager.nn.modules import *  # noqa: F401,F403
from eager.nn.modules import __all__ as _modules_all
from eager.nn.parameter import Buffer, Parameter

__all__ = list(_modules_all) + ["Buffer", "Parameter", "functional", "init", "parallel"]

# layers kiln lacks that libraries subclass at import: Module stand-ins (making one raises
# NotSupportedYet), where PyTorch defines them
from eager.nn.modules.batchnorm import SyncBatchNorm as SyncBatchNorm  # noqa: E402
from eager.nn.modules.conv import Conv3d as Conv3d  # noqa: E402

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.nn", "eager.nn")
