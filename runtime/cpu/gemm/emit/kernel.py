"""LLVM IR for kiln's GEMM: the MR x NR register micro-kernel and the macro-kernel loops
around it (Goto/BLIS). The tile store with its fused epilogue is in store.py,
packing in pack.py, the tile's types in tools.py; loops, vector memory and intrinsics
come from runtime/llvm/toolkit.py.

Each (dtype, tile, epilogue) has three exported functions, each taking a record of its
arguments and a worker index (runtime.pool's items), built in one module each. `<name>_packed` and
`<name>_direct` take `KERNEL_ARGS`: the first runs the whole blocked
loop nest for its sub-problem (jc over N by NC -> pc over K by KC, pack B -> ic over M by
MC, pack A -> jr by NR -> ir by MR -> micro-kernel) in one native call; the second reads
A and B in place (B with unit column stride) for problems too small for packing to pay.
Threads that split M share one packing of B, made (in column ranges, by any threads) by
`<name>_pack_b`: the packed kernel with `b_prepacked` set reads it instead of packing.

Matrices are element pointers plus row and column strides in elements, so transposes
and strided numpy views need no copies; `out` has unit column stride. The vector axis
of the tile runs along N: packed B rows are loaded as vectors, A elements broadcast, and
the N tail is handled with masked loads and stores. Rows past M are zero in packed A
(read in place, the last row is read again); they are never stored.

The tile store computes, per element, `alpha * acc + beta * C` on the first K block
(`C` is not read when beta == 0, as in BLAS) and `alpha * acc + out` on later ones; on
the last K block it then applies the epilogue:
`out = residual + scale * act(x + bias)`. A tile of 16-bit operands given `rounded`
writes that last block's result there, rounded to the operands' type, instead of to out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from ir.records import activations
from runtime.cpu.gemm import HALF_OPERANDS
from runtime.cpu.gemm.emit.tools import I16, PACK_ALIGN, Emitter
from runtime.cpu.gemm.emit.pack import Packing
from runtime.cpu.gemm.emit.store import TileStore
from runtime.llvm.toolkit import (I1, I8P, I64, VOID, at, define, fold_range, for_range,
                                  i32, i64, intrinsic, load_vector, masked_load, smin)

ROWS_FIRST_DEPTH = 128  # K blocks shallower than this store their tiles row by row

# (name, kind): kind "i" is i64, "f" the element type, "p" an element pointer, "s" a
# pointer to an element of A or B (of the tile's operand type), "h" a pointer to 16-bit
# words: `rounded`, where a tile of 16-bit operands writes its result rounded to their
# type on the last K block (laid out as out, with out's row stride), or null.
KERNEL_ARGS = (
    ("m", "i"), ("n", "i"), ("k", "i"),
    ("a", "s"), ("a_rs", "i"), ("a_cs", "i"),
    ("b", "s"), ("b_rs", "i"), ("b_cs", "i"),
    ("c", "p"), ("c_rs", "i"), ("c_cs", "i"),
    ("out", "p"), ("o_rs", "i"),
    ("alpha", "f"), ("beta", "f"), ("scale", "f"),
    ("bias", "p"), ("bias_stride", "i"),
    ("res", "p"), ("r_rs", "i"), ("r_cs", "i"),
    ("a_in_place", "i"), ("rounded", "h"),
    ("pack_a", "p"), ("pack_b", "p"), ("b_prepacked", "i"),
    ("mc", "i"), ("kc", "i"), ("nc", "i"),
)
# <name>_pack_b(b, b_rs, b_cs, k, n, dst): B (k x n) as NR-column panels of all k rows,
# the layout the packed kernel reads with b_prepacked set.
PACK_B_ARGS = Packing.ARGS


@dataclass(frozen=True)
class Tile:
    """The register tile: `mr` rows by `nr` columns of accumulators, `nr` a multiple of
    `lanes` (elements per vector register); the k loop is unrolled `unroll` times.
    `operands`: the element type of A and B in memory (default `dtype`); a float32 tile
    also takes bfloat16 or float16 operands, converted to float32 while packing (the
    packed panels, the micro-kernel and the store are those of float32 operands; A is
    always packed, and such a tile has no direct entry). `dot`: a bfloat16 tile that
    keeps its operands in 16 bits and multiplies them with AVX512-BF16's vdpbf16ps
    (each instruction sums the products of a pair of K steps into each float32 lane):
    packing puts each pair of K steps side by side (pack.py), the micro-kernel takes a
    pair per step (`step`), K blocks are even."""
    dtype: str
    mr: int
    nr: int
    lanes: int
    unroll: int = 4
    operands: str | None = None
    dot: bool = False

    def __post_init__(self):
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"GEMM tiles are float32 or float64, not {self.dtype}")
        if self.operands is None:
            object.__setattr__(self, "operands", self.dtype)
        if self.operands not in (self.dtype, *HALF_OPERANDS.get(self.dtype, ())):
            raise ValueError(f"a {self.dtype} tile cannot take {self.operands} operands")
        if self.nr % self.lanes or self.unroll & (self.unroll - 1):
            raise ValueError(f"bad tile {self}: nr must be a multiple of lanes and "
                             "unroll a power of two")
        if self.dot and (self.operands, self.lanes) != ("bfloat16", 16):
            raise ValueError(f"a dot-product tile (vdpbf16ps) takes bfloat16 operands in "
                             f"16 float32 lanes, not {self.operands} in {self.lanes}")

    @property
    def vectors(self) -> int:
        return self.nr // self.lanes

    @property
    def step(self) -> int:
        """Elements of K per step of the micro-kernel: 2 for a dot-product tile (each
        step sums a pair), else 1."""
        return 2 if self.dot else 1


@dataclass(frozen=True)
class EpilogueSpec:
    """The compile-time shape of an epilogue: bias indexed by row ("row") or by column
    ("col") or none, an activation (ir.records.activations) or none, and whether a residual
    matrix is added. Scale is a runtime argument and always applied."""
    bias: str | None = None
    activation: str | None = None
    residual: bool = False

    def __post_init__(self):
        if self.bias not in (None, "row", "col"):
            raise ValueError(f"bias must be None, 'row' or 'col', not {self.bias!r}")
        if self.activation is not None and self.activation not in activations():
            raise ValueError(f"unknown activation {self.activation!r}; "
                             f"expected one of {tuple(activations())}")

    @property
    def tag(self) -> str:
        return "_".join([f"b{self.bias or 0}", self.activation or "id",
                         "r" if self.residual else "nor"])


# The packed entry comes in variants fixed at compile time to how A is read (in place or
# packed) and to whether K blocks are shallow (< ROWS_FIRST_DEPTH): None leaves the
# choice to each call (A) or block (depth), as "packed", which holds all four copies of
# the micro-kernel and its store, does. A caller asks for the variant its calls need.
PACKED = {f"packed{a_name}{depth_name}": (a_in_place, shallow)
          for a_in_place, a_name in ((None, ""), (True, "_a_in_place"), (False, "_a_packed"))
          for shallow, depth_name in ((None, ""), (True, "_shallow"), (False, "_deep"))}
ENTRIES = (*PACKED, "direct", "pack_b")


def packed_entry(a_in_place: set, shallow: set) -> str:
    """The packed variant for calls that read A in place or not (`a_in_place`, the
    values met) and run K blocks shallow or not (`shallow`)."""
    def fixed(values: set):
        return next(iter(values)) if len(values) == 1 else None
    wanted = (fixed(a_in_place), fixed(shallow))
    return next(name for name, variant in PACKED.items() if variant == wanted)


def build_module(module: ir.Module, name: str, tile: Tile, spec: EpilogueSpec,
                 activation: Callable | None = None,
                 entries: tuple = ("packed", "direct", "pack_b")) -> None:
    """Add the `entries` (`<name>_<entry>` for each of ENTRIES asked for; by default
    the general packed entry, direct and pack_b) to `module`,
    each an item for runtime.pool (see `export_item`), with the internal functions they
    call. `activation(builder, name, x)` emits an activation on a vector (needed for any
    activation but relu). One entry per module lets each be compiled when first used: a
    process multiplying small matrices builds only `direct`, one whose A is contiguous
    and K below ROWS_FIRST_DEPTH only `packed_a_in_place_shallow` (a quarter of
    `packed`)."""
    packs = [entry for entry in entries if entry in PACKED]
    if packs or "pack_b" in entries:
        pack_b = Packing(module, tile).pack_b(f"{name}_pack_b_panels")
    if packs:
        pack_a = Packing(module, tile).pack_a(f"{name}_pack_a")
    for entry in packs:
        packed = _Gemm(module, f"{name}_{entry}_body", tile, spec, activation)
        packed.packed(pack_a, pack_b, *PACKED[entry])
        export_item(module, f"{name}_{entry}", tile, packed.fn, KERNEL_ARGS,
                    ("pack_a", "pack_b"))
    if "direct" in entries:
        if tile.operands != tile.dtype:
            raise ValueError(f"a tile of {tile.operands} operands has no direct entry: "
                             "its operands are read only by packing")
        direct = _Gemm(module, f"{name}_direct_body", tile, spec, activation)
        direct.direct()
        export_item(module, f"{name}_direct", tile, direct.fn, KERNEL_ARGS)
    if "pack_b" in entries:
        export_item(module, f"{name}_pack_b", tile, pack_b, PACK_B_ARGS)


def export_item(module: ir.Module, name: str, tile: Tile, target: ir.Function,
                args: tuple, per_worker: tuple = (), wanted: tuple | None = None) -> None:
    """`name(record, worker)`, runtime.pool's item signature, exported: calls `target`
    with its `args` read from the record, one 8-byte slot each in order (integers and
    pointers as i64, scalars as double). The slots named in `per_worker` hold the
    address of a table of pointers indexed by worker (each thread's own packing
    buffers). `wanted`: the names of the args `target` takes, in its order (default:
    all of them). Exported functions are preemptible, and a call to one from the module
    goes through the GOT: only runtime.pool calls these, the module only its internal
    functions."""
    types = Emitter(module, tile)
    fn, b = define(module, name, ir.FunctionType(VOID, [I8P, I64]))
    record, worker = fn.args
    slots = b.bitcast(record, I64.as_pointer())
    values = {}
    for index, (arg_name, kind) in enumerate(args):
        if wanted is not None and arg_name not in wanted:
            continue
        slot = at(b, slots, index)
        if kind == "f":
            value = b.load(b.bitcast(slot, ir.DoubleType().as_pointer()))
            values[arg_name] = value if types.T == value.type else b.fptrunc(value, types.T)
            continue
        value = b.load(slot)
        if arg_name in per_worker:
            value = b.load(b.gep(b.inttoptr(value, I64.as_pointer()), [worker]))
        pointer = {"p": types.P, "s": types.SP, "h": I16.as_pointer()}.get(kind)
        values[arg_name] = value if pointer is None else b.inttoptr(value, pointer)
    b.call(target, [values[arg_name] for arg_name in (wanted or values)])
    b.ret_void()


class _Gemm(TileStore):
    """One exported GEMM function: the loop nest, the micro-kernel and the tile store."""

    def __init__(self, module, name, tile, spec, activation):
        super().__init__(module, tile)
        self.spec, self.activation = spec, activation
        self.fn = self.define(name, KERNEL_ARGS, linkage="internal")
        self.arg = {arg_name: arg for arg, (arg_name, _) in zip(self.fn.args, KERNEL_ARGS)}
        size = tile.mr * tile.nr
        self.tile_buffer = self.b.alloca(ir.ArrayType(self.T, size), name="tile")
        self.tile_buffer.align = PACK_ALIGN
        self.row_buffer = self.b.alloca(ir.ArrayType(self.T, tile.nr), name="row")
        self.row_buffer.align = PACK_ALIGN

    def packed(self, pack_a: ir.Function, pack_b: ir.Function, in_place: bool | None = None,
               shallow: bool | None = None) -> None:
        """The blocked loop nest. B is always packed; A is packed unless `a_in_place`
        is set and its rows are contiguous (unit column stride): then the micro-kernel
        broadcasts from A in place, as packing would only copy rows that are already
        streams (the caller decides: rows a multiple of 2 KiB apart crowd L1 sets).
        `in_place` and `shallow` not None: the kernel has only that way of reading A,
        that order of tiles (see _macro_kernel), for callers whose calls all need it."""
        if self.tile.operands != self.tile.dtype:
            in_place = False  # A is widened as it is packed
        b, arg = self.b, self.arg
        m, n, k, zero = arg["m"], arg["n"], arg["k"], i64(0)
        a_in_place = b.and_(b.icmp_signed("==", arg["a_cs"], i64(1)),
                            b.icmp_signed("!=", arg["a_in_place"], i64(0)))
        prepacked = b.icmp_signed("!=", arg["b_prepacked"], zero)
        kc = arg["kc"]
        if self.tile.dot:  # K blocks of whole pairs (kc rounded up to even)
            kc = b.and_(b.add(kc, i64(1)), i64(-2))
        with for_range(b, zero, n, arg["nc"], "jc") as jc:
            n_block = smin(b, b.sub(n, jc), arg["nc"])
            with for_range(b, zero, k, kc, "pc") as pc:
                k_block = smin(b, b.sub(k, pc), kc)
                with b.if_then(b.not_(prepacked)):
                    b.call(pack_b, [at(b, arg["b"], b.mul(pc, arg["b_rs"]),
                                       b.mul(jc, arg["b_cs"])),
                                    arg["b_rs"], arg["b_cs"], k_block, n_block, arg["pack_b"]])
                # Prepacked panels hold all of K: block pc starts pc rows in, and panels
                # are k (not k_block) rows apart (rows of K steps: pairs, in a dot tile).
                b_block = b.select(prepacked, at(b, arg["pack_b"], b.mul(jc, self.steps(k)),
                                                 b.mul(self.steps(pc), i64(self.tile.nr))),
                                   arg["pack_b"])
                panel_stride = b.select(prepacked, self.steps(k), self.steps(k_block))
                first = b.icmp_signed("==", pc, zero)
                last = b.icmp_signed("==", b.add(pc, k_block), k)
                mc = self._balanced_mc(m, arg["mc"])
                with for_range(b, zero, m, mc, "ic") as ic:
                    m_block = smin(b, b.sub(m, ic), mc)
                    block = (ic, jc, pc, m_block, n_block, k_block, first, last, b_block,
                             panel_stride)
                    if in_place is None:
                        with b.if_else(a_in_place) as (reads_in_place, packs):
                            with reads_in_place:
                                self._macro_kernel(block, False, shallow)
                            with packs:
                                self._pack_a_block(pack_a, block, shallow)
                    elif in_place:
                        self._macro_kernel(block, False, shallow)
                    else:
                        self._pack_a_block(pack_a, block, shallow)
        b.ret_void()

    def _pack_a_block(self, pack_a: ir.Function, block, shallow: bool | None) -> None:
        b, arg = self.b, self.arg
        ic, pc, m_block, k_block = block[0], block[2], block[3], block[5]
        b.call(pack_a, [at(b, arg["a"], b.mul(ic, arg["a_rs"]), b.mul(pc, arg["a_cs"])),
                        arg["a_rs"], arg["a_cs"], m_block, k_block, arg["pack_a"]])
        self._macro_kernel(block, True, shallow)

    def _balanced_mc(self, m, mc):
        """MC shrunk so that M splits into equal blocks of whole tiles (300 rows as 156
        + 144, not 168 + 132): no thin last block with little reuse of each B panel."""
        b, mr = self.b, i64(self.tile.mr)
        blocks = b.sdiv(b.add(m, b.sub(mc, i64(1))), mc)
        rows = b.sdiv(b.add(m, b.sub(blocks, i64(1))), blocks)
        return b.mul(b.sdiv(b.add(rows, b.sub(mr, i64(1))), mr), mr)

    def _macro_kernel(self, block, packed_a: bool, shallow: bool | None = None):
        """The tiles of one block, A from its packed buffer or in place (rows past M
        re-read the last row; they are never stored). Column panels outside, row tiles
        inside (each B micro-panel stays in L1 while A's block streams from L2), except
        for shallow blocks (k_block < ROWS_FIRST_DEPTH), where storing the tiles costs
        more than their arithmetic: there row tiles go outside, so that the stores run
        along rows of C instead of down a column of tiles in as many pages. `shallow`
        not None: the blocks are known to be shallow (True) or deep, and only that
        order is generated."""
        if shallow is not None:
            self._tiles(block, packed_a, rows_outside=shallow)
            return
        k_block = block[5]
        shallow = self.b.icmp_signed("<", k_block, i64(ROWS_FIRST_DEPTH))
        with self.b.if_else(shallow) as (rows_first, columns_first):
            with rows_first:
                self._tiles(block, packed_a, rows_outside=True)
            with columns_first:
                self._tiles(block, packed_a, rows_outside=False)

    def _tiles(self, block, packed_a: bool, rows_outside: bool):
        """jr over the packed B block by NR and ir over the A block by MR, in either
        nesting: micro-kernel and tile store."""
        ic, jc, pc, m_block, n_block, k_block, first, last, b_block, panel_stride = block
        b, t, arg, zero = self.b, self.tile, self.arg, i64(0)
        loops = [(n_block, t.nr, "jr"), (m_block, t.mr, "ir")]
        if rows_outside:
            loops.reverse()
        with for_range(b, zero, loops[0][0], loops[0][1], loops[0][2]) as outer:
            with for_range(b, zero, loops[1][0], loops[1][1], loops[1][2]) as inner:
                jr, ir_ = (inner, outer) if rows_outside else (outer, inner)
                cols = smin(b, b.sub(n_block, jr), i64(t.nr))
                panel_b = at(b, b_block, b.mul(jr, panel_stride))
                rows = smin(b, b.sub(m_block, ir_), i64(t.mr))
                if packed_a:
                    panel_a = at(b, arg["pack_a"], b.mul(ir_, self.steps(k_block)))

                    def load_a(kk, i):
                        return b.load(at(b, panel_a, b.mul(kk, i64(t.mr)), i64(i)),
                                      align=self.itemsize)
                else:
                    row0 = b.add(ic, ir_)
                    last_row = b.add(row0, b.sub(rows, i64(1)))
                    a_block = at(b, arg["a"], pc)
                    offsets = [b.mul(smin(b, b.add(row0, i64(i)), last_row), arg["a_rs"])
                               for i in range(t.mr)]

                    def load_a(kk, i):
                        return b.load(at(b, a_block, offsets[i], kk), align=self.itemsize)

                def load_b(kk, v):
                    return load_vector(b, at(b, panel_b, b.mul(kk, i64(t.nr)), v * t.lanes),
                                       t.lanes, PACK_ALIGN)

                self._prefetch_c(b.add(ic, ir_), b.add(jc, jr), rows)
                accs = self._micro_kernel(self.steps(k_block), load_a, load_b)
                self.store_tile(accs, b.add(ic, ir_), b.add(jc, jr), rows, cols, first, last)

    def _prefetch_c(self, i0, j0, rows) -> None:
        """Prefetch (for writing, into L1) the tile of C at (i0, j0) that the store after
        the micro-kernel reads or writes, so the lines arrive while the micro-kernel runs:
        +3-5% at 1536 and 2048 float32 on one and two threads (measured against the same
        kernel without it; no difference at 512-1024). Rows past the tile's `rows` fetch
        its last row again. The packed panels of A and B are sequential streams that the
        hardware prefetches by itself."""
        b, t, arg = self.b, self.tile, self.arg
        last_row = b.add(i0, b.sub(rows, i64(1)))
        for i in range(t.mr):
            row = smin(b, b.add(i0, i64(i)), last_row)
            start = at(b, arg["out"], b.mul(row, arg["o_rs"]), j0)
            for offset in range(0, t.nr * self.itemsize, 64):
                ptr = at(b, start, i64(offset // self.itemsize))
                intrinsic(b, "prefetch", [b.bitcast(ptr, I8P), i32(1), i32(3), i32(1)],
                          VOID, (I8P,))

    def direct(self) -> None:
        """Tile by tile over C, A and B read in place (rows past M re-read the last row,
        B's N tail through masked loads), all of K in one pass."""
        b, arg, t = self.b, self.arg, self.tile
        m, n, k, zero = arg["m"], arg["n"], arg["k"], i64(0)
        true = ir.Constant(I1, 1)
        with for_range(b, zero, m, t.mr, "i0") as i0:
            rows = smin(b, b.sub(m, i0), i64(t.mr))
            last_row = b.add(i0, b.sub(rows, i64(1)))
            row_offsets = [b.mul(smin(b, b.add(i0, i64(i)), last_row), arg["a_rs"])
                           for i in range(t.mr)]
            with for_range(b, zero, n, t.nr, "j0") as j0:
                cols = smin(b, b.sub(n, j0), i64(t.nr))
                masks = self.lane_masks(cols, t.vectors)

                def load_a(kk, i):
                    return b.load(at(b, arg["a"], row_offsets[i], b.mul(kk, arg["a_cs"])),
                                  align=self.itemsize)

                def load_b(kk, v):
                    return masked_load(b, at(b, arg["b"], b.mul(kk, arg["b_rs"]), j0,
                                             i64(v * t.lanes)), masks[v], self.itemsize)

                accs = self._micro_kernel(k, load_a, load_b)
                self.store_tile(accs, i0, j0, rows, cols, true, true)
        b.ret_void()

    def steps(self, depth):
        """The micro-kernel's steps over `depth` elements of K (Tile.step): pairs, the
        last one padded, in a dot-product tile."""
        if not self.tile.dot:
            return depth
        return self.b.ashr(self.b.add(depth, i64(1)), i64(1))

    def _micro_kernel(self, depth, load_a, load_b) -> list:
        """`depth` steps (rank-1 updates, or rank-2 in a dot tile) of MR x NR
        accumulators (MR * vectors registers), the k loop unrolled `unroll` times plus a
        remainder loop."""
        zeros = [ir.Constant(self.V, None)] * (self.tile.mr * self.tile.vectors)
        unroll = self.tile.unroll
        main_end = self.b.and_(depth, i64(-unroll))
        accs = self._k_loop(i64(0), main_end, unroll, zeros, load_a, load_b)
        if unroll > 1:
            accs = self._k_loop(main_end, depth, 1, accs, load_a, load_b)
        return accs

    def _k_loop(self, start, stop, step, accs, load_a, load_b) -> list:
        t = self.tile

        def steps(kk, values):
            ks = [self.b.add(kk, i64(u)) if u else kk for u in range(step)]
            return self.rank1_updates(values, ks, t.mr, t.vectors, load_a, load_b)

        return fold_range(self.b, start, stop, step, accs, steps, f"k{step}")
