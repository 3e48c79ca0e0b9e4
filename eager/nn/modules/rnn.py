"""torch.nn.modules.rnn's names (the classes are recurrent.py's)."""
from eager.nn.modules.recurrent import (GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell,
                                        RNNCellBase)

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]
