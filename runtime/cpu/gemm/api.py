"""kiln's own GEMM on numpy arrays, through native code built with llvmlite:

    out = residual + scale * act(alpha * op(A) @ op(B) + beta * C + bias)

with op = identity or transpose, float32 or float64 (or bfloat16 and float16 operands, for a
float32 product: see below), any strides (transposed and
non-contiguous views are read in place), and batches (`bmm`, with numpy broadcasting of
the batch dims). The epilogue (bias, activation, scale, residual) is fused into the
store of each register tile. When beta == 0, C is not read (NaNs in it do not leak), as
in BLAS; with K == 0 the product is zero.

The structure is Goto/BLIS (see ir/kernel.py): packed, cache-blocked, an MR x NR
register micro-kernel, one native call per block of rows or columns per thread (see
jobs.run); small products (config.DIRECT_MAX_MACS, DIRECT_SPREAD_MAX_MACS) skip
packing. Results are bitwise
identical across thread counts for one blocking (tune.py picks it).

bfloat16 and float16 A and B (both of one type) give a float32 product (C, bias,
residual and out are float32): they are widened to float32 (exactly) while they are
packed, so the result is bitwise the float32 product of the widened operands with the
same blocking, without a conversion pass over memory; with out_dtype set to their type,
the store rounds the result to it (after the epilogue, on the last K block: earlier
blocks keep their partial sums in a float32 array), without a rounding pass either.
A is always packed for such operands, and small products take the packed kernel with all
of K in one block (which is what the direct kernel computes) rather than the direct or
specialised kernels. On CPUs with AVX512-BF16 (kernels.dot_products), bfloat16 operands
are not widened: they are packed as pairs of K steps and multiplied by vdpbf16ps
(emit/kernel.py's Tile.dot), twice the multiply-adds per instruction; products of
bfloat16 values are exact in float32, so the result has the float32 bound below, but
not the float32 GEMM's bits (the pair's two products are added in another order, and
the instruction reads subnormal operands as zero).

Error bound, asserted by tests/runtime/cpu/test_gemm.py for every result, eps the dtype's
machine epsilon and |x| elementwise:

    |out - exact| <= (K + 8) * eps * (1.2 * |scale| * P + |exact| + |residual|)
    P = |alpha| * |op(A)| @ |op(B)| + |beta| * |C| + |bias|

K * eps covers the K multiply-adds of each dot product (accumulated in K blocks), the 8
the alpha, beta, bias, scale and residual roundings and the activation's few ulp, 1.2
the steepest slope of any activation (gelu's).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from runtime.cpu.gemm import DTYPES, HALF_OPERANDS, config, jobs, kernels, plans, small
from runtime.cpu.gemm import tune
from runtime.cpu.gemm.emit.kernel import EpilogueSpec
from ir.records import RECORDS, activations
from runtime.addresses import address


class Epilogue(NamedTuple):
    """What happens to each element after the product, in this order: `bias` added (a
    vector indexed by column when `bias_axis` is 1, as in a linear layer, or by row when
    it is 0; leading batch dims broadcast), `activation` (a name of ir.records.activations() or None),
    multiplication by `scale`, `residual` added (broadcastable to the output). (A named
    tuple: made at every call of a compiled GEMM, it costs a third of a dataclass.)"""
    bias: np.ndarray | None = None
    bias_axis: int = 1
    activation: str | None = None
    residual: np.ndarray | None = None
    scale: float = 1.0


# A request is one gemm() or bmm() call as asked, the one object that plans.serve and
# _product take: the tuple
#     (api, a, b, out, alpha, beta, c, trans_a, trans_b, epilogue, threads, specialise)
# of `api`, "gemm" or "bmm" (they check their operands differently), and the call's
# arguments as given; its readers unpack it whole, by these names. A plain tuple
# because it is made at every call: it costs what passing the arguments one by one did,
# where a NamedTuple's constructor adds ~0.35 us (~3,800 instructions) and a frozen
# dataclass's ~1 us, to a repeated 16^3 product that takes ~1.4 us in all.
GemmRequest = tuple


def gemm(a, b, *, out=None, alpha=1.0, beta=0.0, c=None, trans_a=False, trans_b=False,
         epilogue: Epilogue | None = None, threads: int | None = None,
         specialise: bool = True, out_dtype=None) -> np.ndarray:
    """alpha * op(a) @ op(b) + beta * C, then the epilogue, for 2-D a and b. C is `c`
    (broadcastable to M x N) or, if c is None, `out` (updated in place). Returns `out`
    (allocated when None). `threads` defaults to runtime.threads.num_threads().
    `specialise`: a small product (small.fits) seen twice gets a kernel compiled
    for its sizes; False keeps to the shape-generic kernels, for callers whose sizes
    vary (compiled dynamic=True graphs), where kernels per size would be compiled for
    nothing. `out_dtype`: for bfloat16 or float16 operands, their type gives the result
    rounded to it, once, in the store after the epilogue (no float32 result, no
    separate rounding pass; `out` must be None)."""
    request = ("gemm", a, b, out, alpha, beta, c, trans_a, trans_b, epilogue, threads,
               specialise)
    plan_key, result = plans.serve(request, out_dtype)
    return result if result is not None else _product(request, plan_key, out_dtype)


def bmm(a, b, *, out=None, alpha=1.0, beta=0.0, c=None, trans_a=False, trans_b=False,
        epilogue: Epilogue | None = None, threads: int | None = None,
        specialise: bool = True, out_dtype=None) -> np.ndarray:
    """gemm over the leading (batch) dims of a (..., M, K) and b (..., K, N), which
    broadcast as in numpy; c, the bias and the residual broadcast likewise."""
    request = ("bmm", a, b, out, alpha, beta, c, trans_a, trans_b, epilogue, threads,
               specialise)
    plan_key, result = plans.serve(request, out_dtype)
    return result if result is not None else _product(request, plan_key, out_dtype)


_DTYPES = tuple(np.dtype(name) for name in DTYPES)
# the product's dtype by the operands' (16-bit operands are widened while packed)
_PRODUCT_DTYPE = {**{dtype: dtype for dtype in _DTYPES},
                  **{kernels.operand_dtype(name): np.dtype(product)
                     for product, names in HALF_OPERANDS.items() for name in names}}


def _array(name: str, x) -> np.ndarray:
    if hasattr(x, "_np"):
        x = x._np()
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array or a kiln tensor, not "
                        f"{type(x).__name__}")
    return x


def _product(request: GemmRequest, plan_key: tuple | None, out_dtype=None) -> np.ndarray:
    """Check and run a request that no plan served; a plan is made for `plan_key` (see
    plans.py) when it is seen again. `out_dtype`: see gemm."""
    api, a, b, out, alpha, beta, c, trans_a, trans_b, epilogue, threads, specialise = request
    a, b = _array("a", a), _array("b", b)
    _check_ranks(api, a, b)
    epilogue = epilogue or _NO_EPILOGUE
    dtype = _PRODUCT_DTYPE.get(a.dtype)
    if dtype is None or b.dtype != a.dtype:  # ('>f4' is float32 in the other byte order)
        raise TypeError(f"{api}: a is {a.dtype} and b is {b.dtype}; both must be "
                        "float32, float64, bfloat16 or float16, in this machine's byte order")
    op_a = a.swapaxes(-1, -2) if trans_a else a
    op_b = b.swapaxes(-1, -2) if trans_b else b
    if op_a.shape[-1] != op_b.shape[-2]:
        raise ValueError(f"{api}: op(a) has shape {op_a.shape} and op(b) has shape "
                         f"{op_b.shape} (trans_a={trans_a}, trans_b={trans_b}): "
                         f"inner dims {op_a.shape[-1]} and {op_b.shape[-2]} differ")
    batch = _batch(api, a, b) if a.ndim > 2 or b.ndim > 2 else ()
    m, k, n = op_a.shape[-2], op_a.shape[-1], op_b.shape[-1]
    shape = (*batch, m, n)
    if batch:
        op_a, op_b = np.broadcast_to(op_a, (*batch, m, k)), np.broadcast_to(op_b, (*batch, k, n))
    if epilogue.activation is not None and epilogue.activation not in activations():
        raise ValueError(f"{api}: unknown activation {epilogue.activation!r}; expected one "
                         f"of {tuple(activations())}")
    bias = _bias(api, epilogue, dtype, batch, m, n)
    residual = _operand(api, "residual", epilogue.residual, dtype, shape)
    if beta != 0 and c is None:
        if out is None:
            raise ValueError(f"{api}: beta is {beta} but there is no C: pass c or out")
        c = out
    c = _operand(api, "c", c, dtype, shape) if beta != 0 else None
    rounded = _rounded(api, out_dtype, a.dtype, out, shape)
    if out is None:
        out = np.empty(shape, dtype)  # with `rounded`: partial sums between K blocks
    else:
        out = _output(api, out, dtype, shape)
        op_a, op_b, bias, residual = (_unshared(x, out) for x in (op_a, op_b, bias, residual))
        if c is not None and np.may_share_memory(c, out) and not _same_view(c, out):
            c = c.copy()
    if out.size == 0:
        return out if rounded is None else rounded
    if k == 0:
        start = beta * c if c is not None else np.zeros(shape, dtype)
        out[...] = _numpy_epilogue(start.astype(dtype, copy=False), epilogue, bias, residual)
        return out if rounded is None else out.astype(rounded.dtype)
    problem = _Problem(op_a, op_b, c, out, bias, epilogue.bias_axis, residual,
                       dtype.type(alpha), dtype.type(beta), dtype.type(epilogue.scale), rounded)
    _run(problem, epilogue.activation, threads, plan_key, specialise)
    return out if rounded is None else rounded


_NO_EPILOGUE = Epilogue()


def _rounded(api, out_dtype, operands: np.dtype, out, shape) -> np.ndarray | None:
    """The array for a result rounded to `out_dtype` (None: not asked for)."""
    if out_dtype is None or np.dtype(out_dtype) == _PRODUCT_DTYPE[operands]:
        return None
    if np.dtype(out_dtype) != operands or _PRODUCT_DTYPE[operands] == operands:
        raise TypeError(f"{api}: out_dtype {np.dtype(out_dtype)} is taken only for "
                        f"bfloat16 or float16 operands of that type, not {operands}")
    if out is not None:
        raise ValueError(f"{api}: out_dtype is taken only without out")
    return np.empty(shape, out_dtype)


def _check_ranks(api, a, b) -> None:
    for name, x in (("a", a), ("b", b)):
        if api == "gemm" and x.ndim != 2:
            raise ValueError(f"gemm: {name} must be 2-D, got shape {x.shape}; use bmm for "
                             "batches")
        if x.ndim < 2:
            raise ValueError(f"bmm: {name} must have at least 2 dims, got shape {x.shape}")


def _batch(api, a, b) -> tuple:
    try:
        return np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"{api}: batch dims of a {a.shape} and b {b.shape} do not "
                         "broadcast") from None


def _unshared(x, out):
    """x, or a copy of it if it may overlap out (which is written before x is read)."""
    return x if x is None or not np.may_share_memory(x, out) else x.copy()


def _bias(api, epilogue, dtype, batch, m, n):
    if epilogue.bias is None:
        return None
    if epilogue.bias_axis not in (0, 1):
        raise ValueError(f"{api}: bias_axis must be 0 (one value per row) or 1 (one per "
                         f"column), not {epilogue.bias_axis}")
    length = n if epilogue.bias_axis == 1 else m
    return _operand(api, "bias", epilogue.bias, dtype, (*batch, length))


def _operand(api, name, x, dtype, shape):
    if x is None:
        return None
    x = _array(name, x)
    if x.dtype != dtype:
        raise TypeError(f"{api}: {name} is {x.dtype} but the product is {dtype}")
    try:
        return np.broadcast_to(x, shape)
    except ValueError:
        raise ValueError(f"{api}: {name} has shape {x.shape}, which does not broadcast "
                         f"to {shape}") from None


def _output(api, out, dtype, shape):
    out = _array("out", out)
    if out.shape != shape or out.dtype != dtype:
        raise ValueError(f"{api}: out must be {dtype} of shape {shape}, got {out.dtype} "
                         f"of shape {out.shape}")
    if not out.flags.writeable:
        raise ValueError(f"{api}: out is read-only")
    if any(s == 0 and d > 1 for s, d in zip(out.strides, out.shape)):
        raise ValueError(f"{api}: out has overlapping elements (a zero stride)")
    return out


def _same_view(x, y) -> bool:
    return x.ctypes.data == y.ctypes.data and x.strides == y.strides


def _numpy_epilogue(x, epilogue, bias, residual):
    """The epilogue in numpy, for K == 0 (no product to fuse it into)."""
    if bias is not None:
        x = x + (bias[..., None, :] if epilogue.bias_axis == 1 else bias[..., :, None])
    if epilogue.activation is not None:
        x = activation_reference(epilogue.activation)(x)
    x = x * x.dtype.type(epilogue.scale)
    return x + residual if residual is not None else x


def activation_reference(name: str):
    """An activation in numpy: its op record's own function."""
    op, attrs = activations()[name]
    return lambda x: RECORDS[op].pointwise.numpy(x, **attrs)


@dataclass
class _Problem:
    """A validated product: every operand broadcast to its full (batch...) shape."""
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray | None
    out: np.ndarray
    bias: np.ndarray | None
    bias_axis: int
    residual: np.ndarray | None
    alpha: float
    beta: float
    scale: float
    rounded: np.ndarray | None = None  # out rounded to the 16-bit operands' type

    def transposed(self) -> "_Problem":
        """The same product as out^T = op(B)^T op(A)^T: bias axis and roles swap."""
        t = lambda x: None if x is None else np.swapaxes(x, -1, -2)  # noqa: E731
        return _Problem(t(self.b), t(self.a), t(self.c), t(self.out), self.bias,
                        1 - self.bias_axis, t(self.residual), self.alpha, self.beta,
                        self.scale, t(self.rounded))


def _run(problem: _Problem, activation, threads, plan_key: tuple | None = None,
         specialise: bool = True) -> None:
    """Lay out `problem` for the kernel (unit column stride of out, element strides)
    and run it, batch element by batch element, across threads; through a plan made
    for `plan_key` (see plans.py) when it is seen again."""
    out, itemsize = problem.out, problem.out.itemsize
    if out.shape[-1] > 1 and out.strides[-1] != itemsize:
        if out.shape[-2] == 1 or out.strides[-2] == itemsize:
            _run(problem.transposed(), activation, threads, None, specialise)
        else:
            target = out
            problem.out = np.empty(out.shape, out.dtype)
            _run(problem, activation, threads, None, specialise)
            target[...] = problem.out
        return
    copied = _whole_element_strides(problem)
    bias = None if problem.bias is None else ("col" if problem.bias_axis == 1 else "row")
    operands = problem.a.dtype
    kernel = kernels.kernel(out.dtype, _spec(bias, activation, problem.residual is not None),
                            operands=None if operands == out.dtype else operands.name)
    specialise = specialise and not kernel.packs_a  # the others read A and B in place
    batch = _products(problem, kernel.operand_itemsize)
    m, n, k = batch.call.m, batch.call.n, batch.call.k
    direct_domain = m * n * k <= config.DIRECT_MAX_MACS or (
        m * n * k <= config.DIRECT_SPREAD_MAX_MACS
        and not kernels.crowds_l1(batch.call.a_rs, kernel.dtype.itemsize))
    if not direct_domain and problem.rounded is None and m > 1 and n > 1 and \
            _fits_better_transposed(kernel.tile, m, n):
        # out^T = op(B)^T op(A)^T in a buffer of its own (the branch at the top runs
        # it), then copied: each element sees the same multiply-adds in the same order
        target, problem.out = out, np.empty((*out.shape[:-2], n, m), out.dtype).swapaxes(-1, -2)
        _run(problem, activation, threads, None, specialise)
        target[...] = problem.out
        return
    blocking = None
    if not direct_domain or (n > 1 and batch.call.b_cs != 1) or kernel.packs_a:
        blocking = tune.for_depth(tune.blocking(kernel, _tuning_measure), k)
        if direct_domain:  # all of K in one block, as in the direct and small.py's kernels:
            blocking = kernels.Blocking(blocking.mc, k, blocking.nc)  # the same result
    specialised, whole = None, False  # whole: one call of it computes the whole batch
    if direct_domain and specialise:
        body, cut = small.cut(batch, kernel.spec, kernel.dtype.itemsize, threads)
        whole = body is not None
        specialised = small.for_call(body if whole else batch.call, kernel.spec, out.dtype,
                                     cut if whole else small.Cut())
    if plan_key is not None and not copied:
        plan = plans.make(plan_key, kernel, batch, blocking, specialised, threads, out, whole,
                          problem.rounded)
        if plan is not None and plan.run_call(batch.call):
            return
    if blocking is not None and direct_domain and specialise and specialised is None:
        # A small product seen once whose B rows are not contiguous: the direct kernel on
        # a contiguous copy of B (a few microseconds), the same result as the packed
        # kernel with all of K in one block, without compiling a packed variant (~0.4 s)
        # for a product that gets its specialised kernel when seen again.
        problem.b = np.ascontiguousarray(problem.b)
        batch, blocking, copied = _products(problem, kernel.operand_itemsize), None, True
    if whole and specialised is not None:
        specialised.run_call(batch.call)  # piece 0's operands are the batch's first
        return
    jobs.run(kernel, batch, blocking, threads, specialised and specialised.item)


def _fits_better_transposed(tile, m: int, n: int) -> bool:
    """Whether the register tiles cover out^T (n x m) with clearly less waste than out
    (m x n): the edge tiles of a narrow N (65 columns: 32 + 32 + 1 of NR = 32) or of an
    N below NR compute whole tiles for a few columns (config.TRANSPOSE_GAIN)."""
    return _tile_use(tile, n, m) > config.TRANSPOSE_GAIN * _tile_use(tile, m, n)


def _tile_use(tile, m: int, n: int) -> float:
    """The fraction of the register tiles' multiply-adds that compute elements of an
    m x n out."""
    return m / (-(-m // tile.mr) * tile.mr) * n / (-(-n // tile.nr) * tile.nr)


@functools.cache
def _spec(bias, activation, residual) -> EpilogueSpec:
    return EpilogueSpec(bias, activation, residual)


def _whole_element_strides(problem: _Problem) -> bool:
    """Copy the (rare) operands whose strides or address are not whole elements (numpy
    marks them unaligned); whether any was."""
    copied = False
    for name in ("a", "b", "c", "bias", "residual"):
        x = getattr(problem, name)
        if x is not None and not x.flags.aligned:
            setattr(problem, name, np.ascontiguousarray(x))
            copied = True
    return copied


def _products(problem: _Problem, operand_itemsize: int) -> kernels.Batch:
    """The problem as a kernels.Batch: its first product and where the others are
    (`operand_itemsize`: of A's and B's elements)."""
    p, itemsize = problem, problem.out.itemsize
    m, k, n = p.a.shape[-2], p.a.shape[-1], p.b.shape[-1]
    operands = [_layout(p.a, 2, operand_itemsize), _layout(p.b, 2, operand_itemsize),
                _layout(p.c, 2, itemsize), _layout(p.out, 2, itemsize),
                _layout(p.bias, 1, itemsize), _layout(p.residual, 2, itemsize)]
    (a, _, sa), (b, _, sb), (c, _, sc), (out, _, so), (bias, _, sbias), (res, _, sr) = operands
    in_place = int(operand_itemsize == itemsize and kernels.reads_a_in_place(*sa, itemsize))
    rounded = 0 if p.rounded is None else address(p.rounded)
    first = kernels.Call(m, n, k, a, *sa, b, *sb, c, *sc, out, so[0], p.alpha, p.beta,
                        p.scale, bias, sbias[0], res, *sr, in_place, rounded)
    batch = p.out.shape[:-2]
    if not batch or int(np.prod(batch)) == 1:
        return kernels.Batch(first)
    index = np.indices(batch).reshape(len(batch), -1).T  # every batch index, in order
    offsets = np.stack([index @ np.array(strides, np.int64) if strides else
                        np.zeros(len(index), np.int64) for _, strides, _ in operands], axis=1)
    return kernels.Batch(first, offsets)


def _layout(x, dims: int, itemsize: int) -> tuple:
    """(address, batch strides in bytes, last `dims` strides in elements, padded to 2)."""
    if x is None:
        return _ABSENT
    strides = x.strides
    inner = (strides[-2] // itemsize, strides[-1] // itemsize) if dims == 2 else (
        strides[-1] // itemsize, 0)
    return address(x), strides[:-dims], inner


_ABSENT = (0, (), (0, 0))


def _tuning_measure(kernel: kernels.CompiledGemm):
    """A function timing one square TUNE_SIZE product with a given blocking, for the
    autotuner."""
    size, dtype = config.TUNE_SIZE, kernel.dtype
    rng = np.random.default_rng(0)
    # a tile widening 16-bit operands has the float32 tile's panels: timed as that one
    operands = kernels.operand_dtype(kernel.tile.operands) if kernel.tile.dot else dtype
    a, b = (rng.standard_normal((size, size)).astype(operands) for _ in range(2))
    out = np.empty((size, size), dtype)
    problem = _Problem(a, b, None, out, None, 1, None, dtype.type(1), dtype.type(0),
                       dtype.type(1))
    plain = kernels.kernel(dtype, EpilogueSpec(), kernel.tile if kernel.tile.dot else
                           replace(kernel.tile, operands=None))
    batch = _products(problem, operands.itemsize)

    def run(blocking: kernels.Blocking) -> tuple:
        jobs.run(plain, batch, blocking)
        return a, b, out  # the closure keeps the arrays behind the batch's pointers alive

    return tune.timer(run)
