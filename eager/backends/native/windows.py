"""im2col as one generated kernel, under eager's CPU kernel (eager/kernels/windows.py asks
`im2col` for float32 and float64 inputs from its _NATIVE_ELEMENTS output elements on;
numpy's strided copy runs the rest, and every call while the kernel compiles in the
background).

numpy copies im2col's windows a row of `ow` elements at a time (18,432 rows of 16 for a
3x3 convolution of 8x16x16x16): ~5 ns a row, a third of an eager convolution. The
kernel walks the same rows with no padded copy of the input. Per column offset of the
kernel (kj), the output columns of a row whose source column lies inside the image are
known ahead (Python computes them: `_columns`), so a row is masked vector loads of
those columns (the other lanes read nothing and are zeros) and plain stores; a row above
or below the image is zeros. One kernel per dtype and column stride; every other size is
an argument.

    void k(T* src, T* dst, i64 planes, i64 H, i64 W, i64 kh, i64 kw, i64 dh, i64 ph,
           i64 sh, i64 oh, i64 ow, i64* first_x, i64* lo, i64* hi)

`src` is (planes, H, W) contiguous; `dst` is (planes, kh, kw, oh, ow) contiguous; row
(p, ki, kj, oy) reads image row iy = oy * sh + ki * dh - ph, its column ox the source
column first_x[kj] + ox * sw where lo[kj] <= ox < hi[kj] (zeros elsewhere): no lane
reads outside the image, none writes outside its row.
"""
from __future__ import annotations

import ctypes

import numpy as np

from runtime.llvm.jit import KernelPending, deferring_call, host_jit

_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
_SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p,
                              *[ctypes.c_int64] * 10, *[ctypes.c_void_p] * 3)
_kernels: dict = {}  # (dtype name, column stride) -> the ctypes function
calls = 0  # kernels run (tests check that the native path ran)


def im2col(x: np.ndarray, kernel, dilation, padding, stride, blocks) -> np.ndarray | None:
    """im2col of `x` ((..., C, H, W), float32 or float64): (..., C * kh * kw, oh * ow);
    None while the kernel compiles in the background, or where columns are counted past
    the kernel's 32-bit lanes (numpy runs it then)."""
    global calls
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
    oh, ow = blocks
    if ow >= 1 << 31 or x.shape[-1] >= 1 << 31:
        return None
    try:
        fn = deferring_call(_kernel, (_TYPES[x.dtype], sw))
    except KernelPending:
        return None
    *outer, c, h, w = x.shape
    planes = int(np.prod(outer, dtype=np.int64)) * c
    out = np.empty((*outer, c * kh * kw, oh * ow), x.dtype)
    if out.size == 0:
        return out
    src = np.ascontiguousarray(x)
    first_x, lo, hi = _columns(w, kw, dw, pw, sw, ow)
    fn(src.ctypes.data, out.ctypes.data, planes, h, w, kh, kw, dh, ph, sh, oh, ow,
       first_x.ctypes.data, lo.ctypes.data, hi.ctypes.data)
    calls += 1
    return out


def _columns(w: int, kw: int, dw: int, pw: int, sw: int, ow: int) -> tuple:
    """Per kernel column kj: the source column of output column 0 (kj * dw - pw), and
    the output columns [lo, hi) whose source column lies in [0, w)."""
    first_x = np.arange(kw, dtype=np.int64) * dw - pw
    lo = np.clip(-(first_x // sw), 0, ow)  # the least ox with first_x + ox * sw >= 0
    hi = np.clip((w - 1 - first_x) // sw + 1, lo, ow)  # ... and the last with it < w
    return first_x, lo, hi


def _kernel(spec: tuple):
    fn = _kernels.get(spec)
    if fn is None:
        from runtime.llvm.target import selected
        lanes = selected().vector_width // (1 if spec[0] == "f32" else 2)
        name = f"kiln_im2col_{spec[0]}_s{spec[1]}"
        address = host_jit().load_spec(name, f"{name} w{lanes}", _Build(*spec, lanes),
                                       [name])[name]
        fn = _kernels[spec] = _SIGNATURE(address)
    return fn


class _Build:
    """The kernel's IR for one element type, column stride and vector width (a
    module-level class: it pickles, so the background worker can build it). A row goes
    `lanes` output columns a step: one masked load of the source columns that fall in
    the image (at column stride sw up to MAX_SHUFFLED, a load of (lanes - 1) * sw + 1
    adjacent elements, every sw-th kept by a shuffle), whose other lanes read nothing and
    are zeros, and one store. Beyond MAX_SHUFFLED, an element a step."""

    def __init__(self, type_name: str, column_stride: int, lanes: int):
        self.type_name, self.sw, self.lanes = type_name, column_stride, lanes

    def __call__(self, module) -> None:
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import (I32, I64, VOID, at, define, for_range, i64,
                                          masked_load, masked_store, splat)
        t = ir.FloatType() if self.type_name == "f32" else ir.DoubleType()
        tp, i64p, sw, width = t.as_pointer(), I64.as_pointer(), self.sw, self.lanes
        fn, b = define(module, f"kiln_im2col_{self.type_name}_s{sw}",
                       ir.FunctionType(VOID, [tp, tp] + [I64] * 10 + [i64p] * 3),
                       attributes=())
        src, dst, planes, h, w, kh, kw, dh, ph, sh, oh, ow, first_x, lo, hi = fn.args
        for pointer in (src, dst):  # distinct buffers
            pointer.add_attribute("noalias")
        align = 4 if self.type_name == "f32" else 8
        plane_in, row_out = b.mul(h, w), b.mul(oh, ow)
        steps = b.udiv(b.add(ow, i64(width - 1)), i64(width))  # vectors a row
        lanes = ir.Constant(ir.VectorType(I32, width), list(range(width)))
        span = (width - 1) * sw + 1  # source elements a vector of `width` columns spans
        keep = ir.Constant(ir.VectorType(I32, width), [j * sw for j in range(width)])
        spread = ir.Constant(ir.VectorType(I32, span), [  # output lane -> source lane
            j // sw if j % sw == 0 else width for j in range(span)])
        off = ir.Constant(ir.VectorType(ir.IntType(1), width), [0] * width)

        def row(s, d, start, stop):
            """Columns [0, ow) of one output row: source columns where
            start <= ox < stop, zeros elsewhere."""
            first, last, count = (splat(b, b.trunc(v, I32), width) for v in (start, stop, ow))
            with for_range(b, i64(0), steps, 1, "step") as step:
                ox0 = b.mul(step, i64(width))
                ox = b.add(splat(b, b.trunc(ox0, I32), width), lanes)
                exists = b.icmp_signed("<", ox, count)
                read = b.and_(b.and_(b.icmp_signed(">=", ox, first),
                                     b.icmp_signed("<", ox, last)), exists)
                if sw <= MAX_SHUFFLED:
                    source = at(b, s, b.mul(ox0, i64(sw)))
                    if sw == 1:
                        values = masked_load(b, source, read, align)
                    else:
                        wide = masked_load(b, source, b.shuffle_vector(read, off, spread),
                                           align)
                        values = b.shuffle_vector(wide, ir.Constant(wide.type, None), keep)
                else:
                    values = ir.Constant(ir.VectorType(t, width), None)
                    for j in range(width):
                        values = _lane_or_zero(b, values, s, ox0, j, sw, read, t)
                masked_store(b, values, at(b, d, ox0), exists, align)

        with for_range(b, i64(0), planes, 1, "plane") as p:
            s_plane = at(b, src, b.mul(p, plane_in))
            d_plane = at(b, dst, b.mul(b.mul(p, b.mul(kh, kw)), row_out))
            with for_range(b, i64(0), kh, 1, "ki") as ki:
                with for_range(b, i64(0), kw, 1, "kj") as kj:
                    x0, x_lo, x_hi = (b.load(at(b, a, kj)) for a in (first_x, lo, hi))
                    d_block = at(b, d_plane, b.mul(b.add(b.mul(ki, kw), kj), row_out))
                    with for_range(b, i64(0), oh, 1, "oy") as oy:
                        iy = b.sub(b.add(b.mul(oy, sh), b.mul(ki, dh)), ph)
                        inside = b.icmp_unsigned("<", iy, h)  # 0 <= iy < h
                        start = b.select(inside, x_lo, ow)  # a row off the image: zeros
                        stop = b.select(inside, x_hi, ow)
                        s = at(b, s_plane, b.add(b.mul(b.select(inside, iy, i64(0)), w), x0))
                        row(s, at(b, d_block, b.mul(oy, ow)), start, stop)
        b.ret_void()


def _lane_or_zero(b, values, s, ox0, j, sw, read, t):
    """Lane j of a vector at a column stride past MAX_SHUFFLED: its element if `read`
    says so (loaded under a branch: nothing is read otherwise), else zero."""
    import llvmlite.ir as ir

    from runtime.llvm.toolkit import at, i32, i64
    wanted = b.extract_element(read, i32(j))
    with b.if_else(wanted) as (then, otherwise):
        with then:
            block_then = b.block
            loaded = b.load(at(b, s, b.mul(b.add(ox0, i64(j)), i64(sw))))
        with otherwise:
            block_else = b.block
    value = b.phi(t)
    value.add_incoming(loaded, block_then)
    value.add_incoming(ir.Constant(t, 0.0), block_else)
    return b.insert_element(values, value, i32(j))


MAX_SHUFFLED = 4  # column strides loaded as one vector and a shuffle
