"""torch.special: PyTorch's special functions, those kiln has (the same ops as their
`torch.<name>`: logit, expit = sigmoid, erf, erfinv, expm1, exp2, log1p, xlogy, sinc,
round, logsumexp, softmax, log_softmax). Another name PyTorch's torch.special has is an
AttributeError."""
from __future__ import annotations

from eager import derived_math, functional
from eager._missing import module_getattr

logit = functional.logit
expit = functional.sigmoid
erf, erfinv, expm1, exp2, log1p = (functional.erf, functional.erfinv, functional.expm1,
                                   functional.exp2, functional.log1p)
xlogy, sinc, round = functional.xlogy, functional.sinc, functional.round  # noqa: A001
softmax, log_softmax = functional.softmax, functional.log_softmax
logsumexp = derived_math.logsumexp

__getattr__ = module_getattr("torch.special", "eager.special")
