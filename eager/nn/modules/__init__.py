from eager.nn.modules.container import ModuleDict, ModuleList, Sequential
from eager.nn.modules.layers import (GELU, CrossEntropyLoss, Dropout, Embedding, Flatten,
                                     Identity, L1Loss, LayerNorm, Linear, LogSoftmax, MSELoss,
                                     ReLU, Sigmoid, SiLU, Softmax, Tanh)
from eager.nn.modules.module import Module

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "Linear", "Embedding",
           "LayerNorm", "Dropout", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax",
           "LogSoftmax", "Identity", "Flatten", "CrossEntropyLoss", "MSELoss",
           "L1Loss"]
