"""Module-level ops: `eager.add`, `eager.matmul`, `eager.max`, ... (PyTorch's namespace)."""
from __future__ import annotations

from eager.dispatcher import ATEN
from eager.kernels._common import promote
from eager.indexing import gather, index_put, nonzero, scatter, scatter_add  # noqa: F401
from eager.shapes import broadcast_shapes as broadcast_tuples
from eager.tensor import Size, Tensor, ops, wrap_scalar
from ir import dtypes
from ir.ops import Op

_DIRECT = [Op.NEG, Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.ABS, Op.SIGN, Op.TANH, Op.SIGMOID,
           Op.RELU, Op.ERF, Op.CLAMP, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAXIMUM,
           Op.MINIMUM, Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.LOGICAL_AND, Op.WHERE,
           Op.SUM, Op.MEAN, Op.AMAX, Op.AMIN, Op.ARGMAX, Op.ARGMIN, Op.SOFTMAX, Op.LOG_SOFTMAX,
           Op.DOT, Op.MV, Op.MM, Op.BMM, Op.ADDMM, Op.MATMUL, Op.TRANSPOSE, Op.T, Op.PERMUTE,
           Op.UNSQUEEZE, Op.SELECT, Op.FLATTEN, Op.SPLIT, Op.DETACH, Op.CLONE, Op.CAT, Op.STACK,
           Op.INDEX_SELECT, Op.INDEX_ADD, Op.EMBEDDING, Op.RESHAPE, Op.SQUEEZE, Op.EXPAND]

__all__ = [op.schema.name for op in _DIRECT] + [
    "max", "min", "var", "std", "gelu", "silu", "clamp_min", "clamp_max", "concat", "square",
    "chunk", "linear", "result_type", "promote_types", "broadcast_shapes", "gather", "scatter",
    "scatter_add", "nonzero", "index_put"]

for _op in _DIRECT:
    globals()[_op.schema.name] = ATEN[_op]

linear = ATEN[Op.LINEAR]
concat = ATEN[Op.CAT]


def max(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    return Tensor.max(input, dim if other is None else other, keepdim)


def min(input, dim=None, keepdim=False, *, other=None):  # noqa: A001
    return Tensor.min(input, dim if other is None else other, keepdim)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return Tensor.var(input, dim, unbiased, keepdim, correction=correction)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return Tensor.std(input, dim, unbiased, keepdim, correction=correction)


def gelu(input, approximate="none"):
    return ops.gelu(input, approximate=approximate)


def silu(input):
    return ops.silu(input)


def clamp_min(input, min):  # noqa: A002
    return ops.clamp(input, min, None)


def clamp_max(input, max):  # noqa: A002
    return ops.clamp(input, None, max)


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
