"""Packing for the GEMM, as LLVM IR: copies of blocks of A and B into contiguous,
zero-padded panels in the order the micro-kernel reads them. Sources are read through
their strides, with a vector path for each unit-stride layout."""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu.gemm.emit.tools import I16, Emitter
from runtime.llvm.toolkit import (I32, at, for_range, i64, lane_mask, load_vector,
                                  masked_load, masked_store, pairwise, smin, splat,
                                  store_vector)


class Packing(Emitter):
    """pack_a(src, rs, cs, rows, depth, dst): MR-row panels, dst[(p*depth + k)*MR + i];
    pack_b(src, rs, cs, depth, cols, dst): NR-column panels, dst[(p*depth + k)*NR + j].
    Both pad the last panel to full width (zeros, or copies of its last line: either
    way the results they feed are never stored) and read the source through its
    strides, with vector paths for the unit-stride layouts. Operands of another type
    than the tile's (bfloat16, float16) are widened as they are read (Emitter.widen):
    the panels are always of the tile's type, except a dot-product tile's (Tile.dot),
    whose panels hold pairs of K steps (_pack_pairs)."""
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
        # a dot tile's panels: pairs of K steps (see the section at the end)
        contiguous_path, transposing_path, strided_path = (
            (self._pairs_interleaved, self._pairs_transposed, self._pairs_strided)
            if self.tile.dot else
            (self._pack_contiguous, self._pack_transposing, self._pack_strided))
        panel_depth = b.ashr(b.add(depth, i64(1)), i64(1)) if self.tile.dot else depth
        contiguous = b.icmp_signed("==", step_across, i64(1))
        with b.if_else(contiguous) as (vector_path, panel_paths):
            with vector_path:
                contiguous_path(src, step_depth, depth, across, width, dst)
            with panel_paths:
                with for_range(b, 0, across, width, "panel") as p0:
                    count = smin(b, b.sub(across, p0), i64(width))
                    panel_src = at(b, src, b.mul(p0, step_across))
                    panel_dst = at(b, dst, b.mul(p0, panel_depth))
                    rows_contiguous = b.icmp_signed("==", step_depth, i64(1))
                    with b.if_else(rows_contiguous) as (transpose_path, scalar_path):
                        with transpose_path:
                            transposing_path(panel_src, step_across, depth, count, width,
                                             panel_dst)
                        with scalar_path:
                            strided_path(panel_src, step_across, step_depth, depth, count,
                                         width, panel_dst)
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

    # A dot-product tile's panels ----------------------------------------------------------
    # Panels of pairs of K steps for vdpbf16ps: the 32-bit slot (p*steps + s)*width + j
    # (steps = ceil(depth / 2)) holds line j's bfloat16 words at depth 2s and 2s + 1, the
    # second zero past an odd depth (a zero in A and in B: the padded product is 0, even
    # beside an infinity). Lines past a partial panel repeat its last line, as in the
    # other panels. Vector paths: lines contiguous across the panels (a row-major B), two
    # lines interleaved; lines contiguous along K (a row-major A, a transposed B), 16
    # pairs of each line at once, transposed in registers.

    def _pairs_interleaved(self, src, step_depth, depth, across, width, dst):
        """Unit stride across: for each pair of lines of the source (the second zero past
        an odd depth), each panel's `width` words of both, interleaved into its slots;
        the last, partial panel through masked loads (zeros past the source)."""
        b = self.b
        steps = b.ashr(b.add(depth, i64(1)), i64(1))
        full_end = b.mul(b.sdiv(across, i64(width)), i64(width))
        full, tail = lane_mask(b, i64(width), width), lane_mask(b, b.sub(across, full_end), width)
        interleave = ir.Constant(ir.VectorType(I32, 2 * width),
                                 [x for j in range(width) for x in (j, width + j)])
        with for_range(b, 0, steps, 1, "s") as step:
            first = at(b, src, b.mul(b.add(step, step), step_depth))
            second = at(b, first, step_depth)
            has_second = splat(b, b.icmp_signed("<", b.add(b.add(step, step), i64(1)), depth),
                               width)

            def panel(start, mask):
                # masked lanes are zero and not read: no second line past an odd depth
                low = masked_load(b, at(b, first, start), mask, 2)
                high = masked_load(b, at(b, second, start), b.and_(mask, has_second), 2)
                slot = at(b, dst, b.add(b.mul(start, steps), b.mul(step, i64(width))))
                store_vector(b, b.shuffle_vector(low, high, interleave),
                             b.bitcast(slot, I16.as_pointer()), align=4)

            with for_range(b, 0, full_end, width, "panel") as p0:
                panel(p0, full)
            with b.if_then(b.icmp_signed("<", full_end, across)):
                panel(full_end, tail)

    def _pairs_transposed(self, src, step_across, depth, count, width, dst):
        """Unit stride along K: 16 pairs of each line loaded as one vector of 32-bit slots
        and the block transposed in registers, as _pack_transposing does with float32
        elements; the last depth % 32 steps through the strided path."""
        b, lanes = self.b, self.tile.lanes
        last = b.sub(count, i64(1))
        lines = [at(b, src, b.mul(smin(b, i64(j), last), step_across)) for j in range(width)]
        main_steps = b.mul(b.sdiv(depth, i64(2 * lanes)), i64(lanes))
        with for_range(b, 0, main_steps, lanes, "s") as step:
            vectors = [load_vector(b, b.bitcast(at(b, line, b.add(step, step)), self.P),
                                   lanes, 2) for line in lines]
            if width % lanes == 0:
                for first in range(0, width, lanes):
                    block = self._transpose_block(vectors[first:first + lanes])
                    for offset, row in enumerate(block):
                        store_vector(b, row, at(b, dst, b.mul(b.add(step, i64(offset)),
                                                               i64(width)), i64(first)),
                                     align=self.itemsize)
            else:
                self._store_transposed(vectors, at(b, dst, b.mul(step, i64(width))), width)
        done = b.add(main_steps, main_steps)
        self._pairs_strided(at(b, src, done), step_across, i64(1), b.sub(depth, done), count,
                            width, at(b, dst, b.mul(main_steps, i64(width))))

    def _pairs_strided(self, src, step_across, step_depth, depth, count, width, dst):
        """Any strides: word by word (a missing second word of the last pair is zero; its
        load reads the first again, never past the source)."""
        b = self.b
        last = b.sub(count, i64(1))
        offsets = [b.mul(smin(b, i64(j), last), step_across) for j in range(width)]
        words = b.bitcast(dst, I16.as_pointer())
        zero = ir.Constant(I16, 0)
        with for_range(b, 0, b.ashr(b.add(depth, i64(1)), i64(1)), 1, "s") as step:
            k0 = b.add(step, step)
            has_second = b.icmp_signed("<", b.add(k0, i64(1)), depth)
            k1 = b.select(has_second, b.add(k0, i64(1)), k0)
            rows = (at(b, src, b.mul(k0, step_depth)), at(b, src, b.mul(k1, step_depth)))
            out = at(b, words, b.mul(step, i64(2 * width)))
            for j in range(width):
                low = b.load(at(b, rows[0], offsets[j]), align=2)
                high = b.select(has_second, b.load(at(b, rows[1], offsets[j]), align=2), zero)
                b.store(low, at(b, out, i64(2 * j)), align=2)
                b.store(high, at(b, out, i64(2 * j + 1)), align=2)

