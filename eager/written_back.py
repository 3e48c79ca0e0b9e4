"""In-place forms of composite ops (`t.reciprocal_()`, `torch.clamp_min_(t, 0)`): the
out-of-place op's result written into `t` (eager/_tensor_methods.py written_back), with
PyTorch's refusal of a type `t` cannot hold. The in-place forms of ops with records
(`exp_`, `eq_` ...) are records themselves (ir/records.py `declare(inplace=...)`)."""
from __future__ import annotations

from eager._tensor_methods import written_back
from eager.tensor import Tensor

_OPERAND_FIRST = ("clamp_min", "clamp_max", "clip", "lerp", "logical_and", "logical_or",
                  "logical_xor", "addmm", "index_add")
_NO_OPERAND = ("cumsum", "cumprod", "log2", "log10", "reciprocal", "square", "logical_not")
FUNCTIONS = ("clamp_min_", "clamp_max_", "clip_", "log2_", "log10_", "reciprocal_",
             "square_")
"""The forms PyTorch has as torch.<name> too (the rest are Tensor methods only)."""

for _name in _OPERAND_FIRST + _NO_OPERAND:
    setattr(Tensor, _name + "_", written_back(
        _name + "_", lambda self, *args, _name=_name, **kwargs:
        getattr(self, _name)(*args, **kwargs), operand=_name in _OPERAND_FIRST))
__all__ = list(FUNCTIONS)
globals().update((_name, getattr(Tensor, _name)) for _name in FUNCTIONS)
