"""Module-level ops: `eager.add`, `eager.matmul`, `eager.max`, ... (PyTorch's namespace)."""
from __future__ import annotations

from eager import _tensor_methods
from eager.dispatcher import ATEN
from eager.kernels._common import can_cast, promote  # noqa: F401 - can_cast is public
from eager.out_argument import takes_out
from ir.records import named
from eager.indexing import gather, index_put, nonzero, scatter, scatter_add  # noqa: F401
from eager.shapes import broadcast_shapes as broadcast_tuples
from eager.tensor import Size, Tensor, ops, wrap_scalar
from ir import dtypes
from ir.ops import Op

_DIRECT = named("function")  # eager.exp, eager.mm, ...: every op whose record names one

__all__ = list(_DIRECT) + [
    "max", "min", "var", "std", "var_mean", "std_mean", "clamp_min", "clamp_max", "concat", "square", "chunk",
    "divide", "true_divide",
    "result_type", "promote_types", "can_cast", "broadcast_shapes", "gather", "scatter", "scatter_add",
    "nonzero", "index_put"]

for _name, _op in _DIRECT.items():
    globals()[_name] = ATEN[_op]

concat = ATEN[Op.CAT]
div = divide = takes_out(_tensor_methods.div)
true_divide = ATEN[Op.DIV]
clamp = takes_out(_tensor_methods.clamp)
clamp_ = _tensor_methods.clamp_


@takes_out
def max(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    return Tensor.max(input, dim if other is None else other, keepdim)


@takes_out
def min(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    return Tensor.min(input, dim if other is None else other, keepdim)


@takes_out
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return Tensor.var(input, dim, unbiased, keepdim, correction=correction)


@takes_out
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return Tensor.std(input, dim, unbiased, keepdim, correction=correction)


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(var, mean) over dim; `torch.var_mean(x, False)` gives `unbiased` in dim's place."""
    dim, correction = _spread_arguments(dim, unbiased, correction)
    return ops.var_mean(input, dim, correction=correction, keepdim=keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction = _spread_arguments(dim, unbiased, correction)
    return ops.std_mean(input, dim, correction=correction, keepdim=keepdim)


def _spread_arguments(dim, unbiased, correction):
    """(dim, correction) from PyTorch's overloads: (dim, unbiased, keepdim), (unbiased),
    and (dim, *, correction, keepdim)."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if unbiased is not None:
        if not isinstance(unbiased, bool):
            raise TypeError("unbiased must be a bool")
        if correction is not None:
            raise RuntimeError("Cannot specify both unbiased and correction")
        correction = int(unbiased)
    return dim, correction


@takes_out
def clamp_min(input, min):  # noqa: A002
    return clamp(input, min, None)


@takes_out
def clamp_max(input, max):  # noqa: A002
    return clamp(input, None, max)


@takes_out
def square(input):
    return ops.mul(input, input)


def chunk(input, chunks, dim=0):
    return Tensor.chunk(input, chunks, dim)


def result_type(a, b):
    wrap = (lambda x: x if isinstance(x, Tensor) else wrap_scalar(x))
    return promote(wrap(a), wrap(b))


def promote_types(a, b):
    return dtypes.promote_types(a, b)


def broadcast_shapes(*shapes):
    return Size(broadcast_tuples(*shapes))
