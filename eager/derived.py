"""Ops written in other ops at the Python level, with no op record or kernel of their own:
autograd records the ops they call (so their gradients are those ops' gradients), they
run on every device those ops run on, and graph capture sees the same ops.

    tril, triu          a where() over an index mask from arange
    flip, roll          index_select with reversed indices; two slices joined with cat
    unbind              select at each index
    isclose, allclose,  PyTorch's closeness test |a - b| <= atol + rtol |b| (equal infs
    equal               close, NaNs only with equal_nan); equal: same shape and values
    `in`                some element equals the value (eq, then any)
    all, any            counts of zeros and non-zeros
    logical_not/or/xor  comparisons with zero and logical_and
    lerp                start + weight (end - start), or end - (1 - weight) (end - start)
                        from |weight| 0.5 on (PyTorch's), 16-bit floats in float32
    sort, argsort,      the order found on the host (numpy's stable argsort), moved to
    topk, kthvalue      the input's device; values are gather(input, dim, indices), so
                        they carry gradients. Reading the values breaks a captured graph.
    multinomial         draws from a Generator on the host, like the random factories

sort, topk, kthvalue (and max/min over a dim) return named tuples (values, indices), as
PyTorch's torch.return_types do.
"""
from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from eager import factories
from eager.arguments import bool_arg, int_arg, int_list
from eager.kernels._common import computed
from eager.shapes import wrap_dim
from eager.tensor import Tensor, ops
from ir import dtypes

sort_result = namedtuple("sort", ["values", "indices"])
topk_result = namedtuple("topk", ["values", "indices"])
kthvalue_result = namedtuple("kthvalue", ["values", "indices"])


def _at_least_2d(fn: str, x: Tensor) -> None:
    if x.dim() < 2:
        raise RuntimeError(f"{fn}: input tensor must have at least 2 dimensions, got "
                           f"{x.dim()}")


def _kept_triangle(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    rows, cols = x.shape[-2:]
    r = factories.arange(rows, device=x.device).unsqueeze(-1)
    c = factories.arange(cols, device=x.device)
    offset = c - r
    return offset <= diagonal if lower else offset >= diagonal


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle (on and below diagonal `diagonal`) of the last two dims; 0 above."""
    _at_least_2d("tril", input)
    keep = _kept_triangle(input, int_arg("tril", "diagonal", diagonal), lower=True)
    return ops.where(keep, input, factories.zeros((), dtype=input.dtype, device=input.device))


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle (on and above diagonal `diagonal`) of the last two dims; 0 below."""
    _at_least_2d("triu", input)
    keep = _kept_triangle(input, int_arg("triu", "diagonal", diagonal), lower=False)
    return ops.where(keep, input, factories.zeros((), dtype=input.dtype, device=input.device))


def _dims(fn: str, x: Tensor, dims) -> list[int]:
    dims = [dims] if isinstance(dims, int) else int_list(fn, "dims", dims)
    wrapped = [wrap_dim(d, max(x.dim(), 1)) for d in dims]
    if len(set(wrapped)) != len(wrapped):
        raise RuntimeError(f"{fn}: dims has duplicates, original flip dims size={len(dims)}, "
                           f"but unique flip dims size={len(set(wrapped))}")
    return wrapped


def flip(input: Tensor, dims) -> Tensor:
    """The elements in reverse order along each of `dims` (a copy, as in PyTorch)."""
    out = input
    for d in _dims("flip", input, dims):
        n = input.shape[d] if input.dim() else 1
        if n > 1:
            out = ops.index_select(out, d, factories.arange(n - 1, -1, -1, device=input.device))
    return out if out is not input else ops.clone(input)


def fliplr(input: Tensor) -> Tensor:
    _at_least_2d("fliplr", input)
    return flip(input, [1])


def flipud(input: Tensor) -> Tensor:
    if input.dim() < 1:
        raise RuntimeError("flipud: input tensor must have at least 1 dimension")
    return flip(input, [0])


def roll(input: Tensor, shifts, dims=None) -> Tensor:
    """Elements shifted along dims, those pushed off one end coming back at the other;
    without dims, over the flattened tensor (the shape kept)."""
    shifts = [shifts] if isinstance(shifts, int) else int_list("roll", "shifts", shifts)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: without dims, shifts must be one number, got {shifts}")
        return roll(input.reshape(-1), shifts, [0]).view(input.shape)
    dims = [dims] if isinstance(dims, int) else int_list("roll", "dims", dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims:{len(dims)}")
    out = input
    for shift, dim in zip(shifts, dims):
        d = wrap_dim(dim, input.dim())
        n = input.shape[d]
        s = shift % n if n else 0
        if s:
            out = ops.cat([ops.slice(out, d, n - s, n), ops.slice(out, d, 0, n - s)], d)
    return out if out is not input else ops.clone(input)


def unbind(input: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along `dim`, that dim removed (views)."""
    if input.dim() == 0:
        raise IndexError("unbind: dimension specified as 0 but tensor has no dimensions")
    d = wrap_dim(dim, input.dim())
    return tuple(ops.select(input, d, i) for i in range(input.shape[d]))


def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
            equal_nan: bool = False) -> Tensor:
    """Elementwise |input - other| <= atol + rtol |other| (bool, broadcast); equal values
    (infinities included) are close; NaNs only where both are NaN and equal_nan."""
    other = other if isinstance(other, Tensor) else factories.tensor(other, dtype=input.dtype)
    if input.dtype != other.dtype:
        raise RuntimeError(f"isclose(): both tensors must have the same dtype, got "
                           f"{input.dtype} and {other.dtype}")
    if rtol < 0 or atol < 0:
        raise RuntimeError(f"isclose(): rtol and atol must be non-negative, got rtol={rtol}, "
                           f"atol={atol}")
    equal = input == other
    if not input.dtype.is_floating_point:
        return equal
    difference = (input - other).abs()
    finite = difference < math.inf
    close = equal | (finite & (difference <= atol + rtol * other.abs()))
    if equal_nan:
        close = close | ((input != input) & (other != other))
    return close


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,
             equal_nan: bool = False) -> bool:
    return bool(all(isclose(input, other, rtol, atol, equal_nan)).item())


def equal(input: Tensor, other: Tensor) -> bool:
    """The same shape and the same values (any dtypes, compared as promoted)."""
    if input.shape != other.shape:
        return False
    return bool(all(input == other).item())


def _contains(self: Tensor, element) -> bool:
    """`element in t`: some element of t equals it (a number, or a tensor broadcast)."""
    if not isinstance(element, (Tensor, int, float, bool)):
        raise RuntimeError(f"Tensor.__contains__ only supports Tensor or scalar, but you "
                           f"passed in a {type(element)}.")
    return bool(any(ops.eq(self, element)).item())


def all(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """True where every element (over `dim`, or all of them) is non-zero."""
    zeros = (input == 0).to(dtypes.int64)
    counted = zeros.sum() if dim is None else zeros.sum(dim, keepdim)
    return counted == 0


def any(input: Tensor, dim=None, keepdim: bool = False) -> Tensor:  # noqa: A001
    """True where some element (over `dim`, or any of them) is non-zero."""
    nonzero = (input != 0).to(dtypes.int64)
    counted = nonzero.sum() if dim is None else nonzero.sum(dim, keepdim)
    return counted > 0


def logical_not(input: Tensor) -> Tensor:
    return input == 0


def logical_or(input: Tensor, other) -> Tensor:
    """De Morgan's: not (not input and not other)."""
    return logical_not(ops.logical_and(logical_not(input), other == 0))


def logical_xor(input: Tensor, other) -> Tensor:
    return (input != 0) != (other != 0)


def lerp(input: Tensor, end: Tensor, weight) -> Tensor:
    """PyTorch's formula: input + weight (end - input) where |weight| < 0.5, else
    end - (end - input) (1 - weight), exact at both ends; 16-bit floats computed in
    float32 and rounded once, as PyTorch's kernel computes them."""
    dt = input.dtype
    input, end = computed(input), computed(end)
    weight = computed(weight) if isinstance(weight, Tensor) else weight
    diff = end - input
    if isinstance(weight, Tensor):
        out = ops.where(weight.abs() < 0.5, input + weight * diff, end - diff * (1 - weight))
    else:
        out = input + weight * diff if abs(weight) < 0.5 else end - diff * (1 - weight)
    return out.to(dt) if dt in dtypes.HALF else out


def _order(x: Tensor, dim: int, descending: bool) -> tuple[int, np.ndarray]:
    """(wrapped dim, indices that sort x along it), found on the host: numpy's stable
    argsort; descending keeps equal elements in their order too. NaN counts as largest."""
    d = wrap_dim(dim, max(x.dim(), 1))
    values = x.detach().cpu().numpy().reshape(x.shape or (1,))
    if descending:
        backwards = np.argsort(np.flip(values, d), axis=d, kind="stable")
        order = np.flip(values.shape[d] - 1 - backwards, d)
    else:
        order = np.argsort(values, axis=d, kind="stable")
    return d, np.ascontiguousarray(order.reshape(x.shape))


def _indices(order: np.ndarray, like: Tensor) -> Tensor:
    return factories.tensor(order, dtype=dtypes.int64, device=like.device)


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False):
    """(values, indices) along `dim`, ascending unless descending; always stable."""
    d, order = _order(input, dim, bool_arg("sort", "descending", descending))
    indices = _indices(order, input)
    return sort_result(input.gather(d, indices) if input.dim() else input.clone(), indices)


def argsort(input: Tensor, dim: int = -1, descending: bool = False,
            stable: bool = False) -> Tensor:
    return sort(input, dim, descending, stable).indices


def _k_along(fn: str, input: Tensor, k, dim: int) -> tuple[int, int, int]:
    """(k, the wrapped dim, its size; 1 for a zero-dim input)."""
    d = wrap_dim(dim, max(input.dim(), 1))
    return int_arg(fn, "k", k), d, input.shape[d] if input.dim() else 1


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True):  # noqa: A002 - PyTorch's argument name
    """The k largest (or smallest) elements along `dim` and their indices, in order."""
    k, d, size = _k_along("topk", input, k, dim)
    if not 0 <= k <= size:
        raise RuntimeError(f"topk: selected index k out of range (k={k}, dim {d} has {size} "
                           f"elements)")
    _, order = _order(input, d, descending=largest)
    indices = _indices(np.take(order, np.arange(k), axis=d) if input.dim() else order, input)
    return topk_result(input.gather(d, indices) if input.dim() else input.clone(), indices)


def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False):
    """The k-th smallest element along `dim` (k from 1) and its index."""
    k, d, size = _k_along("kthvalue", input, k, dim)
    if not 1 <= k <= size:
        raise IndexError(f"kthvalue(): selected number k out of range for dimension {d} "
                         f"(k={k}, size {size})")
    _, order = _order(input, d, descending=False)
    if not input.dim():
        return kthvalue_result(input.clone(), _indices(order, input))
    indices = _indices(np.take(order, [k - 1], axis=d), input)
    values = input.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return kthvalue_result(values, indices)


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *,
                generator=None) -> Tensor:
    """Indices drawn from each row of non-negative weights (1-D: one row), int64."""
    num_samples = int_arg("multinomial", "num_samples", num_samples)
    if input.dim() not in (1, 2):
        raise RuntimeError(f"multinomial: prob_dist must be 1 or 2 dim, got {input.dim()}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{input.dtype}")
    if num_samples <= 0:
        raise RuntimeError(f"multinomial: cannot sample {num_samples} (<= 0) samples")
    weights = input.detach().cpu().numpy().astype(np.float64).reshape(-1, input.shape[-1])
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    totals = weights.sum(axis=1)
    if (totals <= 0).any():
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    if not replacement and num_samples > weights.shape[1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    if not replacement and num_samples > np.count_nonzero(weights, axis=1).min():
        raise RuntimeError("invalid multinomial distribution (with replacement=False, not "
                           "enough non-negative category to sample)")
    numbers = factories.numpy_generator(generator)
    drawn = np.stack([numbers.choice(weights.shape[1], num_samples, replace=replacement,
                                     p=row / total) for row, total in zip(weights, totals)])
    shape = (num_samples,) if input.dim() == 1 else (input.shape[0], num_samples)
    return factories.tensor(drawn.reshape(shape), dtype=dtypes.int64, device=input.device)


FUNCTIONS = ["tril", "triu", "flip", "fliplr", "flipud", "roll", "unbind", "isclose",
             "allclose", "equal", "all", "any", "logical_not", "logical_or", "logical_xor",
             "lerp", "sort", "argsort", "topk", "kthvalue", "multinomial"]
"""eager.<name> for each, and a Tensor method of the same name."""

for _name in FUNCTIONS:
    setattr(Tensor, _name, globals()[_name])
Tensor.__contains__ = _contains
