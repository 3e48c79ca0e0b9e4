"""nn.functional's resampling of images, in eager ops (so gradients are those ops'):

    pixel_shuffle, pixel_unshuffle   a reshape, a permute and a copy
    interpolate                      per spatial dim, from the last: index_select of the
                                     source rows (nearest) or of the two neighbours, blended
                                     by their weights (linear); PyTorch's source indices,
                                     computed on the host from the sizes alone, in the
                                     input's float type as PyTorch's CPU kernels compute them
    grid_sample, affine_grid         the four (or one nearest) source pixels of each grid
                                     point gathered from the flattened image, weighted and
                                     masked; the weights carry the gradient to the grid
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from eager import factories
from eager.composite import copied_as
from eager.kernels._common import type_word
from eager.nn import _convolution
from eager.tensor import Tensor, ops
from ir import dtypes

__all__ = ["pixel_shuffle", "pixel_unshuffle", "interpolate", "upsample", "upsample_nearest",
           "upsample_bilinear", "grid_sample", "affine_grid"]


# pixel shuffle ----------------------------------------------------------------------------
def _check_factor(fn: str, what: str, input: Tensor, factor: int) -> None:
    if input.dim() < 3:
        raise RuntimeError(f"{fn} expects input to have at least 3 dimensions, but got input "
                           f"with {input.dim()} dimension(s)")
    if factor <= 0:
        raise RuntimeError(f"{fn} expects a positive {what}, but got {factor}")


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C r^2, H, W) -> (*, C, H r, W r): each group of r^2 channels tiles an r x r block."""
    r = upscale_factor
    _check_factor("pixel_shuffle", "upscale_factor", input, r)
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    n = len(lead)
    blocks = input.reshape([*lead, c // (r * r), r, r, h, w])
    moved = ops.permute(blocks, [*range(n), n, n + 3, n + 1, n + 4, n + 2])
    return copied_as(moved, [*lead, c // (r * r), h * r, w * r])


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """(*, C, H r, W r) -> (*, C r^2, H, W): pixel_shuffle undone."""
    r = downscale_factor
    _check_factor("pixel_unshuffle", "downscale_factor", input, r)
    *lead, c, h, w = input.shape
    for name, size, dim in (("height", h, -2), ("width", w, -1)):
        if size % r:
            raise RuntimeError(f"pixel_unshuffle expects {name} to be divisible by "
                               f"downscale_factor, but input.size({dim})={size} is not "
                               f"divisible by {r}")
    n = len(lead)
    blocks = input.reshape([*lead, c, h // r, r, w // r, r])
    moved = ops.permute(blocks, [*range(n), n, n + 2, n + 4, n + 1, n + 3])
    return copied_as(moved, [*lead, c * r * r, h // r, w // r])


# interpolate ------------------------------------------------------------------------------
_LINEAR_RANK = {"linear": 3, "bilinear": 4, "trilinear": 5}
_MODES = ("nearest", "nearest-exact", "area", *_LINEAR_RANK)
_KERNEL_NAMES = {3: "1d", 4: "2d", 5: "3d"}


def _per_dim(name: str, value, input: Tensor) -> list:
    spatial = list(input.shape[2:])
    if not isinstance(value, (list, tuple)):
        return [value] * len(spatial)
    if len(value) != len(spatial):
        what = "output size" if name == "size" else "scale_factor of shape"
        raise ValueError(f"Input and {'output' if name == 'size' else 'scale_factor'} must have "
                         f"the same number of spatial dimensions, but got input with spatial "
                         f"dimensions of {spatial} and {what} {value}. Please provide input "
                         f"tensor in (N, C, d1, d2, ...,dK) format and {name} in "
                         f"({'o' if name == 'size' else 's'}1, ..., "
                         f"{'o' if name == 'size' else 's'}K) format.")
    return list(value)


def _output_sizes(input: Tensor, size, scale_factor, recompute: bool):
    """(output sizes, the scales the kernels use or None per dim), as PyTorch's
    interpolate and its C++ output size computation give them."""
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is None and scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    if size is not None:
        if recompute:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = _per_dim("size", size, input)
        if not all(isinstance(s, (int, np.integer)) for s in sizes):
            raise TypeError(f"expected size to be one of int or Tuple[int] or Tuple[int, int] or "
                            f"Tuple[int, int, int], but got size with types "
                            f"{[type(s) for s in sizes]}")
        return [int(s) for s in sizes], [None] * len(sizes)
    scales = [float(s) for s in _per_dim("scale_factor", scale_factor, input)]
    sizes = [math.floor(n * s) for n, s in zip(input.shape[2:], scales)]
    return sizes, [None] * len(sizes) if recompute else scales


def _nearest_sources(n_in: int, n_out: int, scale, exact: bool) -> np.ndarray:
    """PyTorch's nearest_idx / nearest_exact_idx: float32 arithmetic whatever the input."""
    f = np.float32(1.0 / scale) if scale is not None and scale > 0 else \
        np.float32(n_in) / np.float32(n_out)
    out = np.arange(n_out)
    if exact:
        src = np.floor(((out + 0.5) * np.float64(f)).astype(np.float32))
    elif n_out == n_in:
        return out
    elif n_out == 2 * n_in:
        return out >> 1
    else:
        src = np.floor(out.astype(np.float32) * f)
    return np.minimum(src.astype(np.int64), n_in - 1)


def _linear_sources(n_in: int, n_out: int, scale, align_corners: bool, dt):
    """PyTorch's area_pixel_compute_source_index and guard_index_and_lambda in the type
    `dt` (the input's float type): (left index, right index, right weight)."""
    if align_corners:
        f = dt(n_in - 1) / dt(n_out - 1) if n_out > 1 else dt(0)
        src = f * np.arange(n_out, dtype=dt)
    else:
        f = dt(1.0 / scale) if scale is not None and scale > 0 else dt(n_in) / dt(n_out)
        src = np.maximum(f * (np.arange(n_out, dtype=dt) + dt(0.5)) - dt(0.5), dt(0))
    left = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    weight = np.clip(src - left.astype(dt), dt(0), dt(1))
    right = left + (left < n_in - 1)
    return left, right, weight


def _along(x: Tensor, dim: int, index: np.ndarray) -> Tensor:
    return ops.index_select(x, dim, factories.tensor(index, device=x.device))


def _weights(x: Tensor, dim: int, w: np.ndarray) -> Tensor:
    shape = [w.shape[0]] + [1] * (x.dim() - 1 - dim)
    return factories.tensor(w.reshape(shape), dtype=x.dtype, device=x.device)


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims (all but the first two) of a 3-D, 4-D or 5-D input."""
    if mode not in _MODES:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported by kiln "
                                  f"(one of {', '.join(_MODES)})")
    if mode in ("nearest", "nearest-exact", "area") and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by kiln")
    if input.dim() not in (3, 4, 5):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got "
                                  f"{input.dim()}D) for the modes: {' | '.join(_MODES)} (got "
                                  f"{mode})")
    if mode in _LINEAR_RANK and input.dim() != _LINEAR_RANK[mode]:
        raise NotImplementedError(f"Got {input.dim()}D input, but {mode} mode needs "
                                  f"{_LINEAR_RANK[mode]}D input")
    sizes, scales = _output_sizes(input, size, scale_factor, bool(recompute_scale_factor))
    if any(s <= 0 for s in sizes) or any(n <= 0 for n in input.shape[2:]):
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input "
                           f"{list(input.shape[2:])} output {sizes}")
    if mode == "area":
        return _area(input, sizes)
    kernel = f"upsample_{mode.replace('-', '_')}{_KERNEL_NAMES[input.dim()]}"
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{type_word(input.dtype)}'")
    dt = np.float64 if input.dtype is dtypes.float64 else np.float32
    out = input
    for dim in reversed(range(2, input.dim())):  # the last first, as PyTorch's loops blend
        n_in, n_out, scale = input.shape[dim], sizes[dim - 2], scales[dim - 2]
        if mode in _LINEAR_RANK:
            left, right, w = _linear_sources(n_in, n_out, scale, bool(align_corners), dt)
            out = _along(out, dim, left) * _weights(out, dim, 1 - w) + \
                _along(out, dim, right) * _weights(out, dim, w)
        else:
            out = _along(out, dim, _nearest_sources(n_in, n_out, scale, mode != "nearest"))
    return out


def _area(input: Tensor, sizes: list[int]) -> Tensor:
    if input.dim() == 5:
        raise NotImplementedError("interpolate: mode 'area' of a 5-D input (adaptive_avg_pool3d) "
                                  "is not supported by kiln")
    pool = _convolution.adaptive_avg_pool1d if input.dim() == 3 else \
        _convolution.adaptive_avg_pool2d
    return pool(input, sizes if input.dim() == 4 else sizes[0])


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",
             align_corners: bool | None = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    return interpolate(input, size, scale_factor, "nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    return interpolate(input, size, scale_factor, "bilinear", align_corners=True)


# grid_sample --------------------------------------------------------------------------------
_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to align_corners="
                  "False since 1.3.0. Please specify align_corners=True if the old behavior is "
                  "desired. See the documentation of grid_sample for details.")


def _check_grid(input: Tensor, grid: Tensor, mode: str, padding_mode: str) -> None:
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if mode == "bicubic":
        raise NotImplementedError("grid_sample: mode 'bicubic' is not supported by kiln")
    sizes = f"input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}"
    if input.dim() == 5 and grid.dim() == 5:
        raise NotImplementedError("grid_sample: 5-D (volumetric) input is not supported by kiln")
    if input.dim() != 4 or grid.dim() != 4:
        raise RuntimeError(f"grid_sampler(): expected 4D input and grid with same number of "
                           f"dimensions, but got {sizes}")
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, "
                           f"but got {sizes}")
    if grid.shape[-1] != 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size 2 in last dimension, "
                           f"but got grid with sizes {list(grid.shape)}")
    for d in (2, 3):
        if input.shape[d] == 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial "
                               f"dimensions, but input has sizes {list(input.shape)} with "
                               f"dimension {d} being empty")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"grid_sampler_2d_cpu_kernel_impl\" not implemented for "
                                  f"'{type_word(input.dtype)}'")
    if grid.dtype is not input.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have the same dtype, "
                           f"but input has {type_word(input.dtype)} and grid has "
                           f"{type_word(grid.dtype)}")


def _floor(v: Tensor, size: int) -> Tensor:
    """floor(v) (no gradient) where it matters: v is clamped to [-2, size + 1] first (any
    corner outside is masked or clipped alike), NaN counting as -2."""
    v = ops.clamp(ops.where(ops.ne(v, v), -2.0, v.detach()), -2.0, size + 1.0)
    t = v.to(dtypes.int64).to(v.dtype)
    return t - ops.gt(t, v).to(v.dtype)


def _reflect(v: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """PyTorch's reflect_coordinates: v mirrored into [twice_low / 2, twice_high / 2]."""
    if twice_low == twice_high:
        return v * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    v = ops.abs(v - low)
    flips = _floor(v / span, 1 << 30)
    extra = v - flips * span
    even = ops.eq(flips - 2.0 * _floor(flips / 2.0, 1 << 30), 0.0)
    return ops.where(even, extra + low, span - extra + low)


def _source(coord: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    """grid_sampler_compute_source_index: a grid coordinate in [-1, 1] as a pixel position."""
    v = (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
    if padding_mode == "reflection":
        v = _reflect(v, 0, 2 * (size - 1)) if align_corners else _reflect(v, -1, 2 * size - 1)
    if padding_mode != "zeros":
        v = ops.clamp(v, 0.0, size - 1.0)
    return v


def _pixels(flat: Tensor, iy: Tensor, ix: Tensor, height: int, width: int) -> Tensor:
    """flat[n, :, iy * width + ix] for each grid point, 0 where (iy, ix) lies outside."""
    n, c = flat.shape[0], flat.shape[1]
    inside = ops.ge(ix, 0.0) & ops.le(ix, width - 1.0) & ops.ge(iy, 0.0) & \
        ops.le(iy, height - 1.0)
    at = ops.clamp(iy, 0.0, height - 1.0) * width + ops.clamp(ix, 0.0, width - 1.0)
    points = ix.shape[1] * ix.shape[2]
    index = at.to(dtypes.int64).reshape(n, 1, points).expand(n, c, points)
    values = ops.gather(flat, 2, index).reshape(n, c, *ix.shape[1:])
    return ops.where(ops.unsqueeze(inside, 1), values, 0.0)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """(N, C, H, W) sampled at (N, Ho, Wo, 2) grid points (x, y) in [-1, 1] -> (N, C, Ho, Wo)."""
    _check_grid(input, grid, mode, padding_mode)
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
    corners = bool(align_corners)
    height, width = input.shape[2], input.shape[3]
    ix = _source(ops.select(grid, 3, 0), width, padding_mode, corners)
    iy = _source(ops.select(grid, 3, 1), height, padding_mode, corners)
    flat = input.reshape(input.shape[0], input.shape[1], height * width)
    if mode == "nearest":
        return _pixels(flat, _nearest(iy, height), _nearest(ix, width), height, width)
    x0, y0 = _floor(ix, width), _floor(iy, height)
    x1, y1 = x0 + 1, y0 + 1
    wx0, wx1 = ops.unsqueeze(x1 - ix, 1), ops.unsqueeze(ix - x0, 1)
    wy0, wy1 = ops.unsqueeze(y1 - iy, 1), ops.unsqueeze(iy - y0, 1)
    return (_pixels(flat, y0, x0, height, width) * (wx0 * wy0) +
            _pixels(flat, y0, x1, height, width) * (wx1 * wy0) +
            _pixels(flat, y1, x0, height, width) * (wx0 * wy1) +
            _pixels(flat, y1, x1, height, width) * (wx1 * wy1))


def _nearest(v: Tensor, size: int) -> Tensor:
    """nearbyint(v): halves to even, as C's default rounding."""
    low = _floor(v, size)
    frac = v.detach() - low
    odd = ops.ne(low - 2.0 * _floor(low / 2.0, size), 0.0)
    up = ops.gt(frac, 0.5) | (ops.eq(frac, 0.5) & odd)
    return low + up.to(v.dtype)


def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The (N, H, W, 2) grid of `theta` (N, 2, 3) applied to the output's (x, y, 1) points."""
    size = list(size)
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
    if len(size) != 4:
        raise NotImplementedError(f"affine_grid only supports 4D sizes in kiln (2-D affine "
                                  f"transformations), got size {size}")
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if theta.dim() != 3 or list(theta.shape) != [size[0], 2, 3]:
        raise ValueError(f"Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                         f"{size}. Got {list(theta.shape)}.")
    n, _, h, w = size

    def line(k: int) -> Tensor:
        if k <= 1:
            return factories.zeros(k, dtype=theta.dtype, device=theta.device)
        steps = factories.linspace(-1.0, 1.0, k, dtype=theta.dtype, device=theta.device)
        return steps if align_corners else steps * ((k - 1) / k)
    xs, ys = ops.expand(ops.reshape(line(w), [1, w]), [h, w]), \
        ops.expand(ops.reshape(line(h), [h, 1]), [h, w])
    base = ops.stack([xs, ys, factories.ones(h, w, dtype=theta.dtype, device=theta.device)], -1)
    points = ops.matmul(ops.reshape(base, [1, h * w, 3]), ops.transpose(theta, 1, 2))
    return ops.reshape(points, [n, h, w, 2])
