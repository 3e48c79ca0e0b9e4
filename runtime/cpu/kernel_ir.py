"""Elementwise and row-reduction kernels as LLVM functions.

Every kernel has one signature:

    void k(i8** ptrs, i64** row_offsets, i64* inner_strides,
           i64 row_begin, i64 row_end, i64 i_begin, i64 i_end)

Operand j (inputs first, then outputs) has its element (r, i) at
`ptrs[j] + row_offsets[j][r] + i * inner_strides[j]` (in elements); a row kernel whose
reduced dims do not merge into one walks each row as `segments` inner runs, operand j's
run s starting row_offsets[j][s] elements on, its rows' offsets after those
(row_offsets[j][segments + r]). Each operand's
inner stride is specialised at compile time: 1 (contiguous: vector loads), 0 (one value
per row: loaded once, broadcast) or strided (gathered lane by lane). The inner loop runs
W lanes at a time and finishes with one masked step, so no lane reads or writes past
`i_end`. A row kernel (`reduction`) runs its row in passes: each pass accumulates the
reductions whose inputs it can compute (ROW_PARTS vectors a trip, each into its own
partial results), and the elementwise ops between passes run once per row on the
reduced values; a value the last pass would compute again is read back from its output
(RowPasses stash). Rows go GROUP_ROWS at a time, each into its own accumulators, their
final vectors folded together (accumulators.finish_rows). When the reduced dim is the
strided one and the rows are adjacent in memory (a reduction over a leading dim), the
kernel puts W rows in the lanes instead (`_columns`, column_groups vectors of rows at a
time) and walks the reduced dim one element per step.
"""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.cpu import gather as G
from runtime.cpu.accumulators import accumulate, finish_rows, lanes, start
from runtime.cpu.kernel_spec import REDUCE_OPS, STRIDED, KernelSpec, nonpositive_exps
from runtime.cpu import values as V
from runtime.cpu import vmath
from ir import dtypes
from ir.dtypes import DType
from ir.graph import Node, Value
from ir.records import RECORDS
from ir.ops import Op
from runtime.llvm import toolkit as llvm_ir
from runtime.llvm.toolkit import I64

UNROLL = 4  # vectors per trip of an elementwise kernel's main loop
ROW_PARTS = 4  # vectors per trip of a row's loop, each into its own partial results
GROUP_ROWS = 4  # rows a row kernel walks together, each into its own results
GROUP_BYTES = 16 << 10  # a kernel of several passes walks rows together while their
# bytes fit this (in L1, 48 KiB here, from one pass to the next), else one at a time
COLUMN_ACCUMULATORS = {16: 16, 8: 8}  # host f32 lanes -> accumulator vectors a column
# kernel keeps: half the vector registers (32 zmm with AVX-512, 16 ymm with AVX2)


def compute_dtype(node: Node, scalar_values: set) -> DType:
    """The type a node computes in: the promoted input type for comparisons, bool for
    logical_and, else its result type (its record's dtype rule says which)."""
    pointwise = RECORDS[node.op].pointwise
    rule = pointwise.rule if pointwise is not None else None
    if rule == "compare":
        dim, zero, wrapped = [], [], []
        for v in node.input_values():
            (wrapped if v in scalar_values else zero if not v.type.shape else dim).append(
                v.type.dtype)
        return dtypes.result_type(dim, zero, wrapped)
    if rule == "logical":
        return dtypes.bool_
    return node.outputs[0].type.dtype


class _Builder:
    def __init__(self, module: ir.Module, spec: KernelSpec, lanes: int):
        self.spec, self.w = spec, lanes
        fnty = ir.FunctionType(llvm_ir.VOID, [llvm_ir.I8P.as_pointer(),
                                              I64.as_pointer().as_pointer(),
                                              I64.as_pointer()] + [I64] * 4)
        self.fn, self.b = llvm_ir.define(module, spec.name, fnty, attributes=())
        ptrs, offs, strides, self.r0, self.r1, self.i0, self.i1 = self.fn.args
        self.operands = list(spec.inputs) + list(spec.outputs)
        self.ptr, self.off, self.stride = [], [], []
        b, S = self.b, V.Lanes(self.b, None)
        for j, v in enumerate(self.operands):
            raw = b.load(llvm_ir.at(b, ptrs, j))
            self.ptr.append(b.bitcast(raw, S.memory_type(v.type.dtype).as_pointer()))
            self.off.append(b.load(llvm_ir.at(b, offs, j)))
            self.stride.append(b.load(llvm_ir.at(b, strides, j))
                               if spec.strides[j] is STRIDED else None)
        self.scalars = dict(spec.scalars)
        self.nonpositive = nonpositive_exps(spec)
        self.status = G.status_word(b, ptrs, len(self.operands)) if spec.gathers else None

    # memory -----------------------------------------------------------------------------
    def row_base(self, j, r):
        b = self.b
        if self.spec.segments > 1:  # (the segments' offsets come first)
            r = b.add(r, llvm_ir.i64(self.spec.segments))
        return b.gep(self.ptr[j], [b.load(b.gep(self.off[j], [r]))])

    def segment_bases(self, bases, s):
        """The operands' addresses of segment s of the row at `bases`."""
        b = self.b
        return [b.gep(base, [b.load(b.gep(self.off[j], [s]))]) for j, base in enumerate(bases)]

    def _vector_at(self, j, ptr, count=None):
        """W consecutive elements of operand j from `ptr` (masked past `count` lanes),
        still in their memory type."""
        b, w, align = self.b, self.w, self.operands[j].type.dtype.itemsize
        if count is None:
            return llvm_ir.load_vector(b, ptr, w, align)
        return llvm_ir.masked_load(b, ptr, llvm_ir.lane_mask(b, count, w), align)

    def _vector_put(self, j, ptr, mem_value, count=None) -> None:
        """Store W consecutive elements of operand j at `ptr` (only the first `count`)."""
        b, align = self.b, self.operands[j].type.dtype.itemsize
        if count is None:
            llvm_ir.store_vector(b, mem_value, ptr, align)
        else:
            llvm_ir.masked_store(b, mem_value, ptr, llvm_ir.lane_mask(b, count, self.w), align)

    def _splat_first(self, j, ptr):
        """Operand j's element at `ptr`, in every lane."""
        dt = self.operands[j].type.dtype
        return llvm_ir.splat(self.b, V.Lanes(self.b, None).from_memory(self.b.load(ptr), dt),
                             self.w)

    def rows_at(self, j, ptr, count=None):
        """W elements of operand j from `ptr` on, one per row (column mode)."""
        if self.spec.row_strides[j] == 0:
            return self._splat_first(j, ptr)
        dt = self.operands[j].type.dtype
        return V.Lanes(self.b, self.w).from_memory(self._vector_at(j, ptr, count), dt)

    def store_rows(self, j, ptr, value, count=None):
        dt = self.operands[j].type.dtype
        self._vector_put(j, ptr, V.Lanes(self.b, self.w).to_memory(value, dt), count)

    def inner_at(self, j, base, i):
        """The address of operand j's element i along the inner dim, from a row's base."""
        cls = self.spec.strides[j]
        if cls == 0:
            return base
        if cls == 1:
            return self.b.gep(base, [i])
        return self.b.gep(base, [self.b.mul(i, self.stride[j])])

    def load(self, j, base, i, count=None):
        """W elements of operand j at inner index i (count: lanes that exist, for the tail)."""
        b, w = self.b, self.w
        dt = self.operands[j].type.dtype
        cls = self.spec.strides[j]
        if cls == 0:  # one element for the whole row
            return self._splat_first(j, base)
        if cls == 1:
            raw = self._vector_at(j, b.gep(base, [i]), count)
        else:
            raw = ir.Constant(V.Lanes(b, w).memory_type(dt), ir.Undefined)
            last = b.sub(b.add(i, count), llvm_ir.i64(1)) if count is not None else None
            for k in range(w):
                idx = b.add(i, llvm_ir.i64(k))
                if last is not None:  # the tail reads the last element again, never past it
                    idx = llvm_ir.smin(b, idx, last)
                raw = b.insert_element(raw, b.load(b.gep(base, [b.mul(idx, self.stride[j])])),
                                       llvm_ir.i32(k))
        return V.Lanes(b, w).from_memory(raw, dt)

    def store(self, j, base, i, value, count=None):
        b, w = self.b, self.w
        mem_value = V.Lanes(b, w).to_memory(value, self.operands[j].type.dtype)
        if self.spec.strides[j] == 1:
            self._vector_put(j, b.gep(base, [i]), mem_value, count)
            return
        for k in range(w):  # strided: lane by lane, only lanes that exist
            idx = b.add(i, llvm_ir.i64(k))
            lane = b.extract_element(mem_value, llvm_ir.i32(k))
            target = b.gep(base, [b.mul(idx, self.stride[j])])
            if count is None:
                b.store(lane, target)
            else:
                with b.if_then(b.icmp_signed("<", llvm_ir.i64(k), count)):
                    b.store(lane, target)

    # values -----------------------------------------------------------------------------
    def compute(self, node: Node, env: dict, L: V.Lanes):
        if node in self.nonpositive:  # exp(x - max)
            env[node.outputs[0]] = vmath.emit(self.b, "exp_nonpositive", env[node.inputs[0]])
        else:
            emit_node(node, env, L, self.scalars)

    def constants(self, env: dict, L: V.Lanes) -> None:
        for v, value in self.scalars.items():
            env[v] = L.const(value, v.type.dtype)


def emit_node(node: Node, env: dict, L: V.Lanes, scalars: dict) -> None:
    """env[node's result] = its value from env's values of its inputs, in lanes of L
    (scalars at width None, as CUDA kernels compute); `scalars` are the kernel's Python
    numbers (value -> number), made constants in the type they are used in."""
    out_dt = node.outputs[0].type.dtype
    cdt = compute_dtype(node, set(scalars))
    args, in_dts = [], []
    for x in node.input_values():
        if x in scalars:  # a Python number: made in the type it is used in, at full
            at = out_dt if node.op is Op.WHERE else V.register_dtype(cdt)  # precision,
            # as eager does (float32 where a 16-bit float computes in it)
            args.append(L.const(scalars[x], at))
            in_dts.append(at)
        else:
            args.append(env[x])
            in_dts.append(x.type.dtype)
    env[node.outputs[0]] = V.compute(L, node.op, args, in_dts, out_dt, node.attr, cdt)


def build_kernel(module: ir.Module, spec: KernelSpec, host_lanes: int) -> ir.Function:
    builder = _Builder(module, spec, spec.width(host_lanes))
    if spec.kind == "elementwise":
        _elementwise(builder)
    elif spec.row_strides:
        _columns(builder, column_groups(spec, host_lanes))
    else:
        _rows(builder)
    builder.b.ret_void()
    return builder.fn


def _elementwise(k: _Builder) -> None:
    """Row after row, W elements a step. Where an input is read across the inner dim with
    a stride (a transposed one), W rows that are W neighbours in its memory (its row
    offsets consecutive, checked at run time) go together as tiles of W x W: W vector
    loads of it along its rows, transposed in registers (toolkit.transposed), so each
    load and store is a whole vector instead of W scalar loads; the rest go row by row."""
    spec, b = k.spec, k.b
    n_in = len(spec.inputs)
    sources = {g.source for g in spec.gathers}  # read only through their gathers
    gathered = {g.value for g in spec.gathers}

    def per_row_values(bases):
        return {v: V.Lanes(b, None).from_memory(b.load(bases[j]), v.type.dtype)
                for j, v in enumerate(spec.inputs) if spec.strides[j] == 0 and j not in sources}

    def compute_and_store(env, bases, i, count=None):
        L = V.Lanes(b, k.w)
        k.constants(env, L)
        for node in spec.nodes:
            if node.outputs[0] not in gathered:
                k.compute(node, env, L)
        for j, v in enumerate(spec.outputs):
            k.store(n_in + j, bases[n_in + j], i, env[v], count)

    def row(r, start):
        bases = [k.row_base(j, r) for j in range(len(k.operands))]
        for g in spec.gathers:
            if G.per_row(k, g):
                G.move_row_base(k, g, bases)
        per_row = per_row_values(bases)

        def step(i, count=None):
            env = {v: llvm_ir.splat(b, x, k.w) for v, x in per_row.items()}
            for j, v in enumerate(spec.inputs):
                if spec.strides[j] != 0 and j not in sources:
                    env[v] = k.load(j, bases[j], i, count)
            for g in spec.gathers:
                env[g.value] = k.load(g.source, bases[g.source], i, count) if \
                    G.per_row(k, g) else G.load_lanes(k, g, bases, env[spec.inputs[g.index]],
                                                      i, count)
            compute_and_store(env, bases, i, count)
        llvm_ir.vector_loop(b, start, k.i1, k.w, step, unroll=UNROLL)

    def tile(r):
        """Rows r to r + W - 1, whose transposed inputs' rows are neighbours in memory:
        each W x W block of those inputs transposed into a buffer, then the rows computed
        one after the other (a loop, so the body's code is there once, not W times)."""
        here = b.block
        b.position_at_start(k.fn.entry_basic_block)
        buffers = {j: b.alloca(ir.ArrayType(V.Lanes(b, k.w).memory_type(
            spec.inputs[j].type.dtype), k.w)) for j in transposed}
        b.position_at_end(here)
        first = [k.row_base(j, r) for j in range(len(k.operands))]
        with llvm_ir.for_range(b, k.i0, k.i1, k.w, "tile", whole=True) as i:
            for j, buffer in buffers.items():
                across = [k._vector_at(j, k.inner_at(j, first[j], b.add(i, llvm_ir.i64(m))))
                          for m in range(k.w)]
                for q, lanes in enumerate(llvm_ir.transposed(b, across)):
                    b.store(lanes, b.gep(buffer, [llvm_ir.i64(0), llvm_ir.i64(q)]))
            with llvm_ir.for_range(b, llvm_ir.i64(0), llvm_ir.i64(k.w), 1, "tile_row") as q:
                bases = [k.row_base(j, b.add(r, q)) for j in range(len(k.operands))]
                env = {v: llvm_ir.splat(b, x, k.w) for v, x in per_row_values(bases).items()}
                for j, v in enumerate(spec.inputs):
                    if spec.strides[j] == 1:
                        env[v] = k.load(j, bases[j], i)
                    elif j in buffers:
                        env[v] = V.Lanes(b, k.w).from_memory(
                            b.load(b.gep(buffers[j], [llvm_ir.i64(0), q])), v.type.dtype)
                compute_and_store(env, bases, i)
        with b.if_then(b.icmp_signed("<", i, k.i1)), \
                llvm_ir.for_range(b, r, b.add(r, llvm_ir.i64(k.w)), 1, "tail_row") as q:
            row(q, i)  # the last columns, row by row

    def packed(r, n):
        """Rows r to r + W / n - 1, each of n elements, their outputs' rows end to end:
        one vector of their elements (each input's rows loaded n elements each)."""
        group = k.w // n
        rows = [[k.row_base(j, b.add(r, llvm_ir.i64(q))) for j in range(len(k.operands))]
                for q in range(group)]
        env = {}
        for j, v in enumerate(spec.inputs):
            dt = v.type.dtype
            if spec.strides[j] == 0:
                value = llvm_ir.vector_of(b, [b.load(bases[j]) for bases in rows])
                raw = b.shuffle_vector(value, ir.Constant(value.type, ir.Undefined),
                                       ir.Constant(ir.VectorType(llvm_ir.I32, k.w),
                                                   [lane // n for lane in range(k.w)]))
            else:
                align = dt.itemsize
                raw = llvm_ir.concatenated(b, [llvm_ir.load_vector(
                    b, b.gep(bases[j], [k.i0]), n, align) for bases in rows])
            env[v] = V.Lanes(b, k.w).from_memory(raw, dt)
        compute_and_store(env, rows[0], k.i0)

    def packed_rows(start, n):
        """Rows from `start` on, W / n at a time while their outputs' rows lie end to
        end; the row where they stopped."""
        group, before = k.w // n, b.block
        head, check, body, done = (b.append_basic_block(f"packed{n}.{part}")
                                   for part in ("head", "check", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        r = b.phi(I64, name=f"packed{n}")
        r.add_incoming(start, before)
        b.cbranch(b.icmp_signed("<", r, b.sub(k.r1, llvm_ir.i64(group - 1))), check, done)
        b.position_at_end(check)
        b.cbranch(_rows_adjacent(k, range(n_in, len(k.operands)), r, n, group), body, done)
        b.position_at_end(body)
        packed(r, n)
        r.add_incoming(b.add(r, llvm_ir.i64(group)), b.block)
        b.branch(head)
        b.position_at_end(done)
        return r

    r = k.r0
    transposed = [j for j, c in enumerate(spec.strides[:n_in]) if c is STRIDED]
    if not transposed and not spec.gathers and all(c == 1 for c in spec.strides[n_in:]):
        # short rows (of 2, 4, ... W / 2 elements), several to a vector
        n = 1
        while n < k.w // 2:
            n *= 2
            before = b.block
            with b.if_then(b.icmp_signed("==", b.sub(k.i1, k.i0), llvm_ir.i64(n)),
                           likely=False):
                stopped = packed_rows(r, n)
                end = b.block
            start = b.phi(I64)
            start.add_incoming(stopped, end)
            start.add_incoming(r, before)
            r = start
    if transposed and not spec.gathers:
        with llvm_ir.for_range(b, k.r0, k.r1, k.w, "tiles", whole=True) as r:
            neighbours = _rows_adjacent(k, transposed, r)
            with b.if_else(neighbours) as (then, otherwise):
                with then:
                    tile(r)
                with otherwise, llvm_ir.for_range(b, r, b.add(r, llvm_ir.i64(k.w)), 1,
                                                  "row") as q:
                    row(q, k.i0)
    with llvm_ir.for_range(b, r, k.r1, 1, "row") as r:
        row(r, k.i0)


def _rows_adjacent(k: _Builder, operands, r, apart: int = 1, count: int | None = None):
    """Whether rows r to r + count - 1 (W of them by default) of each of `operands`
    start `apart` elements apart."""
    b, count = k.b, count or k.w
    steps = ir.Constant(ir.VectorType(I64, count), [q * apart for q in range(count)])
    together = None
    for j in operands:
        offsets = llvm_ir.load_vector(b, b.gep(k.off[j], [r]), count, 8)
        first = llvm_ir.splat(b, b.extract_element(offsets, llvm_ir.i32(0)), count)
        same = b.icmp_signed("==", offsets, b.add(first, steps))
        bits = ir.IntType(count)
        each = b.icmp_unsigned("==", b.bitcast(same, bits), ir.Constant(bits, -1))
        together = each if together is None else b.and_(together, each)
    return together


def _levels(spec: KernelSpec):
    """Pass numbers: a full-row value's pass, a reduction's accumulating pass, and the
    pass from which a per-row value is available."""
    level: dict[Value, int] = {v: 0 for v in spec.inputs}
    level.update({v: 0 for v, _ in spec.scalars})
    acc_pass: dict[Node, int] = {}
    for node in spec.nodes:
        ins = max((level[v] for v in node.input_values()), default=0)
        if node.op in REDUCE_OPS:
            acc_pass[node] = ins
            level[node.outputs[0]] = ins + 1
        else:
            level[node.outputs[0]] = ins
    return level, acc_pass


class RowPasses:
    """The plan of a row kernel's passes over its rows: pass p accumulates the reductions
    whose inputs it can compute and stores the full-row outputs available by then."""

    def __init__(self, spec: KernelSpec, stash: bool = False):
        self.spec = spec
        self.level, self.acc_pass = _levels(spec)
        self.producer = {n.outputs[0]: n for n in spec.nodes}
        self.full_outputs = [(j, v) for j, v in enumerate(spec.outputs)
                             if v not in spec.per_row]
        self.count = max([self.level[v] for _, v in self.full_outputs] +
                         list(self.acc_pass.values()) + [0]) + 1
        self.stash = self._stash() if stash else None

    def _targets(self, p: int) -> list:
        return [n.inputs[0] for n, q in self.acc_pass.items() if q == p] + \
            [v for _, v in self.full_outputs if self.level[v] == p]

    def _stash(self):
        """(value, output number): a full-row value that an earlier pass computes and the
        last pass would compute again with two or more ops (softmax's exp(x - max)), kept
        in the memory of the one output that the last pass stores, which reads it back
        before writing there; None when there is none."""
        last = self.count - 1
        stores = [(j, v) for j, v in self.full_outputs if self.level[v] == last]
        if last == 0 or len(stores) != 1:
            return None
        j, out = stores[0]
        per_row = self.spec.per_row
        best, best_ops = None, 1
        for v in _needed(self.spec, self.producer, [out], per_row) - {out}:
            ops = len(_needed(self.spec, self.producer, [v], per_row))
            if self.level[v] < last and ops > best_ops and \
                    v.type.dtype is out.type.dtype and \
                    v in _needed(self.spec, self.producer, self._targets(self.level[v]),
                                 per_row):
                best, best_ops = v, ops
        return None if best is None else (best, j)

    def work(self, p: int, known: dict):
        """Pass p's reductions, stores, the full-row values they need, and the values it
        reads back from an output's memory (the stash) instead of computing them."""
        reductions = [n for n, q in self.acc_pass.items() if q == p]
        stores = [(j, v) for j, v in self.full_outputs if self.level[v] == p]
        reloads = []
        if self.stash is not None:
            v, j = self.stash
            if p == self.level[v]:
                stores.append((j, v))
            elif p == self.count - 1:
                reloads.append((j, v))
                known = {**known, v: None}
        needed = _needed(self.spec, self.producer, [n.inputs[0] for n in reductions] +
                         [v for _, v in stores], known)
        return reductions, stores, needed, reloads

    def run(self, k: _Builder, known: dict, L: V.Lanes, run_pass, parts: int = 1) -> None:
        """A row's passes: before each, the per-row values that `known` allows; a pass
        with work gets its reductions' accumulators started (in `parts` parts) and
        run_pass(needed, accs, stores, reloads) emits it, leaving the reduced values in
        `known`; after the last, the per-row values left. `reloads`: (output number,
        value) of values to read from an output's memory (the stash)."""
        self.run_groups(k, [known], L, lambda needed, accs, stores, reloads: run_pass(
            needed, accs[0], stores, reloads), parts)

    def run_groups(self, k: _Builder, known: list, L: V.Lanes, run_pass,
                   parts: int = 1) -> None:
        """`run` for several groups of rows walked together, `known` one dict per group:
        run_pass(needed, accs, stores, reloads) gets one accumulator dict per group."""
        for p in range(self.count):
            _row_scalars(k, self.spec, known, L)
            reductions, stores, needed, reloads = self.work(p, known[0])
            if reductions or stores:
                run_pass(needed, [{n: start(k.b, k.w, n, parts) for n in reductions}
                                  for _ in known], stores, reloads)
        _row_scalars(k, self.spec, known, L)


def _rows(k: _Builder) -> None:
    """Rows GROUP_ROWS at a time, each row into its own accumulators, the rows' final
    vectors folded together (accumulators.finish_rows), so that a short row is not left
    waiting on its own horizontal reduction; then the rows left over one at a time. A
    kernel of several passes groups only rows short enough that the group stays in L1
    from one pass to the next (GROUP_BYTES)."""
    b = k.b
    plan = RowPasses(k.spec, stash=True)
    group = min(GROUP_ROWS, k.w)
    r = k.r0
    if group > 1:
        stop = k.r1
        if plan.count > 1:
            itemsize = max(v.type.dtype.itemsize for v in k.operands)
            length = b.mul(b.sub(k.i1, k.i0), llvm_ir.i64(k.spec.segments))
            short = b.icmp_signed("<", length,
                                  llvm_ir.i64(GROUP_BYTES // (group * itemsize)))
            stop = b.select(short, k.r1, k.r0)
        with llvm_ir.for_range(b, k.r0, stop, group, "row_groups", whole=True) as r:
            _row_group(k, plan, [b.add(r, llvm_ir.i64(g)) for g in range(group)])
    with llvm_ir.for_range(b, r, k.r1, 1, "row") as r:
        _row_group(k, plan, [r])


def _row_group(k: _Builder, plan: RowPasses, rows: list) -> None:
    """Every pass of `rows` (row numbers), a pass walking one row after the other
    (ROW_PARTS vectors a trip, each into its own partial results) and then folding
    their reductions together."""
    spec, b = k.spec, k.b
    n_in = len(spec.inputs)
    S = V.Lanes(b, None)
    bases = [[k.row_base(j, r) for j in range(len(k.operands))] for r in rows]
    known = [{} for _ in rows]  # per-row scalars, a dict per row
    for values, base in zip(known, bases):
        for j, v in enumerate(spec.inputs):
            if v in spec.per_row:
                values[v] = S.from_memory(b.load(base[j]), v.type.dtype)
        k.constants(values, S)

    def one_pass(needed, accs, stores, reloads):
        for g, row in enumerate(bases):  # row after row: the reads stay in memory order
            scaled = _reciprocals(k, spec, needed, known[g])
            if spec.segments == 1:
                run(g, row, scaled, llvm_ir.i64(0), needed, accs, stores, reloads)
                continue
            with llvm_ir.for_range(b, llvm_ir.i64(0), llvm_ir.i64(spec.segments), 1,
                                   "segment") as s:  # (argmax's positions count on)
                run(g, k.segment_bases(row, s), scaled, b.mul(s, b.sub(k.i1, k.i0)),
                    needed, accs, stores, reloads)
        for node in accs[0]:
            results = finish_rows(b, k.w, node, [acc[node] for acc in accs])
            for values, result in zip(known, results):
                values[node.outputs[0]] = result

    def run(g, base, scaled, first, needed, accs, stores, reloads):
        """One inner run of row g's pass, its elements `first` on along the row."""
        def step(i, count, part):
            L = V.Lanes(b, k.w)
            env = {v: llvm_ir.splat(b, x, k.w) for v, x in known[g].items()}
            for j, v in enumerate(spec.inputs):
                if v not in spec.per_row:
                    env[v] = k.load(j, base[j], i, count)
            for j, v in reloads:
                env[v] = k.load(n_in + j, base[n_in + j], i, count)
            for node in spec.nodes:
                if node in scaled:  # a 16-bit quotient rounded as compute() rounds
                    quotient = b.fmul(env[node.inputs[0]], scaled[node])
                    dt = node.outputs[0].type.dtype
                    env[node.outputs[0]] = L.round_half(quotient, dt) \
                        if dt in dtypes.HALF else quotient
                elif node.outputs[0] in needed:
                    k.compute(node, env, L)
            positions = b.add(llvm_ir.splat(b, b.add(first, i), k.w),
                              ir.Constant(ir.VectorType(I64, k.w), list(range(k.w))))
            active = None if count is None else llvm_ir.lane_mask(b, count, k.w)
            for node, acc in accs[g].items():
                accumulate(b, k.w, node, acc, env[node.inputs[0]], positions, active,
                           part)
            for j, v in stores:
                k.store(n_in + j, base[n_in + j], i, env[v], count)
        llvm_ir.vector_loop(b, k.i0, k.i1, k.w, step, unroll=ROW_PARTS, numbered=True)

    plan.run_groups(k, known, S, one_pass, ROW_PARTS)
    for values, base in zip(known, bases):
        for j, v in enumerate(spec.outputs):
            if v in spec.per_row:
                b.store(S.to_memory(values[v], v.type.dtype), base[n_in + j])


def column_groups(spec: KernelSpec, host_lanes: int) -> list[int]:
    """The vectors of rows a column kernel walks together, widest first, then 4, then
    one (and a masked rest): as many as keep the reductions' accumulators (each group's
    own: _accumulator_vectors) in half the registers. 16 vectors of float32 are a
    256-column row of 1 KiB, read whole at each step as a row kernel reads it; 4 at a
    time (a quarter of each row, read four times over) ran a 512x256 sum over dim 0 at
    ~3/4 of the row kernel's speed."""
    vectors = max(1, sum(_accumulator_vectors(n) for n in spec.nodes if n.op in REDUCE_OPS))
    widest = max(1, COLUMN_ACCUMULATORS.get(host_lanes, 4) // vectors)
    return sorted({widest, min(widest, 4)}, reverse=True)


def _accumulator_vectors(node: Node) -> int:
    """The vectors a reduction's accumulator keeps (accumulators.start): a sum its
    partials; a float max or min its NaN flags too; argmax and argmin their int64
    indices too (two vectors' worth of lanes). 16 groups of amax over dim 0 (maxima and
    flags) ran ~8% slower than 4."""
    kind = REDUCE_OPS[node.op]
    if kind.startswith("arg"):
        return 3
    return 2 if kind != "sum" and node.inputs[0].type.dtype.is_floating_point else 1


def _columns(k: _Builder, groups: list[int]) -> None:
    """A row kernel with its rows in the lanes: W adjacent rows at a time (a reduction
    over a leading dim, whose rows are adjacent in memory), walking the reduced dim one
    element per step, so every load is a plain vector and no lanes need folding. Rows
    go groups[0] x W at a time while they fit, then groups[1] x W, ... (column_groups),
    then W at a time: each step reads that many adjacent vectors into as many
    independent accumulators."""
    spec, b = k.spec, k.b
    n_in = len(spec.inputs)
    plan = RowPasses(spec)

    def block(r, count, groups):
        L = V.Lanes(b, k.w)
        first = [k.row_base(j, r) for j in range(len(k.operands))]
        # group g's rows start g x W rows on (rows are adjacent: row stride 1 or 0)
        bases = [[b.gep(base, [llvm_ir.i64(g * k.w * spec.row_strides[j])])
                  for j, base in enumerate(first)] for g in range(groups)]
        counts = [None if count is None else b.sub(count, llvm_ir.i64(g * k.w))
                  for g in range(groups)]
        known = [{v: k.rows_at(j, bases[g][j], counts[g]) for j, v in enumerate(spec.inputs)
                  if v in spec.per_row} for g in range(groups)]
        for values in known:
            k.constants(values, L)

        def one_pass(needed, accs, stores, reloads):
            with llvm_ir.for_range(b, k.i0, k.i1, 1, "reduced") as i:
                position = llvm_ir.splat(b, i, k.w)  # every lane (row) is at i
                for g in range(groups):
                    env = dict(known[g])
                    for j, v in enumerate(spec.inputs):
                        if v not in spec.per_row:
                            env[v] = k.rows_at(j, k.inner_at(j, bases[g][j], i), counts[g])
                    for node in spec.nodes:
                        if node.outputs[0] in needed:
                            k.compute(node, env, L)
                    for node, acc in accs[g].items():
                        accumulate(b, k.w, node, acc, env[node.inputs[0]], position)
                    for j, v in stores:
                        k.store_rows(n_in + j, k.inner_at(n_in + j, bases[g][n_in + j], i),
                                     env[v], counts[g])
            for g in range(groups):
                for node, acc in accs[g].items():
                    known[g][node.outputs[0]] = lanes(b, node, acc)

        plan.run_groups(k, known, L, one_pass)
        for g in range(groups):
            for j, v in enumerate(spec.outputs):
                if v in spec.per_row:
                    k.store_rows(n_in + j, bases[g][n_in + j], known[g][v], counts[g])
    r = k.r0
    for count in groups:
        if count > 1:
            with llvm_ir.for_range(b, r, k.r1, count * k.w, f"blocks{count}",
                                   whole=True) as r:
                block(r, None, count)
    llvm_ir.vector_loop(b, r, k.r1, k.w, lambda r, count: block(r, count, 1))


def _reciprocals(k: _Builder, spec: KernelSpec, needed: set, known: dict) -> dict:
    """{node: W lanes of 1 / d} for the needed float divides of a full-row value by a
    per-row one d (softmax's e / sum): one divide a row, then a multiply per element
    (as PyTorch's softmax does; the quotient may differ by one rounding)."""
    b, out = k.b, {}
    for node in spec.nodes:
        if node.op is Op.DIV and node.outputs[0] in needed and node.inputs[1] in known and \
                node.inputs[0] not in known:
            dt = node.outputs[0].type.dtype
            if dt.is_floating_point and all(v.type.dtype is dt for v in node.inputs):
                S = V.Lanes(b, None)
                out[node] = llvm_ir.splat(b, b.fdiv(S.const(1.0, dt), known[node.inputs[1]]),
                                          k.w)
    return out


def _row_scalars(k, spec, known: list, L: V.Lanes) -> None:
    """Per-row elementwise nodes whose inputs are all known now, into each group's dict
    in `known`. Groups of one row each (scalars) are computed side by side, as one
    vector of their values (log_softmax's log of a group's rows is one vector log, not a scalar
    log a row; the ops and vmath give each lane what they give a scalar)."""
    together = L.width is None and len(known) > 1
    vectors = {}  # value -> the rows' values of it, as one vector
    for node in spec.nodes:
        v = node.outputs[0]
        if v not in spec.per_row or v in known[0] or node.op in REDUCE_OPS or \
                not all(x in known[0] for x in node.input_values()):
            continue
        if not together:
            for values in known:
                k.compute(node, values, L)
            continue
        for x in node.input_values():
            if x not in vectors and x not in k.scalars:
                vectors[x] = llvm_ir.vector_of(k.b, [values[x] for values in known])
        k.compute(node, vectors, V.Lanes(k.b, len(known)))
        for values, x in zip(known, llvm_ir.lanes_of(k.b, vectors[v])):
            values[v] = x


def _needed(spec, producer, targets, known) -> set:
    need, stack = set(), list(targets)
    while stack:
        v = stack.pop()
        if v in need or v in known or v not in producer:
            continue
        need.add(v)
        stack.extend(producer[v].input_values())
    return need
