"""More ops written in other ops (see eager/derived.py): math and linear algebra.

    logsumexp, norm, log2, log10, reciprocal   composites
    isnan, isinf, isfinite, isposinf, isneginf, count_nonzero
    cumsum      floats: products with triangular ones matrices, in blocks of sqrt(n) along
                the dim (O(n sqrt n) work), so gradients and every device come free;
                integers: found on the host (they carry no gradient)
    cumprod     products by doubling: log2(n) elementwise products (exact at zeros)
    bucketize, searchsorted   counts of boundaries below each value
    diff, take_along_dim, outer, inner, eye, diag, diagonal, trace, Tensor.unfold
    einsum      operands contracted pairwise, each pair as one batched matmul (indices in
                both and kept: batch; in both and summed: contracted), indices in one
                operand only summed first; '...' and implicit outputs as numpy's
    masked_select, bincount, unique    found on the host (their sizes depend on values)
"""
from __future__ import annotations

import math

import numpy as np

from eager import factories
from eager.kernels._common import type_word
from eager.shapes import wrap_dim
from eager.tensor import Tensor, ops
from ir import dtypes


def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    dims = [dim] if isinstance(dim, int) else list(dim)
    if input.numel() == 0:  # no maximum to shift by: log(0) is -inf over an empty dim
        return ops.log(ops.sum(ops.exp(input), dims, keepdim))
    top = ops.amax(input.detach(), dims, True)
    top = ops.where(ops.abs(top) == math.inf, 0.0, top)  # all -inf rows stay -inf
    out = ops.log(ops.sum(ops.exp(input - top), dims, True)) + top
    return out if keepdim else ops.squeeze(out, dims)


def norm(input: Tensor, p="fro", dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The vector p-norm over dim (all elements without one); 'fro' (and None) is 2: one
    op, linalg_vector_norm (eager/kernels/norms.py)."""
    if p is None or p == "fro":
        p = 2
    if isinstance(p, str):
        raise RuntimeError(f"norm: p={p!r} is not supported by kiln (vector norms only)")
    dims = None if dim is None else [dim] if isinstance(dim, int) else list(dim)
    return ops.linalg_vector_norm(input, p, dims, keepdim, dtype=dtype)


def log2(input: Tensor) -> Tensor:
    return ops.log(input) * (1 / math.log(2))


def log10(input: Tensor) -> Tensor:
    return ops.log(input) * (1 / math.log(10))


def reciprocal(input: Tensor) -> Tensor:
    return ops.div(1.0, input)


def isnan(input: Tensor) -> Tensor:
    return input != input


def isinf(input: Tensor) -> Tensor:
    if not input.dtype.is_floating_point:
        return input != input
    return ops.abs(input) == math.inf


def isposinf(input: Tensor) -> Tensor:
    return input == math.inf if input.dtype.is_floating_point else input != input


def isneginf(input: Tensor) -> Tensor:
    return input == -math.inf if input.dtype.is_floating_point else input != input


def isfinite(input: Tensor) -> Tensor:
    if not input.dtype.is_floating_point:
        return input == input
    return ops.abs(input) < math.inf


def float_power(input, exponent) -> Tensor:
    """pow computed in float64 (PyTorch's: both operands converted, a Python number as a
    float64 number)."""
    if not isinstance(input, Tensor) and not isinstance(exponent, Tensor):
        raise TypeError("float_power(): expected a Tensor as `input` or `exponent`, got two "
                        "numbers")
    base, power = (ops._to_copy(v, dtype=dtypes.float64) if isinstance(v, Tensor) else
                   float(v) for v in (input, exponent))
    if not isinstance(base, Tensor):
        base = factories.full((), base, dtype=dtypes.float64, device=power.device)
    return ops.pow(base, power)


def _float_power_(self: Tensor, exponent) -> Tensor:
    if self.dtype is not dtypes.float64:
        raise RuntimeError(f"the base given to float_power_ has dtype {type_word(self.dtype)}"
                           f" but the operation's result requires dtype Double")
    return self.copy_(float_power(self, exponent))


def count_nonzero(input: Tensor, dim=None) -> Tensor:
    nonzero = (input != 0).to(dtypes.int64)
    return nonzero.sum() if dim is None else nonzero.sum(dim)


def _ones_upper(n: int, like: Tensor, strict: bool = False) -> Tensor:
    """(n, n) with ones where column >= row (> when strict)."""
    r = factories.arange(n, device=like.device).unsqueeze(1)
    c = factories.arange(n, device=like.device)
    return ((c > r) if strict else (c >= r)).to(like.dtype)


def cumsum(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    x = input if dtype is None else input.to(dtype)
    if x.dim() == 0:
        return x.clone()
    d = wrap_dim(dim, x.dim())
    if not x.dtype.is_floating_point:
        sums = np.cumsum(x.detach().cpu().numpy(), axis=d)
        return factories.tensor(sums, dtype=dtypes.int64 if dtype is None else x.dtype,
                                device=x.device)
    last = ops.transpose(x, d, -1) if d != x.dim() - 1 else x
    n = last.shape[-1]
    if n <= 64:
        out = ops.matmul(last, _ones_upper(n, last))
    else:
        block = math.isqrt(n - 1) + 1
        count = -(-n // block)
        padded = ops.cat([last, factories.zeros(*last.shape[:-1], count * block - n,
                                               dtype=last.dtype, device=last.device)], -1) \
            if count * block > n else last
        rows = padded.reshape(list(last.shape[:-1]) + [count, block])
        within = ops.matmul(rows, _ones_upper(block, last))
        totals = ops.select(within, -1, block - 1)                     # (..., count)
        before = ops.matmul(totals, _ones_upper(count, last, strict=True))  # exclusive
        out = (within + ops.unsqueeze(before, -1)).reshape(list(last.shape[:-1]) +
                                                           [count * block])
        out = ops.slice(out, -1, 0, n)
    return ops.transpose(out, d, -1) if d != x.dim() - 1 else out


def cumprod(input: Tensor, dim: int, *, dtype=None) -> Tensor:
    """Running products along dim by doubling (Hillis-Steele): log2(n) elementwise
    products, each element times the one 1, 2, 4, ... places before it (ones before the
    start), exact at zeros and differentiable through mul."""
    x = input if dtype is None else input.to(dtype)
    if x.dim() == 0:
        return x.clone()
    d = wrap_dim(dim, x.dim())
    n, step = x.shape[d], 1
    while step < n:
        ones = factories.ones(*[step if i == d else s for i, s in enumerate(x.shape)],
                              dtype=x.dtype, device=x.device)
        x = x * ops.cat([ones, ops.slice(x, d, 0, n - step)], d)
        step *= 2
    return x


def bucketize(input, boundaries: Tensor, *, out_int32: bool = False,
              right: bool = False) -> Tensor:
    """The bucket of each value among sorted boundaries: how many boundaries lie below
    it (at or below it with right=True)."""
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.dim()})")
    values = input if isinstance(input, Tensor) else factories.tensor(input)
    wide = ops.unsqueeze(values, -1)
    below = (boundaries <= wide) if right else (boundaries < wide)
    return ops.sum(below.to(dtypes.int64), [-1], False).to(
        dtypes.int32 if out_int32 else dtypes.int64)


def searchsorted(sorted_sequence: Tensor, input, *, out_int32: bool = False,
                 right: bool = False, side: str | None = None) -> Tensor:
    """Insertion points of the values into a 1-D sorted sequence (bucketize's count)."""
    if sorted_sequence.dim() != 1:
        raise NotImplementedError("searchsorted: only a 1-D sorted_sequence is supported by "
                                  "kiln yet")
    return bucketize(input, sorted_sequence, out_int32=out_int32,
                     right=right or side == "right")


def unfold(input: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Tensor.unfold: the windows of `size` every `step` along `dimension`, that dim
    becoming the window count and the window a new last dim."""
    d = wrap_dim(dimension, max(input.dim(), 1))
    length = input.shape[d] if input.dim() else 1
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size "
                           f"is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    count = (length - size) // step + 1
    windows = ops.stack([ops.slice(input, d, i * step, i * step + size)
                         for i in range(count)], d)
    return ops.permute(windows, [i for i in range(windows.dim()) if i != d + 1] + [d + 1])


def diff(input: Tensor, n: int = 1, dim: int = -1, prepend=None, append=None) -> Tensor:
    d = wrap_dim(dim, input.dim())
    x = ops.cat([t for t in (prepend, input, append) if t is not None], d) \
        if prepend is not None or append is not None else input
    for _ in range(n):
        size = x.shape[d]
        if size == 0:
            break
        after, before = ops.slice(x, d, 1, size), ops.slice(x, d, 0, size - 1)
        x = (after != before) if x.dtype == dtypes.bool_ else after - before
    return x


def take_along_dim(input: Tensor, indices: Tensor, dim: int | None = None) -> Tensor:
    if dim is None:
        return ops.gather(input.reshape(-1), 0, indices.reshape(-1))
    d = wrap_dim(dim, input.dim())
    shape = [max(a, b) if i != d else b for i, (a, b) in
             enumerate(zip(input.shape, indices.shape))]
    bigger = [s if i != d else input.shape[d] for i, s in enumerate(shape)]
    return ops.gather(ops.expand(input, bigger), d, ops.expand(indices, shape))


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    return ops.unsqueeze(input, 1) * ops.unsqueeze(vec2, 0)


def inner(input: Tensor, other: Tensor) -> Tensor:
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    n = input.shape[-1]
    if other.shape[-1] != n:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(input.shape)} and {list(other.shape)}")
    out = ops.matmul(input.reshape(-1, n), other.reshape(-1, n).t())
    return out.reshape(list(input.shape[:-1]) + list(other.shape[:-1]))


def eye(n: int, m: int | None = None, *, dtype=None, device=None,
        requires_grad: bool = False) -> Tensor:
    m = n if m is None else m
    rows = factories.arange(n, device=device).unsqueeze(1)
    out = (rows == factories.arange(m, device=device)).to(dtype or dtypes.get_default_dtype())
    return out.requires_grad_(requires_grad) if requires_grad else out


def diagonal(input: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal `offset` of the (dim1, dim2) planes, as the last dim."""
    d1, d2 = wrap_dim(dim1, input.dim()), wrap_dim(dim2, input.dim())
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    rest = [d for d in range(input.dim()) if d not in (d1, d2)]
    x = ops.permute(input, rest + [d1, d2])
    rows, cols = x.shape[-2:]
    length = max(0, min(rows - max(0, -offset), cols - max(0, offset)))
    r = factories.arange(length, device=input.device) + max(0, -offset)
    c = factories.arange(length, device=input.device) + max(0, offset)
    return ops.index(x, x.dim() - 2, [r, c])


def diag(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: F811 - PyTorch's argument name
    """A 1-D input as the diagonal `diagonal` of a square matrix; a 2-D input's diagonal."""
    if input.dim() == 2:
        return _diagonal(input, diagonal)
    if input.dim() != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.dim()}D")
    n, k = input.shape[0], diagonal
    size = n + abs(k)
    r = factories.arange(size, device=input.device).unsqueeze(1)
    c = factories.arange(size, device=input.device)
    on = (c - r) == k
    source = ops.clamp(r if k >= 0 else c, None, max(n - 1, 0)) * 1
    picked = ops.index(input, 0, [ops.expand(source, [size, size])]) if n else \
        factories.zeros(size, size, dtype=input.dtype, device=input.device)
    return ops.where(on, picked, 0.0 if input.dtype.is_floating_point else 0)


def trace(input: Tensor) -> Tensor:
    if input.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.dim()}")
    return ops.sum(_diagonal(input))


_diagonal = diagonal


# einsum ---------------------------------------------------------------------------------
def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation: 'ij,jk->ik', 'bhqd,bhkd->bhqk', '...ij->...ji', 'ii->i' is
    not supported (a repeated index within one operand)."""
    ops_list = list(operands[0]) if len(operands) == 1 and isinstance(operands[0],
                                                                       (list, tuple)) \
        else list(operands)
    inputs, output = _parse(equation.replace(" ", ""), ops_list)
    tensors = list(ops_list)
    for i, (spec, t) in enumerate(zip(inputs, tensors)):
        if len(set(spec)) != len(spec):
            raise NotImplementedError(f"einsum: the repeated index in {spec!r} (a diagonal) "
                                      f"is not supported by kiln yet")
        others = set(output).union(*(set(s) for j, s in enumerate(inputs) if j != i))
        lonely = [k for k, a in enumerate(spec) if a not in others]
        if lonely:  # summed out before any product
            tensors[i] = ops.sum(t, lonely, False)
            inputs[i] = "".join(a for a in spec if a in others)
    spec, result = inputs[0], tensors[0]
    for i in range(1, len(tensors)):
        later = set(output).union(*(set(s) for s in inputs[i + 1:]))
        spec, result = _contract(spec, result, inputs[i], tensors[i], later)
    if sorted(spec) != sorted(output):  # indices left only in the one operand
        lonely = [k for k, a in enumerate(spec) if a not in output]
        result = ops.sum(result, lonely, False) if lonely else result
        spec = "".join(a for a in spec if a in output)
    return ops.permute(result, [spec.index(a) for a in output]) if output else result


def _parse(equation: str, tensors: list) -> tuple[list[str], str]:
    if "->" in equation:
        left, output = equation.split("->")
    else:
        left, output = equation, None
    inputs = left.split(",")
    if len(inputs) != len(tensors):
        raise RuntimeError(f"einsum(): {len(inputs)} operand(s) in the equation but "
                           f"{len(tensors)} given")
    spare = iter(a for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if a not in equation)
    width = max((t.dim() - len(s.replace("...", "")) for s, t in zip(inputs, tensors)
                 if "..." in s), default=0)
    dots = "".join(next(spare) for _ in range(width))
    expanded = []
    for s, t in zip(inputs, tensors):
        if "..." in s:
            mine = t.dim() - len(s.replace("...", ""))
            s = s.replace("...", dots[width - mine:])
        if len(s) != t.dim():
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(s)}) "
                               f"does not match the number of dimensions ({t.dim()}) for "
                               f"operand {len(expanded)}")
        expanded.append(s)
    if output is None:  # numpy's implicit output: indices seen once, sorted; then '...'
        counts = {}
        for s in expanded:
            for a in s:
                counts[a] = counts.get(a, 0) + 1
        output = dots + "".join(sorted(a for a, n in counts.items()
                                       if n == 1 and a not in dots))
    else:
        output = output.replace("...", dots)
    return expanded, output


def _contract(a_spec: str, a: Tensor, b_spec: str, b: Tensor, later: set) -> tuple:
    """a and b contracted as one batched matmul: (batch, a only, sum) @ (batch, sum, b only)."""
    sizes = dict(zip(a_spec, a.shape))
    for k, s in zip(b_spec, b.shape):
        if k in sizes and sizes[k] != s and 1 not in (sizes[k], s):
            raise RuntimeError(f"einsum(): operands do not broadcast with remapped shapes "
                               f"(subscript {k!r}: {sizes[k]} and {s})")
        sizes[k] = max(sizes.get(k, 1), s)
    both = [k for k in a_spec if k in b_spec]
    batch = [k for k in both if k in later]
    summed = [k for k in both if k not in later]
    a_only = [k for k in a_spec if k not in b_spec]
    b_only = [k for k in b_spec if k not in a_spec]

    def arrange(t, spec, order):
        t = ops.permute(t, [spec.index(k) for k in order])
        return ops.expand(t, [sizes[k] for k in order])

    def size(keys):
        return math.prod(sizes[k] for k in keys)

    left = arrange(a, a_spec, batch + a_only + summed).reshape(size(batch), size(a_only),
                                                               size(summed))
    right = arrange(b, b_spec, batch + summed + b_only).reshape(size(batch), size(summed),
                                                                size(b_only))
    out = ops.bmm(left, right).reshape([sizes[k] for k in batch + a_only + b_only])
    return "".join(batch + a_only + b_only), out


# found on the host ----------------------------------------------------------------------
def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    shape = list(np.broadcast_shapes(tuple(input.shape), tuple(mask.shape)))
    return ops.expand(input, shape)[ops.expand(mask, shape)]


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    if input.dim() != 1 or input.dtype.is_floating_point:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    values = input.detach().cpu().numpy()
    if values.size and values.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    w = None if weights is None else weights.detach().cpu().numpy()
    counts = np.bincount(values, w, minlength)
    dtype = dtypes.int64 if weights is None else (
        weights.dtype if weights.dtype.is_floating_point else dtypes.float64)
    return factories.tensor(counts, dtype=dtype, device=input.device)


def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim: int | None = None):
    values = input.detach().cpu().numpy()
    found = np.unique(values, return_inverse=True, return_counts=True, axis=dim)
    out = [factories.tensor(found[0], dtype=input.dtype, device=input.device)]
    if return_inverse:
        inverse = found[1].reshape(input.shape if dim is None else (-1,))
        out.append(factories.tensor(inverse, dtype=dtypes.int64, device=input.device))
    if return_counts:
        out.append(factories.tensor(found[2], dtype=dtypes.int64, device=input.device))
    return out[0] if len(out) == 1 else tuple(out)


FUNCTIONS = ["logsumexp", "norm", "log2", "log10", "reciprocal", "isnan", "isinf", "isposinf",
             "isneginf", "isfinite", "float_power", "count_nonzero", "cumsum",
             "cumprod",
             "bucketize", "diff", "take_along_dim", "outer", "inner", "diagonal", "diag",
             "trace", "masked_select", "bincount", "unique"]
"""eager.<name> and Tensor.<name> for each (eye and einsum: eager.<name> only)."""
__all__ = list(FUNCTIONS)
for _name in FUNCTIONS:
    setattr(Tensor, _name, globals()[_name])
Tensor.ger = Tensor.outer
Tensor.float_power_ = _float_power_
Tensor.unfold = unfold
