from eager.nn.modules.container import ModuleDict, ModuleList, Sequential
from eager.nn.modules.layers import (GELU, CrossEntropyLoss, Dropout, Embedding, Flatten,
                                     Identity, L1Loss, LayerNorm, Linear, LogSoftmax, MSELoss,
                                     ReLU, Sigmoid, SiLU, Softmax, Tanh)
from eager.nn.modules.module import Module
from eager.nn.modules import activation as _activation
from eager.nn.modules import conv as _conv
from eager.nn.modules import loss as _loss
from eager.nn.modules import normalization as _normalization
from eager.nn.modules import sampling as _sampling
from eager.nn.modules.recurrent import (GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell,
                                        RNNCellBase)
from eager.nn.modules.transformer import (MultiheadAttention, Transformer, TransformerDecoder,
                                          TransformerDecoderLayer, TransformerEncoder,
                                          TransformerEncoderLayer)

_MORE = {name: getattr(module, name) for module in (_activation, _conv, _loss, _normalization,
                                              _sampling)
         for name, value in vars(module).items()
         if isinstance(value, type) and issubclass(value, Module) and not name.startswith("_")
         and value.__module__ == module.__name__}
globals().update(_MORE)

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "Linear", "Embedding",
           "LayerNorm", "Dropout", "ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax",
           "LogSoftmax", "Identity", "Flatten", "CrossEntropyLoss", "MSELoss",
           "L1Loss", "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell",
           "GRUCell", "MultiheadAttention", "TransformerEncoderLayer",
           "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder",
           "Transformer"] + sorted(_MORE)
