"""nn.functional's convolutions and pools, written as windows of the (padded) input and
kiln's matrix product: a convolution gathers every kernel window of the input into a
column (the im2col op, eager/kernels/windows.py: one strided copy), then multiplies by
the weight as one batched GEMM; pools reduce the same windows (max, mean). So autograd
(col2im, matmul, max backward), every device, and the compiler (im2col, and a GEMM node
with its epilogue) need nothing else. conv_transpose2d interleaves zeros between the
input's elements and convolves with the flipped, transposed weight."""
from __future__ import annotations

import math

from eager import factories
from eager.amp import autocast_mode as _autocast
from eager.autograd.grad_mode import is_grad_enabled
from eager.kernels._common import computed
from eager.kernels.windows import offset_slices
from eager.nn._normalization import pad
from eager.tensor import Tensor, ops
from ir import dtypes

__all__ = ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "unfold", "fold",
           "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d", "adaptive_max_pool2d"]


def _pair(name: str, value, n: int = 2) -> tuple:
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or any(not isinstance(v, int) for v in values):
        raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {value!r}")
    return values


def _out_size(size: int, kernel: int, stride: int, pad: int, dilation: int,
              ceil_mode: bool = False) -> int:
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + pad:  # the last window starts in the right padding
            out -= 1
        return out
    return span // stride + 1


def _columns(x: Tensor, kernel, dilation, padding, stride) -> Tensor:
    """im2col of a convolution's x. A bfloat16 x that will get a gradient takes it through float32: its
    gradient, col2im of the columns', then adds its overlapping windows in float32 and
    rounds once, as PyTorch's bfloat16 convolution backward (oneDNN's) accumulates.
    float16's col2im rounds each add, as PyTorch's own (slow, im2col) convolution does
    for it, as pooling's backward does for both, and F.unfold's gradient (windows.py)."""
    if x.dtype is dtypes.bfloat16 and x.requires_grad and is_grad_enabled():
        wide = ops._to_copy(x, dtype=dtypes.float32)
        return ops._to_copy(ops.im2col(wide, kernel, dilation, padding, stride),
                            dtype=x.dtype)
    return ops.im2col(x, kernel, dilation, padding, stride)


def _windows(x: Tensor, kernel: tuple, stride: tuple, dilation: tuple, out: tuple) -> Tensor:
    """(N, C, kh*kw, oh, ow): for each kernel offset, the strided slice of x (already
    padded) that offset reads at every output position (one im2col)."""
    n, c = x.shape[:2]
    return ops.im2col(x, list(kernel), list(dilation), [0, 0], list(stride)).reshape(
        n, c, kernel[0] * kernel[1], out[0], out[1])


def _check_input(fn: str, input: Tensor, rank: int) -> bool:
    """True where the input is unbatched (one dim fewer); raises on other ranks."""
    if input.dim() not in (rank + 1, rank + 2):
        raise RuntimeError(f"{fn}: Expected {rank + 1}D (unbatched) or {rank + 2}D (batched) "
                           f"input, but got input of size: {list(input.shape)}")
    return input.dim() == rank + 1


def _same_padding(kernel: tuple, dilation: tuple) -> tuple[list, tuple]:
    """F.pad amounts (last dim first) and conv padding 0 for padding='same': the total
    dilation (k - 1) split with the extra element on the right, as PyTorch does."""
    amounts = []
    for k, d in reversed(list(zip(kernel, dilation))):
        total = d * (k - 1)
        amounts += [total // 2, total - total // 2]
    return amounts, (0,) * len(kernel)


FOLD_BELOW = 256
"""Output positions an image below which conv2d multiplies once over the whole batch
(the columns transposed to (C K, N L), a copy) rather than image by image: an image's
product is (O, C K) @ (C K, L), and at L = 1 .. 64 (ResNet-18's later stages on CIFAR
sizes) those are matrix-vector-thin products that run the GEMM at a tenth of its speed."""


@_autocast.policy("conv2d")
def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """(N, C, H, W) * (O, C / groups, kh, kw) -> (N, O, oh, ow)."""
    unbatched = _check_input("conv2d", input, 2)
    x = ops.unsqueeze(input, 0) if unbatched else input
    if weight.dim() != 4:
        raise RuntimeError(f"conv2d: weight should be 4D (out_channels, in_channels / groups, "
                           f"kH, kW), got size {list(weight.shape)}")
    stride, dilation = _pair("stride", stride), _pair("dilation", dilation)
    kernel = tuple(weight.shape[2:])
    n, c, h, w = x.shape
    o = weight.shape[0]
    if groups <= 0 or c % groups or o % groups:
        raise RuntimeError(f"conv2d: in_channels ({c}) and out_channels ({o}) must both be "
                           f"divisible by groups ({groups})")
    if weight.shape[1] * groups != c:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(input.shape)} to have "
                           f"{weight.shape[1] * groups} channels, but got {c} channels instead")
    if isinstance(padding, str):
        if padding not in ("same", "valid"):
            raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                             f"{{'valid', 'same'}}")
        if padding == "same" and any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        if padding == "same":  # (its left and right amounts may differ)
            x = pad(x, _same_padding(kernel, dilation)[0])
        padding = (0, 0)
    else:
        padding = _pair("padding", padding)
    out = tuple(_out_size(s, k, st, p, d) for s, k, st, p, d in
                zip(x.shape[2:], kernel, stride, padding, dilation))
    if min(out) <= 0:
        raise RuntimeError(f"conv2d: the kernel {list(kernel)} (dilation {list(dilation)}) "
                           f"does not fit the padded input of size "
                           f"{[s + 2 * p for s, p in zip(x.shape[2:], padding)]}")
    cols = _columns(x, list(kernel), list(dilation), list(padding), list(stride))
    k = kernel[0] * kernel[1]                                  # cols: (N, C K, L)
    # a 16-bit convolution adds its bias before the product is rounded, once, as
    # PyTorch's does (a product rounded, then the bias added, rounds twice)
    rounded_once = bias is not None and x.dtype in dtypes.HALF
    if groups == 1:  # (O, C K) @ the columns, the bias added in the product's shape: the
        # compiler's GEMM node takes it (and an activation after it) as its epilogue
        positions = out[0] * out[1]
        # one (O, C K) @ (C K, N L), not N thin products (16-bit with a bias: addmm's)
        fold = n > 1 and (positions < FOLD_BELOW or rounded_once)
        columns = ops.transpose(cols, 0, 1).reshape(c * k, n * positions) if fold else cols
        if rounded_once:
            product = ops.addmm(bias.reshape(o, 1), weight.reshape(o, c * k),
                                columns.reshape(c * k, -1))
        else:
            product = ops.matmul(weight.reshape(o, c * k), columns)
            if bias is not None:
                product = product + bias.reshape(o, 1)
        if fold:
            product = ops.transpose(product.reshape(o, n, positions), 0, 1)
        result = product.reshape(n, o, out[0], out[1])
    else:
        cols = cols.reshape(n, groups, (c // groups) * k, out[0] * out[1])
        weights = weight.reshape(groups, o // groups, (c // groups) * k)
        if rounded_once:  # (computed in float32, as the 16-bit kernels compute)
            wide = ops.matmul(computed(weights), computed(cols)).reshape(n, o, out[0], out[1])
            result = (wide + computed(bias).reshape(1, o, 1, 1)).to(x.dtype)
        else:
            result = ops.matmul(weights, cols).reshape(n, o, out[0], out[1])
            if bias is not None:
                result = result + bias.reshape(1, o, 1, 1)
    return ops.squeeze(result, [0]) if unbatched else result


@_autocast.policy("conv1d")
def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """(N, C, L) * (O, C / groups, k) -> (N, O, out): conv2d over a height of 1."""
    unbatched = _check_input("conv1d", input, 1)
    x = ops.unsqueeze(input, 0) if unbatched else input
    if weight.dim() != 3:
        raise RuntimeError(f"conv1d: weight should be 3D (out_channels, in_channels / groups, "
                           f"k), got size {list(weight.shape)}")
    padding_2d = padding if isinstance(padding, str) else (0, _pair("padding", padding, 1)[0])
    out = conv2d(ops.unsqueeze(x, 2), ops.unsqueeze(weight, 2), bias,
                 (1, _pair("stride", stride, 1)[0]), padding_2d,
                 (1, _pair("dilation", dilation, 1)[0]),
                 groups)
    out = ops.squeeze(out, [2])
    return ops.squeeze(out, [0]) if unbatched else out


def _interleave_zeros(x: Tensor, dim: int, stride: int) -> Tensor:
    """stride - 1 zeros between neighbours along dim (none after the last)."""
    if stride == 1:
        return x
    zeros = factories.zeros(*x.shape, dtype=x.dtype, device=x.device)
    spread = ops.stack([x] + [zeros] * (stride - 1), dim + 1)
    shape = list(x.shape)
    shape[dim] *= stride
    return ops.slice(spread.reshape(shape), dim, 0, (x.shape[dim] - 1) * stride + 1)


@_autocast.policy("conv_transpose2d")
def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """The gradient of conv2d with respect to its input, as a layer: (N, C, H, W) with
    weight (C, O / groups, kh, kw) -> (N, O, (H - 1) s - 2 p + d (k - 1) + op + 1, ...)."""
    unbatched = _check_input("conv_transpose2d", input, 2)
    x = ops.unsqueeze(input, 0) if unbatched else input
    stride, padding = _pair("stride", stride), _pair("padding", padding)
    output_padding, dilation = _pair("output_padding", output_padding), \
        _pair("dilation", dilation)
    if any(op >= max(s, d) for op, s, d in zip(output_padding, stride, dilation)):
        raise RuntimeError("output padding must be smaller than either stride or dilation")
    c, o_per_group = weight.shape[0], weight.shape[1]
    if x.shape[1] != c or c % groups:
        raise RuntimeError(f"conv_transpose2d: weight of size {list(weight.shape)} expects "
                           f"{c} input channels (divisible by groups={groups}), got "
                           f"{x.shape[1]}")
    kernel = tuple(weight.shape[2:])
    for dim, s in ((2, stride[0]), (3, stride[1])):
        x = _interleave_zeros(x, dim, s)
    amounts = []
    for k, d, p, op in reversed(list(zip(kernel, dilation, padding, output_padding))):
        edge = d * (k - 1) - p
        amounts += [edge, edge + op]
    x = pad(x, amounts)
    # (C, O/g, kh, kw) -> (O, C/g, kh, kw), flipped in space
    w = weight.reshape(groups, c // groups, o_per_group, *kernel).transpose(1, 2)
    w = w.reshape(groups * o_per_group, c // groups, *kernel).flip([2, 3])
    out = conv2d(x, w, bias, 1, 0, dilation, groups)
    return ops.squeeze(out, [0]) if unbatched else out


@_autocast.policy("conv_transpose1d")
def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    unbatched = _check_input("conv_transpose1d", input, 1)
    x = ops.unsqueeze(input, 0) if unbatched else input
    out = conv_transpose2d(ops.unsqueeze(x, 2), ops.unsqueeze(weight, 2), bias,
                           (1, _pair("stride", stride, 1)[0]),
                           (0, _pair("padding", padding, 1)[0]),
                           (0, _pair("output_padding", output_padding, 1)[0]), groups,
                           (1, _pair("dilation", dilation, 1)[0]))
    out = ops.squeeze(out, [2])
    return ops.squeeze(out, [0]) if unbatched else out


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """(N, C, H, W) -> (N, C * kh * kw, L): every kernel window as a column (im2col)."""
    if input.dim() not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported "
                                  f"(got {input.dim()}D)")
    return ops.im2col(input, *_window_args(kernel_size, dilation, padding, stride))


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """(N, C * kh * kw, L) -> (N, C, H, W): unfold's columns added back into images
    (where windows overlap, their elements add up)."""
    if input.dim() not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input "
                                  f"Tensors are supported (got {input.dim()}D)")
    return ops.col2im(input, list(_pair("output_size", output_size)),
                      *_window_args(kernel_size, dilation, padding, stride))


def _window_args(kernel_size, dilation, padding, stride) -> list[list[int]]:
    return [list(_pair(name, value)) for name, value in (
        ("kernel_size", kernel_size), ("dilation", dilation), ("padding", padding),
        ("stride", stride))]


def _pool_input(fn: str, input: Tensor, kernel_size, stride, padding, dilation, ceil_mode,
                  fill: float):
    """(the input padded with `fill` for a 2-D pool's windows, unbatched, (kernel, stride,
    padding, dilation, output size))."""
    unbatched = _check_input(fn, input, 2)
    x = ops.unsqueeze(input, 0) if unbatched else input
    kernel = _pair("kernel_size", kernel_size)
    stride = kernel if stride is None or stride == [] else _pair("stride", stride)
    padding, dilation = _pair("padding", padding), _pair("dilation", dilation)
    if any(2 * p > k for p, k in zip(padding, kernel)):
        raise RuntimeError(f"{fn}: pad should be at most half of effective kernel size, but "
                           f"got pad={list(padding)} and kernel_size={list(kernel)}")
    out = tuple(_out_size(s, k, st, p, d, ceil_mode) for s, k, st, p, d in
                zip(x.shape[2:], kernel, stride, padding, dilation))
    if min(out) <= 0:
        raise RuntimeError(f"{fn}: Output size is too small (input {list(input.shape)}, "
                           f"kernel {list(kernel)})")
    # pad left by p, right by whatever the last window needs
    amounts = []
    for dim, (s, k, st, p, d, o) in reversed(list(enumerate(
            zip(x.shape[2:], kernel, stride, padding, dilation, out)))):
        need = (o - 1) * st + d * (k - 1) + 1
        amounts += [p, max(need - s - p, 0)]
    if any(amounts):
        x = pad(x, amounts, value=fill)
    return x, unbatched, (kernel, stride, padding, dilation, out)


SLICED_MAX = 9
"""A max pool whose indices no one needs, of this many kernel elements or fewer, takes
the maximum of its offsets' slices pairwise (2x2 of 8x16x16x16: ~30 us against ~100 for
im2col and amax); larger windows reduce im2col's columns."""


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    x, unbatched, (kernel, stride, padding, dilation, out) = _pool_input(
        "max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, -math.inf)
    if not return_indices and not (input.requires_grad and is_grad_enabled()):
        # max's values (NaN wins, as there); its indices serve only backward
        if kernel[0] * kernel[1] <= SLICED_MAX:
            slices = offset_slices(x, kernel, dilation, stride, out)
            values = slices[0] if len(slices) == 1 else ops.maximum(slices[0], slices[1])
            for piece in slices[2:]:
                values = ops.maximum(values, piece)
            values = values if len(slices) > 1 else ops.clone(values)
        else:
            values = ops.amax(_windows(x, kernel, stride, dilation, out), [2], False)
        return ops.squeeze(values, [0]) if unbatched else values
    windows = _windows(x, kernel, stride, dilation, out)
    values, which = ops.max(windows, 2, False)
    if unbatched:
        values, which = ops.squeeze(values, [0]), ops.squeeze(which, [0])
    if not return_indices:
        return values
    # the flat index in the input's H x W plane of each maximum: its window's corner
    # plus the offset of kernel element `which` (looked up: no integer division op)
    offsets = [divmod(k, kernel[1]) for k in range(kernel[0] * kernel[1])]
    down = factories.tensor([i * dilation[0] for i, _ in offsets], device=input.device)
    across = factories.tensor([j * dilation[1] for _, j in offsets], device=input.device)
    oh = factories.arange(out[0], device=input.device).reshape(out[0], 1)
    ow = factories.arange(out[1], device=input.device)
    row = oh * stride[0] - padding[0] + down[which]
    col = ow * stride[1] - padding[1] + across[which]
    return values, row * input.shape[-1] + col


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    x, unbatched, (kernel, stride, padding, _, out) = _pool_input(
        "avg_pool2d", input, kernel_size, stride, padding, 1, ceil_mode, 0.0)
    windows = _windows(x, kernel, stride, (1, 1), out)
    total = ops.sum(windows, [2], False)
    if divisor_override:
        result = total / divisor_override
    else:
        counts = _window_counts(input.shape[-2:], kernel, stride, padding, out,
                                count_include_pad)
        result = total / factories.tensor(counts, dtype=input.dtype, device=input.device)
    return ops.squeeze(result, [0]) if unbatched else result


def _window_counts(size, kernel, stride, padding, out, include_pad: bool) -> list:
    """How many elements each window averages: PyTorch counts the padding (not the part
    past it that ceil_mode adds) when include_pad, else only the input's elements."""
    def counts(n, k, s, p, o):
        spans = []
        for i in range(o):
            start = i * s - p
            end = min(start + k, n + p)
            if not include_pad:
                start, end = max(start, 0), min(end, n)
            spans.append(end - max(start, -p))
        return spans
    rows = counts(size[0], kernel[0], stride[0], padding[0], out[0])
    cols = counts(size[1], kernel[1], stride[1], padding[1], out[1])
    return [[r * c for c in cols] for r in rows]


def _adaptive(fn: str, reduce, input: Tensor, output_size, rank: int) -> Tensor:
    """Output cell i of each dim reduces input[floor(i n / o) : ceil((i + 1) n / o)]."""
    unbatched = _check_input(fn, input, rank)
    x = ops.unsqueeze(input, 0) if unbatched else input
    size = tuple(x.shape[2:])
    out = _pair("output_size", output_size, rank) if not isinstance(output_size, (list, tuple)) \
        else tuple(s if o is None else o for s, o in zip(size, output_size))
    if all(n % o == 0 for n, o in zip(size, out)):  # equal windows: one strided reduction
        kernel = tuple(n // o for n, o in zip(size, out))
        x2 = x if rank == 2 else ops.unsqueeze(x, 2)
        k2 = kernel if rank == 2 else (1,) + kernel
        o2 = out if rank == 2 else (1,) + out
        result = reduce(_windows(x2, k2, k2, (1, 1), o2), 2)
        result = result if rank == 2 else ops.squeeze(result, [2])
    else:
        bounds = [[(i * n // o, -(-(i + 1) * n // o)) for i in range(o)]
                  for n, o in zip(size, out)]
        cells = []
        for r0, r1 in bounds[0]:
            rows = ops.slice(x, 2, r0, r1)
            if rank == 1:
                cells.append(reduce(rows, 2))
                continue
            for c0, c1 in bounds[1]:
                cells.append(reduce(ops.slice(rows, 3, c0, c1).reshape(
                    x.shape[0], x.shape[1], 1, -1), 3).reshape(x.shape[0], x.shape[1]))
        result = ops.stack(cells, 2).reshape(x.shape[0], x.shape[1], *out)
    return ops.squeeze(result, [0]) if unbatched else result


def _mean(t: Tensor, dim) -> Tensor:
    return ops.mean(t, [dim] if isinstance(dim, int) else dim, False)


def _max(t: Tensor, dim) -> Tensor:
    return ops.amax(t, [dim] if isinstance(dim, int) else dim, False)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    return _adaptive("adaptive_avg_pool2d", _mean, input, output_size, 2)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False) -> Tensor:
    if return_indices:
        raise NotImplementedError("adaptive_max_pool2d(return_indices=True) is not supported "
                                  "by kiln yet")
    return _adaptive("adaptive_max_pool2d", _max, input, output_size, 2)


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    return _adaptive("adaptive_avg_pool1d", _mean, input, output_size, 1)


def _one_d(pool, input: Tensor, *args, **kwargs):
    """A 2-D pool over a height of 1."""
    unbatched = input.dim() == 2
    x = ops.unsqueeze(input if not unbatched else ops.unsqueeze(input, 0), 2)
    result = pool(x, *args, **kwargs)
    if isinstance(result, tuple):
        values, indices = (ops.squeeze(r, [2]) for r in result)
        return (ops.squeeze(values, [0]), ops.squeeze(indices, [0])) if unbatched else \
            (values, indices)
    result = ops.squeeze(result, [2])
    return ops.squeeze(result, [0]) if unbatched else result


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    if input.dim() not in (2, 3):
        raise RuntimeError(f"max_pool1d: Expected 2D or 3D input, got {input.dim()}D")
    one = (lambda v, default: (default, v if isinstance(v, int) else v[0]))
    return _one_d(max_pool2d, input, one(kernel_size, 1),
                  None if stride is None else one(stride, 1), one(padding, 0),
                  one(dilation, 1), ceil_mode, return_indices)


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    if input.dim() not in (2, 3):
        raise RuntimeError(f"avg_pool1d: Expected 2D or 3D input, got {input.dim()}D")
    one = (lambda v, default: (default, v if isinstance(v, int) else v[0]))
    return _one_d(avg_pool2d, input, one(kernel_size, 1),
                  None if stride is None else one(stride, 1), one(padding, 0), ceil_mode,
                  count_include_pad)
