"""Sliding windows: im2col (F.unfold) gathers every kernel window of a batch of images
into a column, col2im (F.fold) adds columns back into images, each the other's
gradient. nn.functional's convolutions are im2col and one batched GEMM; its pools
reduce im2col's windows (eager/nn/_convolution.py).

The CPU kernels are one strided numpy copy (im2col: the windows as a view of the padded
input) and one strided add per kernel offset (col2im); float32 and float64 from
_NATIVE_ELEMENTS on, both are generated kernels. `im2col_ops` and `col2im_ops`
write the same in other ops (slices, stack, slice_backward), for a device backend with
no kernel of its own (eager/backends/cuda/composed.py)."""
from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

from eager.kernels._common import (load_native, meta_from_rule,
                                   register, result)
from ir.records import declare
from eager.tensor import Tensor, from_array, ops
from ir.ops import Op


def _pairs(op: str, **values) -> list[tuple[int, int]]:
    """The int[2] arguments as pairs, checked as PyTorch checks them."""
    out = []
    for name, value in values.items():
        pair = tuple(value) if isinstance(value, (list, tuple)) else (value, value)
        if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                     for v in pair):
            raise TypeError(f"{op}(): argument '{name}' must be tuple of ints of length 2, "
                            f"not {value!r}")
        out.append(pair)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = out
    if kh <= 0 or kw <= 0:
        raise RuntimeError(f"{op}: kernel size should be greater than zero, but got "
                           f"kernel_height: {kh} kernel_width: {kw}")
    if dh <= 0 or dw <= 0:
        raise RuntimeError(f"{op}: dilation should be greater than zero, but got "
                           f"dilation_height: {dh} dilation_width: {dw}")
    if ph < 0 or pw < 0:
        raise RuntimeError(f"{op}: padding should be non-negative, but got pad_height: {ph} "
                           f"pad_width: {pw}")
    if sh <= 0 or sw <= 0:
        raise RuntimeError(f"{op}: stride should be greater than zero, but got dH: {sh} "
                           f"dW: {sw}")
    return out


def _blocks(size, kernel, dilation, padding, stride) -> tuple[int, int]:
    """How many windows fit along each spatial dim."""
    return tuple((s + 2 * p - d * (k - 1) - 1) // st + 1
                 for s, k, d, p, st in zip(size, kernel, dilation, padding, stride))


def _describe(kernel, dilation, padding, stride=None) -> str:
    text = f"kernel_size={kernel}, dilation={dilation}, padding={padding}"
    return text + (f", stride={stride}" if stride is not None else "")


# im2col -----------------------------------------------------------------------------------
def _im2col_geometry(self, kernel_size, dilation, padding, stride):
    """(result shape, the four pairs, the windows along each dim), checked."""
    pairs = _pairs("im2col", kernel_size=kernel_size, dilation=dilation, padding=padding,
                   stride=stride)
    shape = self._shape
    if len(shape) not in (3, 4) or any(s == 0 for s in shape[-3:]):
        raise RuntimeError(f"im2col: Expected 3D or 4D (batch mode) tensor with possibly 0 "
                           f"batch size and other non-zero dimensions for input, but got: "
                           f"{list(shape)}")
    blocks = _blocks(shape[-2:], *pairs)
    if min(blocks) < 1:
        raise RuntimeError(f"im2col: Given input with spatial size {tuple(shape[-2:])}, "
                           f"{_describe(*pairs[:3])}, calculated shape of the array of "
                           f"sliding blocks as {blocks}, but its components must be at "
                           f"least one.")
    (kh, kw) = pairs[0]
    return (*shape[:-3], shape[-3] * kh * kw, blocks[0] * blocks[1]), pairs, blocks


def im2col_rule(self, kernel_size, dilation, padding, stride):
    return _im2col_geometry(self, kernel_size, dilation, padding, stride)[0], self.dtype


def im2col_cpu(self, kernel_size, dilation, padding, stride):
    out_shape, pairs, (oh, ow) = _im2col_geometry(self, kernel_size, dilation, padding,
                                                  stride)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = pairs
    x = self._np()
    if x.dtype in _NATIVE_DTYPES and math.prod(out_shape) >= _NATIVE_ELEMENTS:
        native = _windows or native_windows()
        out = None if native is None else native.im2col(x, *pairs, (oh, ow))
        if out is not None:
            return from_array(out)
    if ph or pw:  # zeros around the images, then windows of the padded copy
        padded = np.zeros(x.shape[:-2] + (x.shape[-2] + 2 * ph, x.shape[-1] + 2 * pw),
                          x.dtype)
        padded[..., ph:ph + x.shape[-2], pw:pw + x.shape[-1]] = x
        x = padded
    *outer, step_y, step_x = x.strides
    windows = as_strided(x, x.shape[:-2] + (kh, kw, oh, ow),
                         (*outer, step_y * dh, step_x * dw, step_y * sh, step_x * sw),
                         writeable=False)
    out = np.empty(windows.shape, x.dtype)  # a copy, never a view of the input
    np.copyto(out, windows)
    return from_array(out.reshape(out_shape))


_NATIVE_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})
_NATIVE_ELEMENTS = 1 << 12
"""From this many column elements (im2col's output, col2im's input), float32 and float64
im2col and col2im run as generated kernels (eager/backends/native/windows.py, loaded at
the first such call; numpy's copy
goes a row of output columns at a time, ~5 ns a row). Measured on one thread (znver5):
3x3 over 8x16x16x16 padded by 1, 98 -> 64 us (its conv2d + bias + relu 323 -> 292 us);
7x7 stride 2 over 8x3x32x32 padded by 3, 109 -> 68 us (its conv2d 333 -> 301 us)."""
_windows = None  # eager/backends/native/windows.py once loaded; False: it cannot be


def native_windows():
    """The generated im2col's module, loaded at its first use; None where numpy must
    serve (KILN_EAGER_NATIVE=0, no llvmlite)."""
    global _windows
    if _windows is None:
        _windows = load_native(_import_windows)
    return _windows or None


def _import_windows():
    from eager.backends.native import windows as eager_windows
    return eager_windows


def im2col_ops(self, kernel_size, dilation, padding, stride):
    """im2col in other ops: the padded input's strided slice for each kernel offset,
    stacked."""
    out_shape, pairs, (oh, ow) = _im2col_geometry(self, kernel_size, dilation, padding,
                                                  stride)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = pairs
    x = _pad_ops(self, ph, pw)
    slices = offset_slices(x, (kh, kw), (dh, dw), (sh, sw), (oh, ow))
    return ops.stack(slices, x.dim() - 2).reshape(out_shape)


def offset_slices(x: Tensor, kernel, dilation, stride, blocks) -> list:
    """Per kernel offset, the strided slice of images x (already padded; its last two dims)
    that the offset reads at each of the `blocks` windows: views, im2col's columns
    uncopied."""
    (kh, kw), (dh, dw), (sh, sw), (oh, ow) = kernel, dilation, stride, blocks
    rank = x.dim()
    slices = []
    for i in range(kh):
        rows = ops.slice(x, rank - 2, i * dh, i * dh + (oh - 1) * sh + 1, sh)
        for j in range(kw):
            slices.append(ops.slice(rows, rank - 1, j * dw, j * dw + (ow - 1) * sw + 1, sw))
    return slices


def _pad_ops(x: Tensor, ph: int, pw: int) -> Tensor:
    """x with ph zeros above and below its images and pw left and right, in ops."""
    if ph:
        sizes = [*x._shape[:-2], x._shape[-2] + 2 * ph, x._shape[-1]]
        x = ops.slice_backward(x, sizes, -2, ph, ph + x._shape[-2], 1)
    if pw:
        sizes = [*x._shape[:-1], x._shape[-1] + 2 * pw]
        x = ops.slice_backward(x, sizes, -1, pw, pw + x._shape[-1], 1)
    return x


register(Op.IM2COL, im2col_cpu, meta_from_rule(im2col_rule))


# col2im -----------------------------------------------------------------------------------
def _col2im_geometry(self, output_size, kernel_size, dilation, padding, stride):
    """(result shape, the four pairs, the windows along each dim), checked."""
    pairs = _pairs("col2im", kernel_size=kernel_size, dilation=dilation, padding=padding,
                   stride=stride)
    size = _pairs_of_sizes(output_size)
    shape = self._shape
    if len(shape) not in (2, 3) or any(s == 0 for s in shape[-2:]):
        raise RuntimeError(f"col2im: Expected 2D or 3D (batch mode) tensor for input with "
                           f"possibly 0 batch size and non-zero dimensions for input, but "
                           f"got: {list(shape)}")
    kernel = pairs[0]
    per_window = kernel[0] * kernel[1]
    if shape[-2] % per_window:
        raise RuntimeError(f"col2im: Expected size of input's dimension 1 to be divisible by "
                           f"the product of kernel_size, but got input.size(1)={shape[-2]} "
                           f"and kernel_size={kernel}")
    blocks = _blocks(size, *pairs)
    if min(blocks) < 1:
        raise RuntimeError(f"col2im: Given output_size={size}, {_describe(*pairs)}, "
                           f"calculated shape of the array of sliding blocks as {blocks}, "
                           f"which is too small (non-positive)")
    if shape[-1] != blocks[0] * blocks[1]:
        raise RuntimeError(f"col2im: Given output_size={size}, {_describe(*pairs)}, expected "
                           f"size of input's dimension 2 to match the calculated number of "
                           f"sliding blocks {blocks[0]} * {blocks[1]} = "
                           f"{blocks[0] * blocks[1]}, but got input.size(2)={shape[-1]}.")
    return (*shape[:-2], shape[-2] // per_window, *size), pairs, blocks


def col2im_rule(self, output_size, kernel_size, dilation, padding, stride):
    return _col2im_geometry(self, output_size, kernel_size, dilation, padding,
                            stride)[0], self.dtype


def _pairs_of_sizes(output_size) -> tuple[int, int]:
    size = tuple(output_size) if isinstance(output_size, (list, tuple)) else \
        (output_size, output_size)
    if len(size) != 2 or not all(isinstance(s, int) and not isinstance(s, bool) for s in size):
        raise TypeError(f"col2im(): argument 'output_size' must be tuple of ints of length 2, "
                        f"not {output_size!r}")
    return size


def col2im_cpu(self, output_size, kernel_size, dilation, padding, stride):
    out_shape, pairs, (oh, ow) = _col2im_geometry(self, output_size, kernel_size, dilation,
                                                  padding, stride)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = pairs
    *outer, h, w = out_shape
    x = self._np()
    if x.dtype in _NATIVE_DTYPES and x.size >= _NATIVE_ELEMENTS:
        native = _windows or native_windows()
        out = None if native is None else native.col2im(x, (h, w), *pairs, (oh, ow))
        if out is not None:
            return from_array(out)
    # in self's type, offset after offset as PyTorch's loop: 16-bit floats round each add
    cols = x.reshape(*outer, kh, kw, oh, ow)
    out = np.zeros((*outer, h + 2 * ph, w + 2 * pw), cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[..., i * dh:i * dh + (oh - 1) * sh + 1:sh,
                j * dw:j * dw + (ow - 1) * sw + 1:sw] += cols[..., i, j, :, :]
    return result(np.ascontiguousarray(out[..., ph:ph + h, pw:pw + w]), self.dtype)


def col2im_ops(self, output_size, kernel_size, dilation, padding, stride):
    """col2im in other ops: each kernel offset's columns placed in the padded images
    (slice_backward) and added, the padding then cut off."""
    out_shape, pairs, (oh, ow) = _col2im_geometry(self, output_size, kernel_size, dilation,
                                                  padding, stride)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = pairs
    *outer, h, w = out_shape
    rank = len(out_shape)
    cols = self.reshape(*outer, kh * kw, oh, ow)
    total = None
    for i in range(kh):
        for j in range(kw):
            piece = ops.select(cols, rank - 2, i * kw + j)
            piece = ops.slice_backward(piece, [*outer, oh, w + 2 * pw], rank - 1, j * dw,
                                       j * dw + (ow - 1) * sw + 1, sw)
            piece = ops.slice_backward(piece, [*outer, h + 2 * ph, w + 2 * pw], rank - 2,
                                       i * dh, i * dh + (oh - 1) * sh + 1, sh)
            total = piece if total is None else ops.add(total, piece)
    return ops.slice(ops.slice(total, rank - 2, ph, ph + h), rank - 1, pw, pw + w)


register(Op.COL2IM, col2im_cpu, meta_from_rule(col2im_rule))


# records: names and derivatives -----------------------------------------------------------
IM2COL = declare(Op.IM2COL)


@IM2COL.derivative("Im2ColBackward0", "self",
                   save="self_sizes kernel_size dilation padding stride")
def _(ctx, g):
    return ops.col2im(g, list(ctx.self_sizes[-2:]), ctx.kernel_size, ctx.dilation,
                      ctx.padding, ctx.stride)


COL2IM = declare(Op.COL2IM)


@COL2IM.derivative("Col2ImBackward0", "self", save="kernel_size dilation padding stride")
def _(ctx, g):
    return ops.im2col(g, ctx.kernel_size, ctx.dilation, ctx.padding, ctx.stride)
