"""eager.optim: SGD, Adam, AdamW (fused steps), RMSprop, Adagrad, Adadelta, Adamax, NAdam,
and learning-rate schedules."""
from eager import _missing
from eager.optim import lr_scheduler as lr_scheduler
from eager.optim.adam import Adam, AdamW
from eager.optim.adaptive import Adadelta, Adagrad, Adamax, NAdam, RMSprop
from eager.optim.optimizer import Optimizer
from eager.optim.sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax",
           "NAdam", "lr_scheduler"]

# PyTorch's names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.optim", "eager.optim")
