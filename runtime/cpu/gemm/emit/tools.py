"""What the GEMM's LLVM IR builders share beyond runtime/llvm/toolkit.py: the element and
vector types of a tile, the function being built (arguments by kind) and the rank-1
updates of its accumulators."""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.llvm.toolkit import BFLOAT, I64, VOID, define, intrinsic, lane_mask, splat

PACK_ALIGN = 64  # bytes; packed buffers are ours and aligned to it, user buffers are not
I16 = ir.IntType(16)


class Emitter:
    """The types of a tile's elements (T, pointer P, tile-row vector V), of the operands
    A and B as they lie in memory (S, pointer SP: the 16-bit floats as i16 words, which
    `widen` converts to T) and the builder `b` of the function being built."""

    def __init__(self, module: ir.Module, tile):
        self.module, self.tile = module, tile
        self.T = ir.FloatType() if tile.dtype == "float32" else ir.DoubleType()
        self.P = self.T.as_pointer()
        self.V = ir.VectorType(self.T, tile.lanes)
        self.itemsize = 4 if tile.dtype == "float32" else 8
        self.S = self.T if tile.operands == tile.dtype else I16
        self.SP = self.S.as_pointer()
        self.source_itemsize = self.itemsize if tile.operands == tile.dtype else 2
        self.b: ir.IRBuilder = None

    def define(self, name: str, args: tuple, linkage: str = "") -> ir.Function:
        """A new function void `name`(args), each arg (name, kind): kind "i" an i64,
        "f" an element, "p" an element pointer, "s" an operand (A or B) element pointer,
        "h" a pointer to 16-bit words; the builder at its entry."""
        kinds = {"i": I64, "f": self.T, "p": self.P, "s": self.SP, "h": I16.as_pointer()}
        fn_type = ir.FunctionType(VOID, [kinds[kind] for _, kind in args])
        fn, self.b = define(self.module, name, fn_type, [arg_name for arg_name, _ in args],
                            linkage)
        return fn

    def widen(self, value: ir.Value) -> ir.Value:
        """An operand element or vector of them, as loaded through SP, in the tile's type:
        bfloat16 is the high half of a float32 (zero-extend, shift left by 16: exact),
        float16 goes through LLVM's half fpext (F16C's vcvtph2ps on x86, exact)."""
        operands, b = self.tile.operands, self.b
        if operands == self.tile.dtype:
            return value
        count = value.type.count if isinstance(value.type, ir.VectorType) else None

        def typed(element):
            return element if count is None else ir.VectorType(element, count)

        if operands == "float16":
            return b.fpext(b.bitcast(value, typed(ir.HalfType())), typed(self.T))
        wide = b.zext(value, typed(ir.IntType(32)))
        sixteen = ir.Constant(typed(ir.IntType(32)), 16 if count is None else [16] * count)
        return b.bitcast(b.shl(wide, sixteen), typed(self.T))

    def narrow(self, value: ir.Value) -> ir.Value:
        """A float32 vector rounded (to nearest, ties to even) to the operand type, as i16
        words: float16 through LLVM's fptrunc (F16C's vcvtps2ph); bfloat16 by adding
        0x7fff plus the lowest kept bit and keeping the high half, a NaN kept quiet (as
        ml_dtypes rounds)."""
        b, count = self.b, value.type.count
        words = ir.VectorType(I16, count)
        if self.tile.operands == "float16":
            return b.bitcast(b.fptrunc(value, ir.VectorType(ir.HalfType(), count)), words)
        i32s = ir.VectorType(ir.IntType(32), count)

        def constant(x):
            return ir.Constant(i32s, [x] * count)

        bits = b.bitcast(value, i32s)
        kept = b.and_(b.lshr(bits, constant(16)), constant(1))
        rounded = b.add(bits, b.add(kept, constant(0x7FFF)))
        quiet = b.or_(bits, constant(0x400000))
        nan = b.fcmp_unordered("uno", value, value)
        return b.trunc(b.lshr(b.select(nan, quiet, rounded), constant(16)), words)

    def lane_masks(self, count, vectors: int) -> list:
        """Masks of the lanes j < count, for `vectors` consecutive tile-row vectors."""
        lanes = self.tile.lanes
        return [lane_mask(self.b, count, lanes, v * lanes) for v in range(vectors)]

    def rank1_updates(self, accs: list, ks: list, rows: int, vectors: int, load_a,
                      load_b) -> list:
        """accs (rows x vectors accumulators, row-major) plus A[:, k] times B[k, :] for
        each k of `ks` in order, one FMA chain per accumulator: load_b(k, v) gives
        vector v of B's row k, load_a(k, i) the element of A's row i broadcast. In a
        dot-product tile each k is a pair of K steps (a packed slot holds two bfloat16
        words) and each update one vdpbf16ps: both products of the pair, summed into
        the float32 lane."""
        b, accs = self.b, list(accs)
        for k in ks:
            b_vectors = [load_b(k, v) for v in range(vectors)]
            for i in range(rows):
                a_i = splat(b, load_a(k, i), self.tile.lanes)
                for v in range(vectors):
                    index = i * vectors + v
                    accs[index] = self._update(accs[index], a_i, b_vectors[v])
        return accs

    def _update(self, acc, a, b_vector):
        if not self.tile.dot:
            return intrinsic(self.b, "fma", [a, b_vector, acc], self.V, (self.V,))
        pairs = ir.VectorType(BFLOAT, 2 * self.tile.lanes)
        return intrinsic(self.b, "x86.avx512bf16.dpbf16ps.512",
                         [acc, self.b.bitcast(a, pairs), self.b.bitcast(b_vector, pairs)],
                         self.V)
