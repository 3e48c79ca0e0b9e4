"""LLVM IR of runtime/cpu/gemm/small.py's shape-specialised kernels: TileStore's row store fed
compile-time constants for every size and stride, B as rows (in place, or copied to the
stack: a transposed B through in-register vector transposes), tiles by column blocks
of NR, then row tiles of MR, the tails last. See ../small.py for what they compute.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from runtime.cpu.values import emit_activation
from runtime.cpu.gemm.emit.tools import PACK_ALIGN
from runtime.cpu.gemm.emit.kernel import KERNEL_ARGS, Tile, export_item
from runtime.cpu.gemm.emit.store import TileStore, Update
from runtime import fastcall, fastcall_ir
from runtime.llvm.toolkit import (I1, I8P, I32, I64, VOID, at, claim_loop, define,
                                  fold_range, for_range, for_trips, i32, i64, load_vector,
                                  masked_load, store_vector)

if TYPE_CHECKING:
    from runtime.cpu.gemm.small import SmallKey

FULL_UNROLL_K = 8  # K up to this is unrolled completely
K_UNROLL = 4  # the k loop's unrolling beyond that


def has_fast_entry(key: SmallKey) -> bool:
    """Whether the kernel gets a runtime.fastcall entry: where the interpreter allows
    one, for keys whose arguments are all operands (no runtime alpha or scale)."""
    return fastcall.available() and all(kind == "p" for _, kind in key.args)


class SmallGemm(TileStore):
    """Builds one specialised kernel: TileStore's row store, fed compile-time constants
    for every size and stride (LLVM folds its runtime checks away)."""

    def __init__(self, module: ir.Module, name: str, key: SmallKey, tile: Tile):
        super().__init__(module, tile)
        self.key, self.main, self.spec, self.activation = key, tile, key.spec, emit_activation
        alone = key.cut.pieces == 1  # else the kernel is one piece's, called by the entries
        self.fn = self.define(name if alone else f"{name}_piece", key.args,
                              linkage="" if alone else "internal")
        given = {name: arg for arg, (name, _) in zip(self.fn.args, key.args)}
        c_rs, c_cs = key.c_strides or (0, 0)
        r_rs, r_cs = key.residual_strides or (0, 0)
        null, one = ir.Constant(self.P, None), ir.Constant(self.T, 1.0)
        self.arg = {"c": null, "bias": null, "res": null, "alpha": one, "scale": one,
                    "beta": ir.Constant(self.T, 0.0), **given,
                    "c_rs": i64(c_rs), "c_cs": i64(c_cs),
                    "o_rs": i64(key.out_row_stride),
                    "bias_stride": i64(key.bias_stride),
                    "r_rs": i64(r_rs), "r_cs": i64(r_cs)}
        self.row_buffer = self.b.alloca(ir.ArrayType(self.T, tile.nr), name="row")
        self.row_buffer.align = PACK_ALIGN
        builder = self.b
        whole = self.fn if alone else self._in_pieces(f"{name}_pieces")
        if alone:
            export_item(module, f"{name}_item", tile, self.fn, KERNEL_ARGS,
                        wanted=tuple(arg_name for arg_name, _ in key.args))
        else:
            self._on_addresses(name, whole)
        if has_fast_entry(key):
            self._fast_entry(f"{name}_fast", whole)
        self.b = builder

    def _on_addresses(self, name: str, target: ir.Function) -> None:
        """`name`(operands..., scalars..., [cell, run]), exported: `target` as is."""
        entry, b = define(self.module, name, target.function_type)
        b.call(target, list(entry.args))
        b.ret_void()

    def _fast_entry(self, name: str, target: ir.Function) -> None:
        """`name`, a runtime.fastcall function on the operands' ndarrays in key.args'
        order, returning out; its words are the pool's cell and run function for a
        kernel on threads."""
        entry = fastcall_ir.Entry(self.module, name)
        pointers = [entry.b.bitcast(data, self.P)
                    for data in entry.arrays(len(self.key.args))]
        pool = [] if self.key.cut.threads == 1 else [entry.b.inttoptr(word, I8P)
                                                     for word in entry.words(2)]
        entry.b.call(target, pointers + pool)
        entry.give([arg_name for arg_name, _ in self.key.args].index("out"))

    def _in_pieces(self, name: str) -> ir.Function:
        """An internal `name`(operands..., scalars..., [cell, run]) running the kernel
        on the key's Cut: with one thread the task below on this one, else through
        kiln_pool_run(pool, task, context, threads), the pool read from runtime.pool's
        current cell (none there: the task runs alone, on every piece). The context
        (the arguments and the counter the task claims pieces with) lives on this
        function's stack, which kiln_pool_run outlives."""
        cut = self.key.cut
        kinds = [arg.type for arg in self.fn.args]
        context_type = ir.LiteralStructType([I64] + kinds)
        task = self._piece_task(f"{name}_task", context_type)
        pool_args = [I8P, I8P] if cut.threads > 1 else []
        fn, b = define(self.module, name, ir.FunctionType(VOID, kinds + pool_args),
                       linkage="internal")
        context = b.alloca(context_type, name="context")
        for index, value in enumerate([i64(0)] + list(fn.args[:len(kinds)])):
            b.store(value, b.gep(context, [i32(0), i32(index)]))
        alone_args = [b.bitcast(context, I8P), i64(0), i64(1)]
        if cut.threads == 1:
            b.call(task, alone_args)
            b.ret_void()
            return fn
        cell, run = fn.args[len(kinds):]
        run_type = ir.FunctionType(VOID, [I8P, task.type, I8P, I64])
        pool = b.load(b.bitcast(cell, I8P.as_pointer()))
        with b.if_else(b.icmp_unsigned("==", pool, ir.Constant(I8P, None))) as (alone, shared):
            with alone:
                b.call(task, alone_args)
            with shared:
                b.call(b.bitcast(run, run_type.as_pointer()),
                       [pool, task, b.bitcast(context, I8P), i64(cut.threads)])
        b.ret_void()
        return fn

    def _piece_task(self, name: str, context_type: ir.Type) -> ir.Function:
        """The runtime.pool task `name`(context, worker, threads): claim the next piece
        from the context's counter and run the kernel on its operands (each moved by
        its step), until none is left."""
        key = self.key
        fn, b = define(self.module, name, ir.FunctionType(VOID, [I8P, I64, I64]),
                       linkage="internal")
        context = b.bitcast(fn.args[0], context_type.as_pointer())
        args = {arg_name: b.load(b.gep(context, [i32(0), i32(index + 1)]))
                for index, (arg_name, _) in enumerate(key.args)}
        steps = dict(key.cut.steps)
        with claim_loop(b, b.gep(context, [i32(0), i32(0)]), key.cut.pieces, "piece") as piece:
            moved = [at(b, args[arg_name], b.mul(piece, i64(steps[arg_name])))
                     if steps.get(arg_name) else args[arg_name] for arg_name, _ in key.args]
            b.call(self.fn, moved)
        b.ret_void()
        return fn

    def build(self) -> None:
        """B as rows (in place or copied), then column blocks of NR, each row tiles of
        MR, the tails last."""
        key, lanes = self.key, self.main.lanes
        b_rows, b_rs, aligned = self._b_rows()
        nr = self.main.nr
        full_n, tail_n = divmod(key.n, nr)
        for_trips(self.b, 0, full_n, nr,
                  lambda j0: self._column_block(j0, nr, b_rows, b_rs, aligned))
        if tail_n:
            width = -(-tail_n // lanes) * lanes
            self._column_block(i64(full_n * nr), width, b_rows, b_rs, aligned,
                               cols=tail_n)
        self.b.ret_void()

    def _column_block(self, j0, width, b_rows, b_rs, aligned, cols=None) -> None:
        mr, m = self.main.mr, self.key.m
        full_m, tail_m = divmod(m, mr)
        tile = (b_rows, b_rs, aligned, width, cols or width)
        for_trips(self.b, 0, full_m, mr, lambda i0: self._tile(i0, j0, mr, *tile))
        if tail_m:
            self._tile(i64(full_m * mr), j0, tail_m, *tile)

    def _tile(self, i0, j0, rows, b_rows, b_rs, aligned, width, cols) -> None:
        """A rows x width tile at (i0, j0), all of K, stored through TileStore's row store
        (masks for the `cols` < width columns)."""
        b, key = self.b, self.key
        a_rs, a_cs = key.a_strides
        lanes = self.main.lanes
        self.tile = Tile(key.dtype, rows, width, lanes)
        vectors = width // lanes
        a_rows = [at(b, self.arg["a"], b.mul(b.add(i0, i64(i)), i64(a_rs)))
                  for i in range(rows)]
        b_col = at(b, b_rows, j0)
        masks = [ir.Constant(ir.VectorType(I1, lanes), [v * lanes + j < cols
                                                        for j in range(lanes)])
                 for v in range(vectors)]

        def load_a(kk, i):
            return b.load(at(b, a_rows[i], b.mul(kk, i64(a_cs))), align=self.itemsize)

        def load_b(kk, v):
            ptr = at(b, b_col, b.mul(kk, i64(b_rs)), v * lanes)
            if aligned or (v + 1) * lanes <= cols:
                return load_vector(b, ptr, lanes, PACK_ALIGN if aligned else self.itemsize)
            return masked_load(b, ptr, masks[v], self.itemsize)

        accs = self._product(rows, vectors, load_a, load_b)
        update, true = Update(self, ir.Constant(I1, 1)), ir.Constant(I1, 1)
        for i in range(rows):
            row = accs[i * vectors:(i + 1) * vectors]
            self._store_row(row, b.add(i0, i64(i)), j0, i64(cols), masks, update,
                            true)

    def _product(self, rows, vectors, load_a, load_b) -> list:
        """rows x vectors accumulators over all of K: unrolled completely for small K,
        else a loop of K_UNROLL steps and the remainder unrolled."""
        k = self.key.k
        accs = [ir.Constant(self.V, None)] * (rows * vectors)
        if k <= FULL_UNROLL_K:
            return self.rank1_updates(accs, [i64(kk) for kk in range(k)], rows, vectors,
                                      load_a, load_b)
        main = k - k % K_UNROLL
        accs = self._k_loop(accs, main, rows, vectors, load_a, load_b)
        return self.rank1_updates(accs, [i64(kk) for kk in range(main, k)], rows, vectors,
                                  load_a, load_b)

    def _k_loop(self, accs, stop, rows, vectors, load_a, load_b) -> list:
        def steps(kk, values):
            ks = [self.b.add(kk, i64(u)) if u else kk for u in range(K_UNROLL)]
            return self.rank1_updates(values, ks, rows, vectors, load_a, load_b)

        return fold_range(self.b, 0, stop, K_UNROLL, accs, steps, "k")

    # B as rows with unit column stride
    def _b_rows(self) -> tuple:
        """(pointer, row stride, whether rows are PACK_ALIGN-aligned and padded to whole
        vectors): B itself when its columns are contiguous, else a stack copy."""
        key, lanes = self.key, self.main.lanes
        b_rs, b_cs = key.b_strides
        if b_cs == 1 or key.n == 1:
            return self.arg["b"], b_rs, False
        padded = -(-key.n // lanes) * lanes
        buffer = self.b.alloca(ir.ArrayType(self.T, key.k * padded), name="b_rows")
        buffer.align = PACK_ALIGN
        rows = self.b.bitcast(buffer, self.P)
        if b_rs == 1:
            self._transpose_b(rows, padded, b_cs)
        else:
            self._copy_b(rows, padded, b_rs, b_cs)
        return rows, padded, True

    def _copy_b(self, rows, padded, b_rs, b_cs) -> None:
        """B (any strides) element by element into rows `padded` apart, zero past N."""
        b, key = self.b, self.key
        zero = ir.Constant(self.T, 0.0)
        with for_range(b, 0, key.k, 1, "copy_k") as kk:
            source = at(b, self.arg["b"], b.mul(kk, i64(b_rs)))
            target = at(b, rows, b.mul(kk, i64(padded)))
            with for_range(b, 0, key.n, 1, "copy_j") as j:
                value = b.load(at(b, source, b.mul(j, i64(b_cs))), align=self.itemsize)
                b.store(value, at(b, target, j), align=self.itemsize)
            for j in range(key.n, padded):
                b.store(zero, at(b, target, i64(j)), align=self.itemsize)

    def _transpose_b(self, rows, padded, ldb) -> None:
        """A column-major B (element (k, j) at j * ldb + k) into rows, lanes x lanes blocks
        at a time through shuffles; zero past N."""
        b, key, lanes = self.b, self.key, self.main.lanes
        for k_start, k_count, k_blocks in _blocks(key.k, lanes):
            for j_start, j_count, j_blocks in _blocks(key.n, lanes):
                for_trips(b, k_start, k_blocks, lanes, lambda k0: for_trips(
                    b, j_start, j_blocks, lanes, lambda j0: self._transpose_block(
                        rows, padded, ldb, k0, j0, k_count, j_count)))

    def _transpose_block(self, rows, padded, ldb, k0, j0, k_count, j_count) -> None:
        b, lanes = self.b, self.main.lanes
        mask = ir.Constant(ir.VectorType(I1, lanes), [j < k_count for j in range(lanes)])
        columns = []
        for j in range(lanes):
            if j >= j_count:
                columns.append(ir.Constant(self.V, None))
                continue
            ptr = at(b, self.arg["b"], b.mul(b.add(j0, i64(j)), i64(ldb)), k0)
            columns.append(load_vector(b, ptr, lanes, self.itemsize) if k_count == lanes
                           else masked_load(b, ptr, mask, self.itemsize))
        for kk, row in enumerate(_transposed(b, columns, lanes)[:k_count]):
            target = at(b, rows, b.mul(b.add(k0, i64(kk)), i64(padded)), j0)
            store_vector(b, row, target, PACK_ALIGN)


def _blocks(size: int, lanes: int) -> list:
    """(start, size, count) of the whole blocks of `lanes` in range(size), then of the
    partial block if any."""
    full, tail = divmod(size, lanes)
    return [block for block in ((0, lanes, full), (full * lanes, tail, 1)) if block[1]
            and block[2]]


def _transposed(b: ir.IRBuilder, vectors: list, lanes: int) -> list:
    """The lanes x lanes matrix with rows `vectors` transposed: log2(lanes) stages, each
    swapping the off-diagonal d x d blocks of every 2d x 2d block with two-input
    shuffles."""
    d = lanes // 2
    mask_type = ir.VectorType(I32, lanes)
    while d:
        swapped = list(vectors)
        for r in range(lanes):
            if r & d:
                continue
            low, high = vectors[r], vectors[r + d]
            keep_low = [c if not c & d else lanes + c - d for c in range(lanes)]
            keep_high = [c + d if not c & d else lanes + c for c in range(lanes)]
            swapped[r] = b.shuffle_vector(low, high, ir.Constant(mask_type, keep_low))
            swapped[r + d] = b.shuffle_vector(low, high, ir.Constant(mask_type, keep_high))
        vectors, d = swapped, d // 2
    return vectors
