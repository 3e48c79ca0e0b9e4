"""Recurrent layers as in torch.nn: RNNCell, LSTMCell, GRUCell and the multi-layer,
optionally bidirectional RNN, LSTM and GRU, with PyTorch's parameter names, shapes,
initialisation, checks and results.

They are written in eager ops (linear, addmm, sigmoid, tanh, chunk, stack, cat), so autograd
and compile() see only ops they know: the time loop is Python, each step one addmm for the
hidden state (the input's projection for every step is one linear before the loop)."""
from __future__ import annotations

import math
import numbers
import warnings

from eager import factories
from eager.functional import addmm, cat, relu, sigmoid, stack, tanh
from eager.nn import functional as F
from eager.nn import init
from eager.nn.modules.module import Module
from eager.nn.parameter import Parameter

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _hidden(h, w_hh, b_hh):
    return h.mm(w_hh.t()) if b_hh is None else addmm(b_hh, h, w_hh.t())


def _rnn_step(activation):
    def step(gi, state, w_hh, b_hh, w_hr=None):
        return (activation(gi + _hidden(state[0], w_hh, b_hh)),)
    return step


def _lstm_step(gi, state, w_hh, b_hh, w_hr=None):
    h, c = state
    i, f, g, o = (gi + _hidden(h, w_hh, b_hh)).chunk(4, 1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c)
    return (h if w_hr is None else h.mm(w_hr.t()), c)


def _gru_step(gi, state, w_hh, b_hh, w_hr=None):
    h = state[0]
    i_r, i_z, i_n = gi.chunk(3, 1)
    h_r, h_z, h_n = _hidden(h, w_hh, b_hh).chunk(3, 1)
    r, z = sigmoid(i_r + h_r), sigmoid(i_z + h_z)
    n = tanh(i_n + r * h_n)
    return (n + z * (h - n),)  # (1 - z) * n + z * h


_STEPS = {"RNN_TANH": _rnn_step(tanh), "RNN_RELU": _rnn_step(relu), "LSTM": _lstm_step,
          "GRU": _gru_step}


def _run_direction(step, x, state, weights, reverse: bool):
    """One layer in one direction over x (T, B, I): the outputs (T, B, H) and final state."""
    w_ih, w_hh, b_ih, b_hh, w_hr = weights
    projected = F.linear(x, w_ih, b_ih)
    outputs = [None] * x.shape[0]
    for t in (reversed(range(x.shape[0])) if reverse else range(x.shape[0])):
        state = step(projected[t], state, w_hh, b_hh, w_hr)
        outputs[t] = state[0]
    return stack(outputs), state


class RNNBase(Module):
    """The stack of layers shared by RNN, LSTM and GRU; `mode` names the cell."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None, dtype=None):
        super().__init__()
        _check_sizes(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                     proj_size)
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names, self._all_weights = [], []
        for layer in range(num_layers):
            for direction in range(2 if bidirectional else 1):
                layer_input = input_size if layer == 0 else real_hidden * (2 if bidirectional else 1)
                shapes = {"weight_ih": (gate_size, layer_input), "weight_hh": (gate_size, real_hidden)}
                if bias:
                    shapes.update(bias_ih=(gate_size,), bias_hh=(gate_size,))
                if proj_size > 0:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                suffix = "_reverse" if direction == 1 else ""
                names = [f"{kind}_l{layer}{suffix}" for kind in shapes]
                for name, shape in zip(names, shapes.values()):
                    setattr(self, name, Parameter(factories.empty(*shape, dtype=dtype,
                                                                  device=device)))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """PyTorch packs the weights for cuDNN here; kiln's weights need no packing."""

    @property
    def all_weights(self) -> list[list[Parameter]]:
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    @property
    def _flat_weights(self) -> list[Parameter]:
        return [getattr(self, name) for name in self._flat_weights_names]

    def _layer_weights(self, layer: int, suffix: str):
        def get(kind):
            return getattr(self, f"{kind}_l{layer}{suffix}", None)
        return (get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh"),
                get("weight_hr"))

    def _state_sizes(self, input) -> list[tuple[int, int, int]]:
        batch = input.shape[0] if self.batch_first else input.shape[1]
        layers = self.num_layers * (2 if self.bidirectional else 1)
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        return [(layers, batch, real_hidden), (layers, batch, self.hidden_size)]

    def _check_input(self, input) -> None:
        weight = self._flat_weights[0]
        if input.dtype != weight.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({weight.dtype}). Convert input: input.to({weight.dtype}), or "
                             f"convert model: model.to({input.dtype})")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def _initial_state(self, input, hx, is_batched: bool) -> tuple:
        """hx as a tuple (h0,) or (h0, c0) of 3-D tensors, zeros where not given."""
        lstm = self.mode == "LSTM"
        sizes = self._state_sizes(input)[:2 if lstm else 1]
        if hx is None:
            return tuple(factories.zeros(*s, dtype=input.dtype, device=input.device)
                         for s in sizes)
        hx = tuple(hx) if lstm else (hx,)
        want = 3 if is_batched else 2
        if any(h.dim() != want for h in hx):
            kind = "batched 3-D" if is_batched else "unbatched 2-D"
            if lstm:
                raise RuntimeError(f"For {kind} input, hx and cx should also be {want}-D but "
                                   f"got ({hx[0].dim()}-D, {hx[1].dim()}-D) tensors")
            raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got "
                               f"{hx[0].dim()}-D tensor")
        if not is_batched:
            hx = tuple(h.unsqueeze(1) for h in hx)
        for i, (h, size) in enumerate(zip(hx, sizes)):
            if tuple(h.shape) != size:
                label = f"hidden[{i}]" if lstm else "hidden"
                raise RuntimeError(f"Expected {label} size {size}, got {list(h.shape)}")
        return hx

    def forward(self, input, hx=None):
        name = {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(self.mode, self.mode)
        if input.dim() not in (2, 3):
            tensor = " tensor" if name == "RNN" else ""
            raise ValueError(f"{name}: Expected input to be 2D or 3D, got {input.dim()}D"
                             f"{tensor} instead")
        is_batched = input.dim() == 3
        if not is_batched:
            input = input.unsqueeze(0 if self.batch_first else 1)
        self._check_input(input)
        state = self._initial_state(input, hx, is_batched)
        x = input.transpose(0, 1) if self.batch_first else input
        step, directions = _STEPS[self.mode], 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                x = F.dropout(x, self.dropout, True)
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                weights = self._layer_weights(layer, "_reverse" if direction else "")
                out, final = _run_direction(step, x, tuple(s[index] for s in state), weights,
                                            reverse=direction == 1)
                outputs.append(out)
                finals.append(final)
            x = outputs[0] if directions == 1 else cat(outputs, 2)
        output = x.transpose(0, 1) if self.batch_first else x
        h_n = tuple(stack([f[i] for f in finals]) for i in range(len(state)))
        if not is_batched:
            output = output.squeeze(0 if self.batch_first else 1)
            h_n = tuple(h.squeeze(1) for h in h_n)
        return output, (h_n if self.mode == "LSTM" else h_n[0])

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


def _check_sizes(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout,
                 proj_size) -> None:
    """PyTorch's constructor checks, in its order and words."""
    if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or \
            not 0 <= dropout <= 1:
        raise ValueError("dropout should be a number in range [0, 1] representing the "
                         "probability of an element being zeroed")
    if dropout > 0 and num_layers == 1:
        warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                      "non-zero dropout expects num_layers greater than 1, but got "
                      f"dropout={dropout} and num_layers={num_layers}", stacklevel=4)
    for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool),
                              ("input_size", input_size, int),
                              ("hidden_size", hidden_size, int)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} should be of type {kind.__name__}, got: "
                            f"{type(value).__name__}")
        if kind is int and value <= 0:
            raise ValueError(f"{name} must be greater than zero")
    if num_layers <= 0:
        raise ValueError("num_layers must be greater than zero")
    if proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable projections")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")
    if mode not in _GATES:
        raise ValueError("Unrecognized RNN mode: " + mode)


class RNN(RNNBase):
    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' "
                             "or 'relu'.")
        super().__init__(f"RNN_{nonlinearity.upper()}", *args, **kwargs)
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device=None, dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gates = num_chunks * hidden_size
        self.weight_ih = Parameter(factories.empty(gates, input_size, dtype=dtype, device=device))
        self.weight_hh = Parameter(factories.empty(gates, hidden_size, dtype=dtype,
                                                   device=device))
        if bias:
            self.bias_ih = Parameter(factories.empty(gates, dtype=dtype, device=device))
            self.bias_hh = Parameter(factories.empty(gates, dtype=dtype, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _cell(self, mode: str, input, hx: tuple):
        """The checks of PyTorch's C++ cells, then one step; input and hx as 1-D or 2-D."""
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for i, h in enumerate(hx):
            if h is not None and h.dim() not in (1, 2):
                label = f"hx[{i}]" if mode == "LSTM" else "hidden"
                raise ValueError(f"{name}: Expected {label} to be 1D or 2D, got {h.dim()}D "
                                 "instead")
        is_batched = input.dim() == 2
        if not is_batched:
            input = input.unsqueeze(0)
        hx = tuple(factories.zeros(input.shape[0], self.hidden_size, dtype=input.dtype,
                                   device=input.device) if h is None else
                   (h if is_batched else h.unsqueeze(0)) for h in hx)
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} "
                               f"expected {self.input_size}")
        for i, h in enumerate(hx):
            if h.shape[0] != input.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match "
                                   f"hidden{i} batch size {h.shape[0]}")
            if h.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got "
                                   f"{h.shape[1]}, expected {self.hidden_size}")
        gi = F.linear(input, self.weight_ih, self.bias_ih)
        state = _STEPS[mode](gi, hx, self.weight_hh, self.bias_hh)
        return state if is_batched else tuple(s.squeeze(0) for s in state)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=1, device=device, dtype=dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return self._cell(f"RNN_{self.nonlinearity.upper()}", input, (hx,))[0]


class LSTMCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=4, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        return self._cell("LSTM", input, (None, None) if hx is None else tuple(hx))


class GRUCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, num_chunks=3, device=device, dtype=dtype)

    def forward(self, input, hx=None):
        return self._cell("GRU", input, (hx,))[0]
