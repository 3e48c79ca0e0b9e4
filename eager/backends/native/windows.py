"""im2col and col2im as generated kernels, under eager's CPU kernels
(eager/kernels/windows.py asks `im2col` and `col2im` for float32 and float64 from
_NATIVE_ELEMENTS column elements on; numpy runs the rest, and every call while a kernel
compiles in the background).

numpy copies im2col's windows a row of `ow` elements at a time (18,432 rows of 16 for a
3x3 convolution of 8x16x16x16): ~5 ns a row, a third of an eager convolution; its col2im
is a strided add per kernel offset over a padded copy. The kernels walk the same rows
with no padded copy. Per column offset of the kernel (kj), the output columns of a row
whose image column lies inside the image are known ahead (Python computes them:
`_columns`), so a row is masked vector loads of those columns (the other lanes read
nothing) and stores: im2col writes zeros in the other columns and skips nothing; col2im
at column stride 1 sums a vector of image columns in registers over the kernel offsets
(_Rows.col2im_by_rows), at other strides it adds each column row into its image row. One
kernel per op, dtype and column stride; every other size is an argument.

    void k(T* src, T* dst, i64 first, i64 stop, i64 channels, i64 batch_step,
           i64 row_step, i64 H, i64 W, i64 kh, i64 kw, i64 dh, i64 ph, i64 sh, i64 oh,
           i64 ow, i64* first_x, i64* lo, i64* hi)

runs planes [first, stop). The images are (planes, H, W) contiguous; the columns are
(batch, channels * kh * kw rows, oh * ow) whose rows each lie together, batch_step and
row_step elements apart: im2col's src and dst, col2im's dst and src. Row (p, ki, kj,
oy) of the columns is image row iy = oy * sh + ki * dh - ph, its column ox the image
column first_x[kj] + ox * sw where lo[kj] <= ox < hi[kj]: no lane reads or writes
outside the image or the row. col2im adds to +0.0 in numpy's order (ki, then kj, one
add per element each), so every element gets numpy's sum, bit for bit.

Each kernel is called through a runtime.pool item that reads its arguments from a
record (`_run`): a call's planes are cut among the pool's threads from PARALLEL_ELEMENTS
column elements on, each plane done whole by one thread, so the result does not depend
on the thread count.
"""
from __future__ import annotations

import math

import numpy as np

from runtime.addresses import address
from runtime.llvm.jit import KernelPending, deferring_call, host_jit
from runtime.pool import ITEM, Items
from runtime.threads import chunks, num_threads

_TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}
RECORD_WORDS = 20  # the kernel's 19 arguments and a pad
PARALLEL_ELEMENTS = 1 << 16
"""From this many column elements a call's planes are cut among the pool's threads.
Measured on the 2-core Xeon VM beside another process's tests (8x8 images, 3x3 padded,
float32; 1 -> 2 threads): 9K columns 11 -> 11-12 us, 37K 28-30 -> 23-31 us (im2col) and
17-23 -> 18-25 us (col2im), 147K 77-79 -> 59 and 60 -> 47-49 us, 590K 300 -> 169-285 and
225 -> 131-236 us; between 18K and 74K two threads were never faster while the other
process held a core."""
_items: dict = {}  # (op, dtype name, column stride) -> the address of its item
_plans: dict = {}  # a call's item, sizes and geometry -> its _Plan
_MAX_PLANS = 256
calls = 0  # kernels run (tests check that the native path ran)


def im2col(x: np.ndarray, kernel, dilation, padding, stride, blocks) -> np.ndarray | None:
    """im2col of `x` ((..., C, H, W), float32 or float64): (..., C * kh * kw, oh * ow);
    None while the kernel compiles in the background, or where columns are counted past
    the kernel's 32-bit lanes (numpy runs it then)."""
    global calls
    *outer, c, h, w = x.shape
    (kh, kw), (oh, ow) = kernel, blocks
    item = _ready("im2col", x.dtype, w, ow, stride[1])
    if item is None:
        return None
    out = np.empty((*outer, c * kh * kw, oh * ow), x.dtype)
    if out.size == 0:
        return out
    _run(item, np.ascontiguousarray(x), out, x.size // (h * w), c, _column_strides(out),
         (h, w), kernel, dilation, padding, stride, blocks)
    calls += 1
    return out


def col2im(cols: np.ndarray, image, kernel, dilation, padding, stride,
           blocks) -> np.ndarray | None:
    """col2im of `cols` ((..., C * kh * kw, oh * ow), float32 or float64; its rows
    contiguous or not) into images of size `image`: (..., C, H, W); None as for
    im2col."""
    global calls
    *outer, rows, _ = cols.shape
    (h, w), (kh, kw), (_, ow) = image, kernel, blocks
    item = _ready("col2im", cols.dtype, w, ow, stride[1])
    if item is None:
        return None
    c = rows // (kh * kw)
    out = np.empty((*outer, c, h, w), cols.dtype)
    if out.size == 0:
        return out
    strides = _column_strides(cols)
    if strides is None:
        cols = np.ascontiguousarray(cols)
        strides = _column_strides(cols)
    _run(item, cols, out, out.size // (h * w), c, strides, image, kernel, dilation, padding,
         stride, blocks)
    calls += 1
    return out


def _column_strides(cols: np.ndarray) -> tuple[int, int] | None:
    """(batch, row) strides of columns (..., rows, L) in elements, where each row's L
    elements are adjacent; else None. (The GEMM of conv2d's input gradient leaves its
    columns (rows, N, L): rows N * L apart, images L apart.)"""
    size = cols.itemsize
    row_step = cols.strides[-2]
    batch_step = cols.strides[0] if cols.ndim == 3 else 0
    if (cols.shape[-1] > 1 and cols.strides[-1] != size) or row_step % size \
            or batch_step % size:
        return None
    return batch_step // size, row_step // size


def _ready(op: str, dtype, w: int, ow: int, sw: int) -> int | None:
    """The address of op's item for dtype and column stride sw; None while it compiles
    or where a row's columns do not fit the kernel's 32-bit lanes."""
    if ow >= 1 << 31 or w >= 1 << 31:
        return None
    try:
        return deferring_call(_item, (op, _TYPES[dtype], sw))
    except KernelPending:
        return None


def _run(item: int, src: np.ndarray, dst: np.ndarray, planes: int, channels: int, strides,
         *geometry) -> None:
    """The kernel on src and dst (neither empty), through its plan: planes images of
    `channels` a batch, the columns' (batch, row) strides in elements."""
    columns = planes * math.prod(geometry[1]) * math.prod(geometry[-1])
    threads = num_threads() if columns >= PARALLEL_ELEMENTS else 1
    key = (item, planes, channels, strides, threads, *geometry)
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        plan = _plans[key] = _Plan(planes, channels, strides, threads, *geometry)
    records = plan.records.copy()
    records[:, 0] = address(src)
    records[:, 1] = address(dst)
    Items(None, (item, address(records), len(records), RECORD_WORDS * 8)).run(threads)


class _Plan:
    """One call geometry's records, one per thread's share of the planes: the kernel's
    arguments but the two data pointers, which each call writes."""

    def __init__(self, planes: int, channels: int, strides, threads: int, image, kernel,
                 dilation, padding, stride, blocks):
        (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw), (oh, ow) = (
            image, kernel, dilation, padding, stride, blocks)
        self.columns = _columns(w, kw, dw, pw, sw, ow)  # kept alive: the records point in
        pieces = chunks(planes, threads)
        self.records = np.zeros((len(pieces), RECORD_WORDS), np.int64)
        self.records[:, 2:4] = pieces
        self.records[:, 4:19] = (channels, *strides, h, w, kh, kw, dh, ph, sh, oh, ow,
                                 *(address(self.columns[i]) for i in range(3)))


def _columns(w: int, kw: int, dw: int, pw: int, sw: int, ow: int) -> np.ndarray:
    """Per kernel column kj: the image column of output column 0 (kj * dw - pw), and
    the output columns [lo, hi) whose image column lies in [0, w): three rows."""
    first_x = np.arange(kw, dtype=np.int64) * dw - pw
    lo = np.clip(-(first_x // sw), 0, ow)  # the least ox with first_x + ox * sw >= 0
    hi = np.clip((w - 1 - first_x) // sw + 1, lo, ow)  # ... and the last with it < w
    return np.stack([first_x, lo, hi])


def _item(spec: tuple) -> int:
    found = _items.get(spec)
    if found is None:
        from runtime.llvm.target import selected
        op, type_name, sw = spec
        lanes = selected().vector_width // (1 if type_name == "f32" else 2)
        name = f"kiln_{op}_{type_name}_s{sw}"
        found = _items[spec] = host_jit().load_spec(
            name, f"{name} w{lanes} item", _Build(op, type_name, sw, lanes), [name])[name]
    return found


class _Build:
    """A kernel's IR and its item's for one op ("im2col" or "col2im"), element type,
    column stride and vector width (a module-level class: it pickles, so the background
    worker can build it)."""

    def __init__(self, op: str, type_name: str, column_stride: int, lanes: int):
        self.op, self.type_name, self.sw, self.lanes = op, type_name, column_stride, lanes

    def __call__(self, module) -> None:
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import I64, VOID, define
        name = f"kiln_{self.op}_{self.type_name}_s{self.sw}"
        t = ir.FloatType() if self.type_name == "f32" else ir.DoubleType()
        kernel, b = define(module, f"{name}.planes", ir.FunctionType(
            VOID, [t.as_pointer()] * 2 + [I64] * 14 + [I64.as_pointer()] * 3),
            linkage="internal", attributes=())
        for pointer in kernel.args[:2]:  # distinct buffers
            pointer.add_attribute("noalias")
        rows = _Rows(b, t, self.sw, self.lanes)
        (rows.im2col if self.op == "im2col" else rows.col2im)(*kernel.args)
        b.ret_void()
        _emit_item(module, name, kernel)


def _emit_item(module, name: str, kernel) -> None:
    """name(record, worker), a runtime.pool item: the kernel on the arguments that the
    record's words hold (RECORD_WORDS, as _run writes them)."""
    import llvmlite.ir as ir

    from runtime.llvm.toolkit import I64, at, define
    fn, b = define(module, name, ITEM, attributes=())
    record = b.bitcast(fn.args[0], I64.as_pointer())
    words = [b.load(at(b, record, i)) for i in range(len(kernel.args))]
    b.call(kernel, [b.inttoptr(word, arg.type) if isinstance(arg.type, ir.PointerType)
                    else word for word, arg in zip(words, kernel.args)])
    b.ret_void()


class _Rows:
    """The two kernels' loops and rows. A row goes `lanes` columns a step: one masked
    load or store of the image columns that fall in the image (at column stride sw up to
    MAX_SHUFFLED, of (lanes - 1) * sw + 1 adjacent elements, every sw-th of them used:
    a shuffle spreads or gathers them), whose other lanes touch nothing. Beyond
    MAX_SHUFFLED, an element a step."""

    def __init__(self, b, t, sw: int, width: int):
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import I32
        self.b, self.t, self.sw, self.width = b, t, sw, width
        self.align = 4 if isinstance(t, ir.FloatType) else 8
        self.lanes = ir.Constant(ir.VectorType(I32, width), list(range(width)))
        span = (width - 1) * sw + 1  # image elements a vector of `width` columns spans
        self.keep = ir.Constant(ir.VectorType(I32, width), [j * sw for j in range(width)])
        self.spread = ir.Constant(ir.VectorType(I32, span), [  # image lane -> column lane
            j // sw if j % sw == 0 else width for j in range(span)])
        self.off = ir.Constant(ir.VectorType(ir.IntType(1), width), [0] * width)

    def column_plane(self, cols, p, channels, batch_step, row_step, kh, kw):
        """Where plane p's first column row starts: image p // channels, channel
        p % channels, kh * kw rows a channel."""
        from runtime.llvm.toolkit import at
        b = self.b
        image, channel = b.udiv(p, channels), b.urem(p, channels)
        return at(b, cols, b.mul(image, batch_step),
                  b.mul(b.mul(channel, b.mul(kh, kw)), row_step))

    def im2col(self, src, dst, first, stop, channels, batch_step, row_step, h, w, kh, kw,
               dh, ph, sh, oh, ow, first_x, lo, hi):
        """Every column row: its image columns where lo[kj] <= ox < hi[kj], zeros
        elsewhere and in rows off the image."""
        from runtime.llvm.toolkit import at, for_range, i64
        b = self.b
        with for_range(b, first, stop, 1, "plane") as p:
            s_plane = at(b, src, b.mul(p, b.mul(h, w)))
            d_plane = self.column_plane(dst, p, channels, batch_step, row_step, kh, kw)
            with for_range(b, i64(0), kh, 1, "ki") as ki:
                with for_range(b, i64(0), kw, 1, "kj") as kj:
                    x0, x_lo, x_hi = (b.load(at(b, a, kj)) for a in (first_x, lo, hi))
                    d_block = at(b, d_plane, b.mul(b.add(b.mul(ki, kw), kj), row_step))
                    with for_range(b, i64(0), oh, 1, "oy") as oy:
                        iy = b.sub(b.add(b.mul(oy, sh), b.mul(ki, dh)), ph)
                        inside = b.icmp_unsigned("<", iy, h)  # 0 <= iy < h
                        start = b.select(inside, x_lo, ow)  # a row off the image: zeros
                        stop = b.select(inside, x_hi, ow)
                        s = at(b, s_plane, b.add(b.mul(b.select(inside, iy, i64(0)), w), x0))
                        self.copy_row(s, at(b, d_block, b.mul(oy, ow)), start, stop, ow)

    def col2im(self, src, dst, first, stop, channels, batch_step, row_step, h, w, kh, kw,
               dh, ph, sh, oh, ow, first_x, lo, hi):
        """Each image plane zeroed, then every column row on the image added into its
        image row, kernel offset after offset (ki, then kj) as numpy's loop adds them."""
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import I8, I8P, at, for_range, i64, intrinsic
        if self.sw == 1:
            return self.col2im_by_rows(src, dst, first, stop, channels, batch_step, row_step,
                                       h, w, kh, kw, dh, ph, sh, oh, ow, first_x, lo, hi)
        b = self.b
        plane_out = b.mul(h, w)
        with for_range(b, first, stop, 1, "plane") as p:
            s_plane = self.column_plane(src, p, channels, batch_step, row_step, kh, kw)
            d_plane = at(b, dst, b.mul(p, plane_out))
            intrinsic(b, "memset", [b.bitcast(d_plane, I8P), ir.Constant(I8, 0),
                                    b.mul(plane_out, i64(self.align)),
                                    ir.Constant(ir.IntType(1), 0)],
                      overloads=(I8P, plane_out.type))
            with for_range(b, i64(0), kh, 1, "ki") as ki:
                with for_range(b, i64(0), kw, 1, "kj") as kj:
                    x0, x_lo, x_hi = (b.load(at(b, a, kj)) for a in (first_x, lo, hi))
                    s_block = at(b, s_plane, b.mul(b.add(b.mul(ki, kw), kj), row_step))
                    with for_range(b, i64(0), oh, 1, "oy") as oy:
                        iy = b.sub(b.add(b.mul(oy, sh), b.mul(ki, dh)), ph)
                        with b.if_then(b.icmp_unsigned("<", iy, h)):  # 0 <= iy < h
                            self.add_row(at(b, s_block, b.mul(oy, ow)),
                                         at(b, d_plane, b.add(b.mul(iy, w), x0)), x_lo, x_hi)

    def col2im_by_rows(self, src, dst, first, stop, channels, batch_step, row_step, h, w,
                       kh, kw, dh, ph, sh, oh, ow, first_x, lo, hi):
        """col2im at column stride 1, `lanes` image columns at a time: their sum in a
        register, kernel offset after offset (ki, then kj: numpy's order), from +0.0,
        then one store. The lanes an offset does not reach add +0.0, which changes no
        sum: one that starts at +0.0 is never -0.0. No image row is stored and loaded
        again (masked stores do not forward to loads: adding each column row into the
        image, 7.8 ns a row of 8 here)."""
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import (I32, at, fold_range, for_range, i64, masked_store,
                                          splat, when)
        b, t, width = self.b, self.t, self.width
        zero = ir.Constant(ir.VectorType(t, width), [0.0] * width)
        columns = splat(b, b.trunc(w, I32), width)
        with for_range(b, first, stop, 1, "plane") as p:
            s_plane = self.column_plane(src, p, channels, batch_step, row_step, kh, kw)
            d_plane = at(b, dst, b.mul(p, b.mul(h, w)))
            with for_range(b, i64(0), h, 1, "iy") as iy:
                with for_range(b, i64(0), w, width, "x") as x:
                    xs = b.add(splat(b, b.trunc(x, I32), width), self.lanes)

                    def offset(ki, sums):
                        """The column row of kernel row ki that lands on image row iy,
                        if one does: oy * sh + ki * dh - ph = iy, 0 <= oy < oh."""
                        above = b.sub(b.add(iy, ph), b.mul(ki, dh))  # oy * sh
                        oy = b.udiv(above, sh)
                        lands = b.and_(b.icmp_unsigned("<", oy, oh),  # and above >= 0
                                       b.icmp_unsigned("==", b.urem(above, sh), i64(0)))
                        s_row = at(b, s_plane, b.mul(b.mul(ki, kw), row_step), b.mul(oy, ow))
                        return when(b, lands, sums, lambda sums: [fold_range(
                            b, i64(0), kw, 1, sums,
                            lambda kj, sums: [self.add_offset(s_row, kj, row_step, x, xs,
                                                              sums[0], first_x, lo, hi)],
                            "kj")[0]])

                    total = fold_range(b, i64(0), kh, 1, [zero], offset, "ki")[0]
                    masked_store(b, total, at(b, d_plane, b.mul(iy, w), x),
                                 b.icmp_signed("<", xs, columns), self.align)

    def add_offset(self, s_row, kj, row_step, x, xs, total, first_x, lo, hi):
        """total plus kernel column kj's values at image columns xs (x, x + 1, ...):
        column row s_row + kj rows on, its columns x - first_x[kj] where they lie in
        [lo[kj], hi[kj]) (the others read nothing and add +0.0)."""
        from runtime.llvm.toolkit import I32, at, masked_load, splat
        b, width = self.b, self.width
        x0, x_lo, x_hi = (b.load(at(b, a, kj)) for a in (first_x, lo, hi))
        start, stop = (splat(b, b.trunc(b.add(x0, v), I32), width) for v in (x_lo, x_hi))
        inside = b.and_(b.icmp_signed(">=", xs, start), b.icmp_signed("<", xs, stop))
        values = masked_load(b, at(b, s_row, b.mul(kj, row_step), b.sub(x, x0)), inside,
                             self.align)
        return b.fadd(total, values)

    def copy_row(self, s, d, start, stop, ow):
        """Columns [0, ow) of one column row at d: image columns s[ox * sw] where
        start <= ox < stop, zeros elsewhere."""
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import I32, at, for_range, i64, masked_load, masked_store, splat
        b, sw, width = self.b, self.sw, self.width
        first, last, count = (splat(b, b.trunc(v, I32), width) for v in (start, stop, ow))
        steps = b.udiv(b.add(ow, i64(width - 1)), i64(width))  # vectors a row
        with for_range(b, i64(0), steps, 1, "step") as step:
            ox0 = b.mul(step, i64(width))
            ox = b.add(splat(b, b.trunc(ox0, I32), width), self.lanes)
            exists = b.icmp_signed("<", ox, count)
            read = b.and_(b.and_(b.icmp_signed(">=", ox, first),
                                 b.icmp_signed("<", ox, last)), exists)
            if sw <= MAX_SHUFFLED:
                source = at(b, s, b.mul(ox0, i64(sw)))
                if sw == 1:
                    values = masked_load(b, source, read, self.align)
                else:
                    wide = masked_load(b, source, b.shuffle_vector(read, self.off, self.spread),
                                       self.align)
                    values = b.shuffle_vector(wide, ir.Constant(wide.type, None), self.keep)
            else:
                values = ir.Constant(ir.VectorType(self.t, width), None)
                for j in range(width):
                    values = _lane_or_zero(b, values, s, ox0, j, sw, read, self.t)
            masked_store(b, values, at(b, d, ox0), exists, self.align)

    def add_row(self, s, d, start, stop):
        """d[ox * sw] += s[ox] for start <= ox < stop (one add each, the image element
        first as numpy's `out += cols`)."""
        import llvmlite.ir as ir

        from runtime.llvm.toolkit import I32, at, for_range, i64, masked_load, masked_store, splat
        b, sw, width = self.b, self.sw, self.width
        if sw > MAX_SHUFFLED:
            with for_range(b, start, stop, 1, "ox") as ox:
                target = at(b, d, b.mul(ox, i64(sw)))
                b.store(b.fadd(b.load(target), b.load(at(b, s, ox))), target)
            return
        last = splat(b, b.trunc(stop, I32), width)
        with for_range(b, start, stop, width, "step") as ox0:
            ox = b.add(splat(b, b.trunc(ox0, I32), width), self.lanes)
            inside = b.icmp_signed("<", ox, last)
            values = masked_load(b, at(b, s, ox0), inside, self.align)
            target = at(b, d, b.mul(ox0, i64(sw)))
            if sw > 1:  # the image lanes of the columns, the others unused
                inside = b.shuffle_vector(inside, self.off, self.spread)
                values = b.shuffle_vector(values, ir.Constant(values.type, None), self.spread)
            total = b.fadd(masked_load(b, target, inside, self.align), values)
            masked_store(b, total, target, inside, self.align)


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
