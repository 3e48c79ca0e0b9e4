"""Shared pieces of the GEMM's LLVM IR builders: element and vector types for a tile,
the vector intrinsics (declared as plain functions: llvmlite's IRBuilder rejects vector
FMA), GEP-based addressing, and loop/branch helpers that merge values through phis."""
from __future__ import annotations

import contextlib
from typing import Callable

import llvmlite.ir as ir

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
PACK_ALIGN = 64  # bytes; packed buffers are ours and aligned to it, user buffers are not


class Emitter:
    """Types, intrinsics and control-flow helpers shared by the functions built here."""

    def __init__(self, module: ir.Module, tile):
        self.module, self.tile = module, tile
        self.T = ir.FloatType() if tile.dtype == "float32" else ir.DoubleType()
        self.P = self.T.as_pointer()
        self.V = ir.VectorType(self.T, tile.lanes)
        self.VP = self.V.as_pointer()
        self.itemsize = 4 if tile.dtype == "float32" else 8
        self.b: ir.IRBuilder = None
        suffix = f"v{tile.lanes}f{self.itemsize * 8}"
        mask = ir.VectorType(I1, tile.lanes)
        self._fma = self._declare(f"llvm.fma.{suffix}", self.V, [self.V] * 3)
        self._masked_load = self._declare(f"llvm.masked.load.{suffix}.p0", self.V,
                                          [self.VP, I32, mask, self.V])
        self._masked_store = self._declare(f"llvm.masked.store.{suffix}.p0", ir.VoidType(),
                                           [self.V, self.VP, I32, mask])

    def _declare(self, name, ret, args) -> ir.Function:
        existing = self.module.globals.get(name)
        return existing or ir.Function(self.module, ir.FunctionType(ret, args), name)

    def define(self, name: str, args: tuple, linkage: str = "") -> ir.Function:
        kinds = {"i": I64, "f": self.T, "p": self.P}
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(),
                                                      [kinds[k] for _, k in args]), name)
        if linkage:
            fn.linkage = linkage
        fn.attributes.add("nounwind")
        for arg, (arg_name, _) in zip(fn.args, args):
            arg.name = arg_name
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        return fn

    # values
    @staticmethod
    def i64(value: int) -> ir.Constant:
        return ir.Constant(I64, value)

    def splat(self, scalar) -> ir.Value:
        b = self.b
        one = b.insert_element(ir.Constant(self.V, ir.Undefined), scalar, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(self.V, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, self.tile.lanes), None))

    def at(self, ptr, *offsets) -> ir.Value:
        """ptr + sum(offsets) elements (through GEP, never integer arithmetic)."""
        b = self.b
        index = offsets[0]
        for offset in offsets[1:]:
            index = b.add(index, offset)
        return b.gep(ptr, [index])

    def min(self, x, y):
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def load_vector(self, ptr, align: int):
        return self.b.load(self.b.bitcast(ptr, self.VP), align=align)

    def store_vector(self, value, ptr, align: int):
        self.b.store(value, self.b.bitcast(ptr, self.VP), align=align)

    def masked_load(self, ptr, mask):
        return self.b.call(self._masked_load, [self.b.bitcast(ptr, self.VP),
                                               ir.Constant(I32, self.itemsize), mask,
                                               ir.Constant(self.V, None)])

    def masked_store(self, value, ptr, mask):
        self.b.call(self._masked_store, [value, self.b.bitcast(ptr, self.VP),
                                         ir.Constant(I32, self.itemsize), mask])

    def fma(self, x, y, z):
        return self.b.call(self._fma, [x, y, z])

    def lane_masks(self, count, vectors: int) -> list:
        """Masks of the lanes j < count, for `vectors` consecutive vectors."""
        lanes = self.tile.lanes
        limit = self.b.trunc(count, I32)
        limit = self.b.insert_element(ir.Constant(ir.VectorType(I32, lanes), ir.Undefined),
                                      limit, ir.Constant(I32, 0))
        limit = self.b.shuffle_vector(limit, ir.Constant(ir.VectorType(I32, lanes), ir.Undefined),
                                      ir.Constant(ir.VectorType(I32, lanes), None))
        return [self.b.icmp_signed(">", limit, ir.Constant(ir.VectorType(I32, lanes), list(
            range(v * lanes, (v + 1) * lanes)))) for v in range(vectors)]

    # control flow
    @contextlib.contextmanager
    def loop(self, start, stop, step, name: str):
        """for (i = start; i < stop; i += step): yields i; no values carried."""
        i, _, head, done = self._loop_head(start, stop, [], name)
        yield i
        self._loop_back(i, step, [], [], head, done)

    def loop_carrying(self, start, stop, step, values: list,
                      body: Callable[[ir.Value, list], list], name: str) -> list:
        """for (i = start; i < stop; i += step) values = body(i, values); the values
        after the loop (phis)."""
        i, phis, head, done = self._loop_head(start, stop, values, name)
        self._loop_back(i, step, phis, body(i, list(phis)), head, done)
        return phis

    def _loop_head(self, start, stop, values: list, name: str) -> tuple:
        """Open a loop: its counter and a phi per carried value (from `start` and
        `values` on entry), the builder inside the body; (i, phis, head, done)."""
        b = self.b
        before = b.block
        head, body, done = (b.append_basic_block(f"{name}.{part}")
                            for part in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(start, before)
        phis = []
        for value in values:
            phi = b.phi(value.type)
            phi.add_incoming(value, before)
            phis.append(phi)
        b.cbranch(b.icmp_signed("<", i, stop), body, done)
        b.position_at_end(body)
        return i, phis, head, done

    def _loop_back(self, i, step, phis: list, new: list, head, done) -> None:
        """Close a loop from where the body ended: the next counter and carried values
        back to the head; the builder after the loop."""
        b = self.b
        i.add_incoming(b.add(i, step), b.block)
        for phi, value in zip(phis, new):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(done)

    def rank1_updates(self, accs: list, ks: list, rows: int, vectors: int, load_a,
                      load_b) -> list:
        """accs (rows x vectors accumulators, row-major) plus A[:, k] times B[k, :] for
        each k of `ks` in order, one FMA chain per accumulator: load_b(k, v) gives
        vector v of B's row k, load_a(k, i) the element of A's row i broadcast."""
        accs = list(accs)
        for k in ks:
            b_vectors = [load_b(k, v) for v in range(vectors)]
            for i in range(rows):
                a_i = self.splat(load_a(k, i))
                for v in range(vectors):
                    accs[i * vectors + v] = self.fma(a_i, b_vectors[v], accs[i * vectors + v])
        return accs

    def when(self, condition, values: list, then: Callable[[list], list]) -> list:
        """`then(values)` if condition else `values`, as phis after the branch."""
        b = self.b
        before = b.block
        taken, merge = b.append_basic_block("when.then"), b.append_basic_block("when.end")
        b.cbranch(condition, taken, merge)
        b.position_at_end(taken)
        new = then(values)
        taken_end = b.block
        b.branch(merge)
        b.position_at_end(merge)
        merged = []
        for old, value in zip(values, new):
            phi = b.phi(old.type)
            phi.add_incoming(value, taken_end)
            phi.add_incoming(old, before)
            merged.append(phi)
        return merged

    def choose(self, condition, if_true: Callable[[], list], if_false: Callable[[], list]):
        """Values of if_true() or if_false(), as phis after the branch."""
        b = self.b
        yes, no, merge = (b.append_basic_block(f"choose.{p}") for p in ("yes", "no", "end"))
        b.cbranch(condition, yes, no)
        arms = []
        for block, build in ((yes, if_true), (no, if_false)):
            b.position_at_end(block)
            values = build()
            arms.append((values, b.block))
            b.branch(merge)
        b.position_at_end(merge)
        merged = []
        for index, value in enumerate(arms[0][0]):
            phi = b.phi(value.type)
            for values, block in arms:
                phi.add_incoming(values[index], block)
            merged.append(phi)
        return merged
