"""LLVM IR for kiln's GEMM: packing routines, the MR x NR register micro-kernel, the
macro-kernel loops around it (Goto/BLIS) and the epilogue fused into the tile store.

One module per (dtype, tile, epilogue) holds two exported functions with one signature
(`KERNEL_ARGS`): `<name>_packed` runs the whole blocked loop nest for its sub-problem
(jc over N by NC -> pc over K by KC, pack B -> ic over M by MC, pack A -> jr by NR ->
ir by MR -> micro-kernel) in one native call; `<name>_direct` reads A and B in place (B
must have unit column stride) for problems too small for packing to pay.

Matrices are element pointers plus row and column strides in elements, so transposes
and strided numpy views need no copies; `out` has unit column stride. The vector axis
of the tile runs along N: packed B rows are loaded as vectors, A elements broadcast, and
the N tail is handled with masked loads and stores. Rows past M are zero-padded in
packed A (the direct path re-reads the last row) and never stored.

The tile store computes, per element, `alpha * acc + beta * C` on the first K block
(`C` is not read when beta == 0, as in BLAS) and `alpha * acc + out` on later ones; on
the last K block it then applies the epilogue:
`out = residual + scale * act(x + bias)`.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

I1, I32, I64 = ir.IntType(1), ir.IntType(32), ir.IntType(64)
PACK_ALIGN = 64  # bytes; packed buffers are ours and aligned to it, user buffers are not
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "tanh")

# (name, kind): kind "i" is i64, "f" the element type, "p" an element pointer.
KERNEL_ARGS = (
    ("m", "i"), ("n", "i"), ("k", "i"),
    ("a", "p"), ("a_rs", "i"), ("a_cs", "i"),
    ("b", "p"), ("b_rs", "i"), ("b_cs", "i"),
    ("c", "p"), ("c_rs", "i"), ("c_cs", "i"),
    ("out", "p"), ("o_rs", "i"),
    ("alpha", "f"), ("beta", "f"), ("scale", "f"),
    ("bias", "p"), ("bias_stride", "i"),
    ("res", "p"), ("r_rs", "i"), ("r_cs", "i"),
    ("pack_a", "p"), ("pack_b", "p"),
    ("mc", "i"), ("kc", "i"), ("nc", "i"),
)


@dataclass(frozen=True)
class Tile:
    """The register tile: `mr` rows by `nr` columns of accumulators, `nr` a multiple of
    `lanes` (elements per vector register); the k loop is unrolled `unroll` times."""
    dtype: str
    mr: int
    nr: int
    lanes: int
    unroll: int = 4

    def __post_init__(self):
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"GEMM tiles are float32 or float64, not {self.dtype}")
        if self.nr % self.lanes or self.unroll & (self.unroll - 1):
            raise ValueError(f"bad tile {self}: nr must be a multiple of lanes and "
                             "unroll a power of two")

    @property
    def vectors(self) -> int:
        return self.nr // self.lanes


@dataclass(frozen=True)
class EpilogueSpec:
    """The compile-time shape of an epilogue: bias indexed by row ("row") or by column
    ("col") or none, an activation from ACTIVATIONS or none, and whether a residual
    matrix is added. Scale is a runtime argument and always applied."""
    bias: str | None = None
    activation: str | None = None
    residual: bool = False

    def __post_init__(self):
        if self.bias not in (None, "row", "col"):
            raise ValueError(f"bias must be None, 'row' or 'col', not {self.bias!r}")
        if self.activation is not None and self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}; "
                             f"expected one of {ACTIVATIONS}")

    @property
    def tag(self) -> str:
        return "_".join([f"b{self.bias or 0}", self.activation or "id",
                         "r" if self.residual else "nor"])


def build_module(module: ir.Module, name: str, tile: Tile, spec: EpilogueSpec,
                 activation: Callable | None = None) -> None:
    """Add `<name>_packed` and `<name>_direct` to `module`. `activation(builder, name,
    x)` emits an activation on a vector (needed for any activation but relu)."""
    pack_a = _Packing(module, tile).pack_a(f"{name}_pack_a")
    pack_b = _Packing(module, tile).pack_b(f"{name}_pack_b")
    _Gemm(module, f"{name}_packed", tile, spec, activation).packed(pack_a, pack_b)
    _Gemm(module, f"{name}_direct", tile, spec, activation).direct()


class _Emitter:
    """Types, intrinsics and control-flow helpers shared by the functions built here."""

    def __init__(self, module: ir.Module, tile: Tile):
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
        b = self.b
        before = b.block
        head, body, done = (b.append_basic_block(f"{name}.{part}")
                            for part in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=name)
        i.add_incoming(start, before)
        b.cbranch(b.icmp_signed("<", i, stop), body, done)
        b.position_at_end(body)
        yield i
        i.add_incoming(b.add(i, step), b.block)
        b.branch(head)
        b.position_at_end(done)

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


class _Packing(_Emitter):
    """pack_a(src, rs, cs, rows, depth, dst): MR-row panels, dst[(p*depth + k)*MR + i];
    pack_b(src, rs, cs, depth, cols, dst): NR-column panels, dst[(p*depth + k)*NR + j].
    Both zero-pad the last panel; both read the source through its strides, with a
    vector path for unit stride along the panel."""
    ARGS = (("src", "p"), ("rs", "i"), ("cs", "i"), ("rows", "i"), ("cols", "i"),
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
        with self.loop(self.i64(0), across, self.i64(width), "panel") as p0:
            count = self.min(b.sub(across, p0), self.i64(width))
            panel_src = self.at(src, b.mul(p0, step_across))
            panel_dst = self.at(dst, b.mul(p0, depth))
            contiguous = b.icmp_signed("==", step_across, self.i64(1))
            with b.if_else(contiguous) as (vector_path, scalar_path):
                with vector_path:
                    self._pack_contiguous(panel_src, step_depth, depth, count, width,
                                          panel_dst)
                with scalar_path:
                    self._pack_strided(panel_src, step_across, step_depth, depth, count,
                                       width, panel_dst)
        b.ret_void()
        return fn

    def _pack_contiguous(self, src, step_depth, depth, count, width, dst):
        lanes = self.tile.lanes
        vectors = -(-width // lanes)
        masks = self.lane_masks(count, vectors)
        store_masks = self.lane_masks(self.i64(width), vectors)
        with self.loop(self.i64(0), depth, self.i64(1), "k") as k:
            row = self.at(src, self.b.mul(k, step_depth))
            out = self.at(dst, self.b.mul(k, self.i64(width)))
            for v in range(vectors):
                value = self.masked_load(self.at(row, self.i64(v * lanes)), masks[v])
                target = self.at(out, self.i64(v * lanes))
                if (v + 1) * lanes <= width:
                    self.store_vector(value, target, align=self.itemsize)
                else:
                    self.masked_store(value, target, store_masks[v])

    def _pack_strided(self, src, step_across, step_depth, depth, count, width, dst):
        b = self.b
        last = b.sub(count, self.i64(1))
        offsets = [b.mul(self.min(self.i64(j), last), step_across) for j in range(width)]
        keep = [b.icmp_signed("<", self.i64(j), count) for j in range(width)]
        zero = ir.Constant(self.T, 0.0)
        with self.loop(self.i64(0), depth, self.i64(1), "k") as k:
            row = self.at(src, b.mul(k, step_depth))
            out = self.at(dst, b.mul(k, self.i64(width)))
            for j in range(width):
                value = b.load(self.at(row, offsets[j]), align=self.itemsize)
                b.store(b.select(keep[j], value, zero), self.at(out, self.i64(j)),
                        align=self.itemsize)


class _Gemm(_Emitter):
    """One exported GEMM function: the loop nest, the micro-kernel and the tile store."""

    def __init__(self, module, name, tile, spec, activation):
        super().__init__(module, tile)
        self.spec, self.activation = spec, activation
        self.fn = self.define(name, KERNEL_ARGS)
        self.arg = {arg_name: arg for arg, (arg_name, _) in zip(self.fn.args, KERNEL_ARGS)}
        size = tile.mr * tile.nr
        self.tile_buffer = self.b.alloca(ir.ArrayType(self.T, size), name="tile")
        self.tile_buffer.align = PACK_ALIGN
        self.row_buffer = self.b.alloca(ir.ArrayType(self.T, tile.nr), name="row")
        self.row_buffer.align = PACK_ALIGN

    def packed(self, pack_a: ir.Function, pack_b: ir.Function) -> None:
        """The blocked loop nest. B is always packed; A is packed unless its rows are
        contiguous (unit column stride), in which case the micro-kernel broadcasts from
        A in place: packing it would only copy rows that are already streams."""
        b, arg = self.b, self.arg
        m, n, k, zero = arg["m"], arg["n"], arg["k"], self.i64(0)
        a_in_place = b.icmp_signed("==", arg["a_cs"], self.i64(1))
        with self.loop(zero, n, arg["nc"], "jc") as jc:
            n_block = self.min(b.sub(n, jc), arg["nc"])
            with self.loop(zero, k, arg["kc"], "pc") as pc:
                k_block = self.min(b.sub(k, pc), arg["kc"])
                b.call(pack_b, [self.at(arg["b"], b.mul(pc, arg["b_rs"]), b.mul(jc, arg["b_cs"])),
                                arg["b_rs"], arg["b_cs"], k_block, n_block, arg["pack_b"]])
                first = b.icmp_signed("==", pc, zero)
                last = b.icmp_signed("==", b.add(pc, k_block), k)
                with self.loop(zero, m, arg["mc"], "ic") as ic:
                    m_block = self.min(b.sub(m, ic), arg["mc"])
                    block = (ic, jc, pc, m_block, n_block, k_block, first, last)
                    with b.if_else(a_in_place) as (in_place, packed):
                        with in_place:
                            self._macro_kernel(block, packed_a=False)
                        with packed:
                            b.call(pack_a, [self.at(arg["a"], b.mul(ic, arg["a_rs"]),
                                                    b.mul(pc, arg["a_cs"])),
                                            arg["a_rs"], arg["a_cs"], m_block, k_block,
                                            arg["pack_a"]])
                            self._macro_kernel(block, packed_a=True)
        b.ret_void()

    def _macro_kernel(self, block, packed_a: bool):
        """jr over the packed B block by NR, ir over the A block by MR: micro-kernel and
        tile store. A comes from its packed buffer or in place (rows past M re-read the
        last row; they are never stored)."""
        ic, jc, pc, m_block, n_block, k_block, first, last = block
        b, t, arg, zero = self.b, self.tile, self.arg, self.i64(0)
        with self.loop(zero, n_block, self.i64(t.nr), "jr") as jr:
            cols = self.min(b.sub(n_block, jr), self.i64(t.nr))
            panel_b = self.at(arg["pack_b"], b.mul(jr, k_block))
            with self.loop(zero, m_block, self.i64(t.mr), "ir") as ir_:
                rows = self.min(b.sub(m_block, ir_), self.i64(t.mr))
                if packed_a:
                    panel_a = self.at(arg["pack_a"], b.mul(ir_, k_block))

                    def load_a(kk, i):
                        return b.load(self.at(panel_a, b.mul(kk, self.i64(t.mr)), self.i64(i)),
                                      align=self.itemsize)
                else:
                    row0 = b.add(ic, ir_)
                    last_row = b.add(row0, b.sub(rows, self.i64(1)))
                    a_block = self.at(arg["a"], pc)
                    offsets = [b.mul(self.min(b.add(row0, self.i64(i)), last_row), arg["a_rs"])
                               for i in range(t.mr)]

                    def load_a(kk, i):
                        return b.load(self.at(a_block, offsets[i], kk), align=self.itemsize)

                def load_b(kk, v):
                    return self.load_vector(self.at(panel_b, b.mul(kk, self.i64(t.nr)),
                                                    self.i64(v * t.lanes)), align=PACK_ALIGN)

                accs = self._micro_kernel(k_block, load_a, load_b)
                self._store_tile(accs, b.add(ic, ir_), b.add(jc, jr), rows, cols, first, last)

    def direct(self) -> None:
        b, arg, t = self.b, self.arg, self.tile
        m, n, k, zero = arg["m"], arg["n"], arg["k"], self.i64(0)
        true = ir.Constant(I1, 1)
        with self.loop(zero, m, self.i64(t.mr), "i0") as i0:
            rows = self.min(b.sub(m, i0), self.i64(t.mr))
            last_row = b.add(i0, b.sub(rows, self.i64(1)))
            row_offsets = [b.mul(self.min(b.add(i0, self.i64(i)), last_row), arg["a_rs"])
                           for i in range(t.mr)]
            with self.loop(zero, n, self.i64(t.nr), "j0") as j0:
                cols = self.min(b.sub(n, j0), self.i64(t.nr))
                masks = self.lane_masks(cols, t.vectors)

                def load_a(kk, i):
                    return b.load(self.at(arg["a"], row_offsets[i], b.mul(kk, arg["a_cs"])),
                                  align=self.itemsize)

                def load_b(kk, v):
                    return self.masked_load(self.at(arg["b"], b.mul(kk, arg["b_rs"]), j0,
                                                    self.i64(v * t.lanes)), masks[v])

                accs = self._micro_kernel(k, load_a, load_b)
                self._store_tile(accs, i0, j0, rows, cols, true, true)
        b.ret_void()

    def _micro_kernel(self, depth, load_a, load_b) -> list:
        """`depth` rank-1 updates of MR x NR accumulators (MR * vectors registers), the
        k loop unrolled `unroll` times plus a remainder loop."""
        zeros = [ir.Constant(self.V, None)] * (self.tile.mr * self.tile.vectors)
        unroll = self.tile.unroll
        main_end = self.b.and_(depth, self.i64(-unroll))
        accs = self._k_loop(self.i64(0), main_end, unroll, zeros, load_a, load_b)
        if unroll > 1:
            accs = self._k_loop(main_end, depth, 1, accs, load_a, load_b)
        return accs

    def _k_loop(self, start, stop, step, accs, load_a, load_b) -> list:
        b, t = self.b, self.tile
        before = b.block
        head, body, done = (b.append_basic_block(f"k{step}.{p}") for p in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        kk = b.phi(I64, name="kk")
        kk.add_incoming(start, before)
        phis = []
        for acc in accs:
            phi = b.phi(self.V)
            phi.add_incoming(acc, before)
            phis.append(phi)
        b.cbranch(b.icmp_signed("<", kk, stop), body, done)
        b.position_at_end(body)
        values = list(phis)
        for u in range(step):
            k_u = b.add(kk, self.i64(u)) if u else kk
            b_vectors = [load_b(k_u, v) for v in range(t.vectors)]
            for i in range(t.mr):
                a_i = self.splat(load_a(k_u, i))
                for v in range(t.vectors):
                    index = i * t.vectors + v
                    values[index] = self.fma(a_i, b_vectors[v], values[index])
        kk.add_incoming(b.add(kk, self.i64(step)), b.block)
        for phi, value in zip(phis, values):
            phi.add_incoming(value, b.block)
        b.branch(head)
        b.position_at_end(done)
        return phis

    def _store_tile(self, accs, row0, col0, rows, cols, first, last) -> None:
        """Write the rows x cols corner of the tile to out, with the K-block update and
        (on the last K block) the epilogue; row by row from a stack copy of the tile."""
        b, t, arg = self.b, self.tile, self.arg
        tile = b.bitcast(self.tile_buffer, self.P)
        for index, acc in enumerate(accs):
            self.store_vector(acc, self.at(tile, self.i64(index * t.lanes)), align=PACK_ALIGN)
        masks = self.lane_masks(cols, t.vectors)
        one = ir.Constant(self.T, 1.0)
        previous = b.select(first, arg["c"], arg["out"])
        previous_rs = b.select(first, arg["c_rs"], arg["o_rs"])
        previous_cs = b.select(first, arg["c_cs"], self.i64(1))
        previous_scale = self.splat(b.select(first, arg["beta"], one))
        beta_zero = b.fcmp_ordered("==", arg["beta"], ir.Constant(self.T, 0.0))
        read_previous = b.not_(b.and_(first, beta_zero))
        alpha = self.splat(arg["alpha"])
        with self.loop(self.i64(0), rows, self.i64(1), "row") as i:
            row = b.add(row0, i)
            values = [b.fmul(alpha, self.load_vector(
                self.at(tile, b.mul(i, self.i64(t.nr)), self.i64(v * t.lanes)), PACK_ALIGN))
                for v in range(t.vectors)]

            def add_previous(xs):
                prior = self._load_row(self.at(previous, b.mul(row, previous_rs),
                                               b.mul(col0, previous_cs)),
                                       previous_cs, cols, masks)
                return [b.fadd(x, b.fmul(previous_scale, p)) for x, p in zip(xs, prior)]

            values = self.when(read_previous, values, add_previous)
            values = self.when(last, values, lambda xs: self._epilogue(xs, row, col0, cols, masks))
            out_row = self.at(arg["out"], b.mul(row, arg["o_rs"]), col0)
            for v, value in enumerate(values):
                self.masked_store(value, self.at(out_row, self.i64(v * t.lanes)), masks[v])

    def _load_row(self, ptr, stride, cols, masks) -> list:
        """The `cols` elements ptr[j * stride] as tile-row vectors (zero past cols)."""
        b, t = self.b, self.tile

        def contiguous():
            return [self.masked_load(self.at(ptr, self.i64(v * t.lanes)), masks[v])
                    for v in range(t.vectors)]

        def strided():
            scratch = b.bitcast(self.row_buffer, self.P)
            with self.loop(self.i64(0), cols, self.i64(1), "gather") as j:
                value = b.load(self.at(ptr, b.mul(j, stride)), align=self.itemsize)
                b.store(value, self.at(scratch, j), align=self.itemsize)
            zero = ir.Constant(self.V, None)
            return [b.select(masks[v], self.load_vector(
                self.at(scratch, self.i64(v * t.lanes)), PACK_ALIGN), zero)
                for v in range(t.vectors)]

        return self.choose(b.icmp_signed("==", stride, self.i64(1)), contiguous, strided)

    def _epilogue(self, values, row, col0, cols, masks) -> list:
        b, arg, spec = self.b, self.arg, self.spec
        if spec.bias == "col":
            bias = self._load_row(self.at(arg["bias"], b.mul(col0, arg["bias_stride"])),
                                  arg["bias_stride"], cols, masks)
            values = [b.fadd(x, y) for x, y in zip(values, bias)]
        elif spec.bias == "row":
            bias = self.splat(b.load(self.at(arg["bias"], b.mul(row, arg["bias_stride"])),
                                     align=self.itemsize))
            values = [b.fadd(x, bias) for x in values]
        if spec.activation == "relu":
            zero = ir.Constant(self.V, None)
            values = [b.select(b.fcmp_ordered("<", x, zero), zero, x) for x in values]
        elif spec.activation is not None:
            values = [self.activation(b, spec.activation, x) for x in values]
        scale = self.splat(arg["scale"])
        values = [b.fmul(x, scale) for x in values]
        if spec.residual:
            residual = self._load_row(self.at(arg["res"], b.mul(row, arg["r_rs"]),
                                              b.mul(col0, arg["r_cs"])),
                                      arg["r_cs"], cols, masks)
            values = [b.fadd(x, r) for x, r in zip(values, residual)]
        return values


def emit_activation(b: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """One activation from ACTIVATIONS but relu on a float vector, through vmath."""
    from compiler.codegen import vmath

    def const(value: float) -> ir.Constant:
        return ir.Constant(x.type, [value] * x.type.count)

    if name == "tanh":
        return vmath.emit(b, "tanh", x)
    if name == "silu":
        return b.fmul(x, vmath.emit(b, "sigmoid", x))
    if name == "gelu":  # x * (1 + erf(x / sqrt 2)) / 2
        inner = vmath.emit(b, "erf", b.fmul(x, const(0.7071067811865476)))
    else:  # gelu_tanh: x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))) / 2
        cube = b.fmul(b.fmul(x, x), x)
        inner = vmath.emit(b, "tanh", b.fmul(const(0.7978845608028654),
                                             b.fadd(x, b.fmul(const(0.044715), cube))))
    return b.fmul(b.fmul(const(0.5), x), b.fadd(const(1.0), inner))
