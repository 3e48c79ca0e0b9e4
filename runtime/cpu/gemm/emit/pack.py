"""Packing for the GEMM, as LLVM IR: copies of blocks of A and B into contiguous,
zero-padded panels in the order the micro-kernel reads them. Sources are read through
their strides, with a vector path for each unit-stride layout."""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu.gemm.emit.tools import Emitter
from runtime.llvm.toolkit import (I32, at, for_range, i64, load_vector, masked_load,
                                  masked_store, pairwise, smin, store_vector)


class Packing(Emitter):
    """pack_a(src, rs, cs, rows, depth, dst): MR-row panels, dst[(p*depth + k)*MR + i];
    pack_b(src, rs, cs, depth, cols, dst): NR-column panels, dst[(p*depth + k)*NR + j].
    Both pad the last panel to full width (zeros, or copies of its last line: either
    way the results they feed are never stored) and read the source through its
    strides, with vector paths for the unit-stride layouts. Operands of another type
    than the tile's (bfloat16, float16) are widened as they are read (Emitter.widen):
    the panels are always of the tile's type."""
    ARGS = (("src", "s"), ("rs", "i"), ("cs", "i"), ("rows", "i"), ("cols", "i"),
            ("dst", "p"))

    def pack_a(self, name: str) -> ir.Function:
        # A panel: MR consecutive rows; unit row stride (a transposed A) means each k
        # reads MR contiguous elements, otherwise MR strided streams.
        return self._pack(name, self.tile.mr, along_rows=True)

    def pack_b(self, name: str) -> ir.Function:
        return self._pack(name, self.tile.nr, along_rows=False)

    def _pack(self, name: str, width: int, along_rows: bool) -> ir.Function:
        fn = self.define(name, self.ARGS, linkage="internal")
        src, rs, cs, rows, cols, dst = fn.args
        b = self.b
        # "across" is the panel's short axis (width), "depth" the k axis.
        across, depth = (rows, cols) if along_rows else (cols, rows)
        step_across, step_depth = (rs, cs) if along_rows else (cs, rs)
        contiguous = b.icmp_signed("==", step_across, i64(1))
        with b.if_else(contiguous) as (vector_path, panel_paths):
            with vector_path:
                self._pack_contiguous(src, step_depth, depth, across, width, dst)
            with panel_paths:
                with for_range(b, 0, across, width, "panel") as p0:
                    count = smin(b, b.sub(across, p0), i64(width))
                    panel_src = at(b, src, b.mul(p0, step_across))
                    panel_dst = at(b, dst, b.mul(p0, depth))
                    rows_contiguous = b.icmp_signed("==", step_depth, i64(1))
                    with b.if_else(rows_contiguous) as (transpose_path, scalar_path):
                        with transpose_path:
                            self._pack_transposing(panel_src, step_across, depth, count,
                                                   width, panel_dst)
                        with scalar_path:
                            self._pack_strided(panel_src, step_across, step_depth, depth,
                                               count, width, panel_dst)
        b.ret_void()
        return fn

    def _pack_contiguous(self, src, step_depth, depth, across, width, dst):
        """Unit stride across the panels (a row-major B): line by line of the source,
        each line cut into its panels' rows with vector copies, so the source is read
        in order; the last, partial panel with masks and zeros."""
        b, lanes = self.b, self.tile.lanes
        vectors = -(-width // lanes)
        store_masks = self.lane_masks(i64(width), vectors)
        full_end = b.mul(b.sdiv(across, i64(width)), i64(width))
        tail_masks = self.lane_masks(b.sub(across, full_end), vectors)
        with for_range(b, 0, depth, 1, "k") as k:
            line = at(b, src, b.mul(k, step_depth))
            with for_range(b, 0, full_end, width, "panel") as p0:
                self._copy(at(b, line, p0), at(b, dst, b.mul(p0, depth), b.mul(
                    k, i64(width))), store_masks, store_masks, width)
            with b.if_then(b.icmp_signed("<", full_end, across)):
                self._copy(at(b, line, full_end), at(b, dst, b.mul(full_end, depth), b.mul(
                    k, i64(width))), tail_masks, store_masks, width)

    def _copy(self, source, target, load_masks, store_masks, width):
        """One panel row: `width` elements, those past load_masks zero."""
        b, lanes = self.b, self.tile.lanes
        for v, (load_mask, store_mask) in enumerate(zip(load_masks, store_masks)):
            value = self.widen(masked_load(b, at(b, source, i64(v * lanes)), load_mask,
                                           self.source_itemsize))
            place = at(b, target, i64(v * lanes))
            if (v + 1) * lanes <= width:
                store_vector(b, value, place, align=self.itemsize)
            else:
                masked_store(b, value, place, store_mask, self.itemsize)

    def _pack_transposing(self, src, step_across, depth, count, width, dst):
        """Source lines contiguous along depth (a row-major A, a transposed B): `lanes`
        steps of depth at a time, one vector load per line, transposed in registers; the
        last depth % lanes steps go through the strided path. Like it, pads a partial
        panel with copies of its last line. A width of whole vectors (B's NR) transposes
        lanes x lanes blocks by 2-input shuffles (_transpose_block); another width (A's
        MR) by one shuffle of all its lines, which LLVM lowers to slower code (a 784 x
        256 float32 B^T: 39 us that way, 18 us by blocks, 15 us for a row-major B)."""
        b, lanes = self.b, self.tile.lanes
        last = b.sub(count, i64(1))
        lines = [at(b, src, b.mul(smin(b, i64(j), last), step_across))
                 for j in range(width)]
        main_end = b.mul(b.sdiv(depth, i64(lanes)), i64(lanes))
        with for_range(b, 0, main_end, lanes, "k") as k:
            vectors = [self.widen(load_vector(b, at(b, lines[j], k), lanes,
                                              self.source_itemsize)) for j in range(width)]
            if width % lanes == 0:
                for first in range(0, width, lanes):
                    block = self._transpose_block(vectors[first:first + lanes])
                    for step, row in enumerate(block):
                        store_vector(b, row, at(b, dst, b.mul(b.add(k, i64(step)), i64(width)),
                                                i64(first)), align=self.itemsize)
            else:
                self._store_transposed(vectors, at(b, dst, b.mul(k, i64(width))), width)
        self._pack_strided(at(b, src, main_end), step_across, i64(1),
                           b.sub(depth, main_end), count, width,
                           at(b, dst, b.mul(main_end, i64(width))))

    def _transpose_block(self, rows: list) -> list:
        """The lanes x lanes block whose row j is rows[j], transposed: for each bit h of
        the index, from the highest, rows i and i + h (bit h of i clear) swap the lanes
        where the row's and the lane's bit h differ. Each step is a 2-input shuffle of a
        form x86 has an instruction for (unpack, 64-bit or 128-bit lane shuffles)."""
        b, lanes = self.b, len(rows)
        rows = list(rows)
        h = lanes // 2
        while h:
            low = [l if not l & h else lanes + l - h for l in range(lanes)]
            high = [l + h if not l & h else lanes + l for l in range(lanes)]
            for i in range(lanes):
                if not i & h:
                    x, y = rows[i], rows[i + h]
                    rows[i] = b.shuffle_vector(x, y, ir.Constant(
                        ir.VectorType(I32, lanes), low))
                    rows[i + h] = b.shuffle_vector(x, y, ir.Constant(
                        ir.VectorType(I32, lanes), high))
            h //= 2
        return rows

    def _store_transposed(self, vectors: list, target, width: int) -> None:
        """`width` vectors of `lanes` depth steps, one per line, stored as `lanes` rows of
        `width` elements: concatenated and reordered by one shuffle."""
        b, lanes = self.b, self.tile.lanes
        wide = ir.VectorType(self.T, width * lanes)
        order = [j * lanes + k for k in range(lanes) for j in range(width)]
        block = self._concatenate(vectors)
        block = b.shuffle_vector(block, ir.Constant(block.type, ir.Undefined),
                                 ir.Constant(ir.VectorType(I32, len(order)), order))
        b.store(block, b.bitcast(target, wide.as_pointer()), align=self.itemsize)

    def _concatenate(self, vectors: list) -> ir.Value:
        """One vector holding `vectors` end to end (padded with undef to a power of two
        count, whose extra lanes the caller's shuffle never picks)."""
        b = self.b
        size = 1
        while size < len(vectors):
            size *= 2
        vectors = vectors + [ir.Constant(self.V, ir.Undefined)] * (size - len(vectors))

        def join(x, y):
            both = list(range(2 * x.type.count))
            return b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, len(both)), both))

        return pairwise(vectors, join)

    def _pack_strided(self, src, step_across, step_depth, depth, count, width, dst):
        """Any strides: element by element. A partial panel is padded with copies of its
        last line rather than zeros (the results they feed are never stored), which
        keeps LLVM from turning the padding into a memset call: a library call would
        give the module a GOT entry."""
        b = self.b
        last = b.sub(count, i64(1))
        offsets = [b.mul(smin(b, i64(j), last), step_across) for j in range(width)]
        with for_range(b, 0, depth, 1, "k") as k:
            row = at(b, src, b.mul(k, step_depth))
            out = at(b, dst, b.mul(k, i64(width)))
            for j in range(width):
                value = self.widen(b.load(at(b, row, offsets[j]), align=self.source_itemsize))
                b.store(value, at(b, out, i64(j)), align=self.itemsize)
