"""The tile store of kiln's GEMM, as LLVM IR: the register tile written to C with the
K-block update (alpha, beta and C, or the partial sum already in out) and, on the last
K block, the fused epilogue (bias, activation, scale, residual)."""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu.gemm.emit.tools import PACK_ALIGN, Emitter
from runtime.llvm.toolkit import (I1, at, choose, equal, for_range, i64, load_vector,
                                  masked_load, masked_store, splat, store_vector, when)


class TileStore(Emitter):
    """Tile-store methods for the GEMM function builder, which provides `arg` (the
    function's arguments by name), `spec` (the EpilogueSpec), `activation` (the emitter
    of non-relu activations) and the stack buffers `tile_buffer` (MR x NR) and
    `row_buffer` (NR)."""

    def store_tile(self, accs, row0, col0, rows, cols, first, last) -> None:
        """Write the rows x cols corner of the tile to out: alpha * acc plus, on the first
        K block, beta * C (C unread when beta == 0) or, on later ones, out; then, on the
        last K block, the epilogue. A full tile whose operands have unit column stride
        goes straight from the registers; any other tile row by row from a stack copy."""
        b, t, arg, spec = self.b, self.tile, self.arg, self.spec
        update = Update(self, first)
        one = i64(1)
        simple = [b.icmp_signed("==", rows, i64(t.mr)),
                  b.icmp_signed("==", cols, i64(t.nr)),
                  b.or_(b.not_(update.read_previous),
                        b.icmp_signed("==", update.previous_cs, one))]
        if spec.residual:
            simple.append(b.icmp_signed("==", arg["r_cs"], one))
        if spec.bias == "col":
            simple.append(b.icmp_signed("==", arg["bias_stride"], one))
        whole = simple[0]
        for condition in simple[1:]:
            whole = b.and_(whole, condition)
        with b.if_else(whole) as (from_registers, row_by_row):
            with from_registers:
                for i in range(t.mr):
                    row = accs[i * t.vectors:(i + 1) * t.vectors]
                    self._store_row(row, b.add(row0, i64(i)), col0, cols, None, update,
                                    last)
            with row_by_row:
                tile = b.bitcast(self.tile_buffer, self.P)
                for index, acc in enumerate(accs):
                    store_vector(b, acc, at(b, tile, index * t.lanes), PACK_ALIGN)
                masks = self.lane_masks(cols, t.vectors)
                with for_range(b, 0, rows, 1, "row") as i:
                    row = [load_vector(b, at(b, tile, b.mul(i, i64(t.nr)), v * t.lanes),
                                       t.lanes, PACK_ALIGN)
                           for v in range(t.vectors)]
                    self._store_row(row, b.add(row0, i), col0, cols, masks, update, last)

    def _store_row(self, values, row, col0, cols, masks, update: Update, last) -> None:
        """One tile row: the K-block update, the epilogue on the last block, the store.
        `masks` None means a whole row with unit-stride operands."""
        b, arg = self.b, self.arg
        values = [b.fmul(update.alpha, x) for x in values]

        def add_previous(xs):
            prior = self._load_row(at(b, update.previous, b.mul(row, update.previous_rs),
                                      b.mul(col0, update.previous_cs)),
                                   update.previous_cs, cols, masks)
            return [b.fadd(x, b.fmul(update.previous_scale, p)) for x, p in zip(xs, prior)]

        values = when(b, update.read_previous, values, add_previous)
        values = when(b, last, values, lambda xs: self._epilogue(xs, row, col0, cols, masks))
        if self.tile.operands == self.tile.dtype:
            self._write_row(values, arg["out"], row, col0, masks, self.itemsize)
            return
        # 16-bit operands: the last K block may go to `rounded`, rounded once
        rounded = arg["rounded"]
        rounds = b.and_(last, b.icmp_unsigned("!=", rounded, ir.Constant(rounded.type, None)))
        with b.if_else(rounds) as (to_rounded, to_out):
            with to_rounded:
                self._write_row([self.narrow(x) for x in values], rounded, row, col0, masks, 2)
            with to_out:
                self._write_row(values, arg["out"], row, col0, masks, self.itemsize)

    def _write_row(self, values, out, row, col0, masks, itemsize) -> None:
        """Store a tile row's vectors at row `row`, column col0 of `out` (row stride
        o_rs elements), the lanes of `masks` only (None: all)."""
        b, t = self.b, self.tile
        out_row = at(b, out, b.mul(row, self.arg["o_rs"]), col0)
        for v, value in enumerate(values):
            target = at(b, out_row, v * t.lanes)
            if masks is None:
                store_vector(b, value, target, itemsize)
            else:
                masked_store(b, value, target, masks[v], itemsize)

    def _load_row(self, ptr, stride, cols, masks) -> list:
        """The `cols` elements ptr[j * stride] as tile-row vectors (zero past cols);
        with `masks` None, a whole row at unit stride."""
        b, t = self.b, self.tile
        if masks is None:
            return [load_vector(b, at(b, ptr, v * t.lanes), t.lanes, self.itemsize)
                    for v in range(t.vectors)]

        def contiguous():
            return [masked_load(b, at(b, ptr, v * t.lanes), masks[v], self.itemsize)
                    for v in range(t.vectors)]

        def strided():
            scratch = b.bitcast(self.row_buffer, self.P)
            with for_range(b, 0, cols, 1, "gather") as j:
                value = b.load(at(b, ptr, b.mul(j, stride)), align=self.itemsize)
                b.store(value, at(b, scratch, j), align=self.itemsize)
            zero = ir.Constant(self.V, None)
            return [b.select(masks[v], load_vector(b, at(b, scratch, v * t.lanes), t.lanes,
                                                   PACK_ALIGN), zero)
                    for v in range(t.vectors)]

        return choose(b, equal(b, stride, i64(1)), contiguous, strided)

    def _epilogue(self, values, row, col0, cols, masks) -> list:
        b, arg, spec = self.b, self.arg, self.spec
        if spec.bias == "col":
            bias = self._load_row(at(b, arg["bias"], b.mul(col0, arg["bias_stride"])),
                                  arg["bias_stride"], cols, masks)
            values = [b.fadd(x, y) for x, y in zip(values, bias)]
        elif spec.bias == "row":
            bias = splat(b, b.load(at(b, arg["bias"], b.mul(row, arg["bias_stride"])),
                                   align=self.itemsize), self.tile.lanes)
            values = [b.fadd(x, bias) for x in values]
        if spec.activation is not None:
            values = [self.activation(b, spec.activation, x) for x in values]
        scale = splat(b, arg["scale"], self.tile.lanes)
        values = [b.fmul(x, scale) for x in values]
        if spec.residual:
            residual = self._load_row(at(b, arg["res"], b.mul(row, arg["r_rs"]),
                                         b.mul(col0, arg["r_cs"])),
                                      arg["r_cs"], cols, masks)
            values = [b.fadd(x, r) for x, r in zip(values, residual)]
        return values


class Update:
    """Per tile: where the value being accumulated onto comes from (C scaled by beta on
    the first K block, out itself after), whether to read it at all, and alpha."""

    def __init__(self, gemm: TileStore, first):
        b, arg = gemm.b, gemm.arg
        self.previous = b.select(first, arg["c"], arg["out"])
        self.previous_rs = b.select(first, arg["c_rs"], arg["o_rs"])
        self.previous_cs = b.select(first, arg["c_cs"], i64(1))
        lanes = gemm.tile.lanes
        self.previous_scale = splat(b, b.select(first, arg["beta"], ir.Constant(gemm.T, 1.0)),
                                    lanes)
        # known when a specialised kernel is built (first and beta constants): then
        # `when` builds no branch that reads C for nothing
        beta_zero = equal(b, arg["beta"], ir.Constant(gemm.T, 0.0))
        if isinstance(first, ir.Constant) and isinstance(beta_zero, ir.Constant):
            self.read_previous = ir.Constant(I1, int(not (first.constant and
                                                          beta_zero.constant)))
        else:
            self.read_previous = b.not_(b.and_(first, beta_zero))
        self.alpha = splat(b, arg["alpha"], lanes)
