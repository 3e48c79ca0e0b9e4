"""Activation modules, the distance modules and PReLU: each a Module calling its
nn.functional function with the options it was made with."""
from __future__ import annotations

import inspect

from eager import factories
from eager.nn import functional as F
from eager.nn.modules.module import Module
from eager.nn.parameter import Parameter
# torch.nn.modules.activation has these too (code imports them from there)
from eager.nn.modules.layers import GELU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh  # noqa: F401
from eager.nn.modules.transformer import MultiheadAttention  # noqa: F401


def _module(name: str, fn, *options: str, doc: str = ""):
    """A Module class `name` whose forward is fn(input(s), **options), its constructor
    taking the options (with fn's defaults) positionally or by name, as PyTorch's."""
    signature = inspect.signature(fn)
    defaults = {o: signature.parameters[o].default for o in options}

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(options):
            raise TypeError(f"{name}() takes at most {len(options)} arguments "
                            f"({len(args)} given)")
        values = dict(defaults)
        values.update(zip(options, args))
        for key, value in kwargs.items():
            if key not in defaults:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            values[key] = value
        for key, value in values.items():
            setattr(self, key, value)

    def forward(self, *inputs):
        return fn(*inputs, **{o: getattr(self, o) for o in options})

    def extra_repr(self) -> str:
        return ", ".join(f"{o}={getattr(self, o)}" for o in options if o != "inplace")

    # what inspect.signature(cls) says (docs/MISSING.md reads it): the options by name
    __init__.__signature__ = inspect.Signature([
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *(signature.parameters[o].replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD)
          for o in options)])
    return type(name, (Module,), {"__init__": __init__, "forward": forward,
                                  "extra_repr": extra_repr,
                                  "__doc__": doc or f"nn.{name}: F.{name.lower()} as a module."})


LeakyReLU = _module("LeakyReLU", F.leaky_relu, "negative_slope", "inplace")
ELU = _module("ELU", F.elu, "alpha", "inplace")
CELU = _module("CELU", F.celu, "alpha", "inplace")
SELU = _module("SELU", F.selu, "inplace")
Softplus = _module("Softplus", F.softplus, "beta", "threshold")
Softsign = _module("Softsign", F.softsign)
Hardtanh = _module("Hardtanh", F.hardtanh, "min_val", "max_val", "inplace")
ReLU6 = _module("ReLU6", F.relu6, "inplace")
LogSigmoid = _module("LogSigmoid", F.logsigmoid)
Mish = _module("Mish", F.mish, "inplace")
Tanhshrink = _module("Tanhshrink", F.tanhshrink)
Softshrink = _module("Softshrink", F.softshrink, "lambd")
Hardshrink = _module("Hardshrink", F.hardshrink, "lambd")
Threshold = _module("Threshold", F.threshold, "threshold", "value", "inplace")
GLU = _module("GLU", F.glu, "dim")
Softmin = _module("Softmin", F.softmin, "dim")
Hardsigmoid = _module("Hardsigmoid", lambda input, inplace=False: F.hardsigmoid(input),
                      "inplace")
Hardswish = _module("Hardswish", lambda input, inplace=False: F.hardswish(input), "inplace")
CosineSimilarity = _module("CosineSimilarity", F.cosine_similarity, "dim", "eps")
PairwiseDistance = _module("PairwiseDistance", F.pairwise_distance, "p", "eps", "keepdim")


class RReLU(Module):
    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input):
        return F.rrelu(input, self.lower, self.upper, self.training)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}"


class PReLU(Module):
    """max(0, x) + a min(0, x) with a learnt slope a (one, or one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(factories.full((num_parameters,), init, dtype=dtype,
                                               device=device))

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"
