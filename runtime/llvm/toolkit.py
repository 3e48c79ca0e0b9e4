"""kiln's one toolkit for building LLVM IR with llvmlite's IRBuilder, in the spirit of
numba's cgutils: free functions over a builder `b`, used by every emitter (pointwise
kernels, vmath, the GEMM, runtime.pool, runtime.fastcall) and written for two targets,
the CPU (vector types, masked loads and stores, loops with a masked tail) and NVPTX
(address spaces, thread and block indices, grid-stride loops).

    types       I1 I8 I32 I64 I8P VOID BFLOAT, vector(t, width), constant(t, value), i64,
                i32
    functions   define(module, name, type) -> (function, builder at its entry)
    intrinsics  intrinsic(b, name, args, ret, overloads): llvm.<name>.<mangled types>,
                declared on first use; mangle(t): f32, v16f32, p1, ...
    target      Target.of(module): from the module's triple, its address spaces, the
                spin-wait hint, NVPTX's thread and block indices and grid stride
    memory      at (GEP), load_vector, store_vector, masked_load, masked_store;
                offsets (operands' element offsets at a linear index over dims)
    lanes       splat, lane_mask, any_lane, lanes_of, pairwise (a tree reduction)
    loops       for_range (its index after the loop is where it stopped), fold_range
                (values carried through phis), vector_loop (whole vectors, unrolled,
                then one masked step), for_trips (a trip count known when building),
                while_loop, claim_loop (indices taken from an atomic counter)
    branches    when, choose (values merged through phis), smin

Pointers are typed (llvmlite's default). Addresses are computed with GEP, never through
integers: LLVM 22 may miscompile ptrtoint/inttoptr arithmetic (shared/NOTES-codegen.md).
A loop's start, stop and step, and `at`'s offsets, may be Python ints (i64 constants).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
I8P = I8.as_pointer()
VOID = ir.VoidType()


class _BFloatType(ir.Type):
    """LLVM's `bfloat`, which llvmlite's IR layer lacks: the element type of the x86
    AVX512-BF16 intrinsics' operands. Values of it are only made by bitcasts (of i16
    words); nothing here converts Python numbers to it."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloatType)

    def __hash__(self) -> int:
        return hash("bfloat")


BFLOAT = _BFloatType()


# types and constants ------------------------------------------------------------------
def vector(elem: ir.Type, width: int | None) -> ir.Type:
    """<width x elem>, or elem itself for width None (scalar code)."""
    return elem if width is None else ir.VectorType(elem, width)


def constant(ty: ir.Type, value) -> ir.Constant:
    """`value` as a constant of `ty`: in every lane of a vector type."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def _value(x) -> ir.Value:
    return i64(x) if isinstance(x, int) else x


# functions and intrinsics -------------------------------------------------------------
def define(module: ir.Module, name: str, fn_type: ir.FunctionType, arg_names=(),
           linkage: str = "", attributes=("nounwind",)) -> tuple:
    """(function, builder at its entry block): a new function `name` in `module`."""
    fn = ir.Function(module, fn_type, name)
    if linkage:
        fn.linkage = linkage
    for attribute in attributes:
        fn.attributes.add(attribute)
    for arg, arg_name in zip(fn.args, arg_names):
        arg.name = arg_name
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def mangle(ty: ir.Type) -> str:
    """A type as LLVM spells it in an overloaded intrinsic's name: f32, f64, i64, v16f32,
    p0 (a pointer in address space 0), p1."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{mangle(ty.element)}"
    if isinstance(ty, ir.PointerType):
        return f"p{ty.addrspace}"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(ty)]


def intrinsic(b: ir.IRBuilder, name: str, args: list, ret: ir.Type = VOID,
              overloads=()) -> ir.Value:
    """A call of `llvm.<name>`, its name followed by the mangled `overloads` as LLVM names
    overloaded intrinsics (llvm.masked.load.v16f32.p0), declared in the builder's module
    on first use as a plain function: llvmlite's declare_intrinsic rejects vector types."""
    full = ".".join(["llvm", name, *map(mangle, overloads)])
    fn = b.module.globals.get(full) or ir.Function(
        b.module, ir.FunctionType(ret, [arg.type for arg in args]), full)
    return b.call(fn, args)


_UNAXED_REGISTERS = frozenset({"laneid", "warpsize"})


@dataclass(frozen=True)
class Target:
    """What the IR differs in between kiln's targets, read from an LLVM triple: a CPU's
    (x86_64-unknown-linux-gnu, ...) or NVPTX's (nvptx64-nvidia-cuda)."""
    triple: str

    @staticmethod
    def of(module: ir.Module) -> Target:
        """The target of `module`'s triple; the process's when the module names none."""
        if module.triple and not module.triple.startswith("unknown"):
            return Target(module.triple)
        import llvmlite.binding as llvm
        return Target(llvm.get_process_triple())

    @property
    def is_nvptx(self) -> bool:
        return self.triple.startswith("nvptx")

    @property
    def global_space(self) -> int:
        """The address space of memory that every thread reads: 1 on NVPTX, 0 on a CPU."""
        return 1 if self.is_nvptx else 0

    @property
    def shared_space(self) -> int:
        """The address space of a block's shared memory: 3 on NVPTX; a CPU has one
        space (a block's shared memory is a plain buffer there)."""
        return 3 if self.is_nvptx else 0

    def pause(self, b: ir.IRBuilder) -> None:
        """A spin-wait hint: x86's pause instruction; nothing on other targets."""
        if self.triple.startswith(("x86_64", "i386", "i686")):
            intrinsic(b, "x86.sse2.pause", [])

    def special_register(self, b: ir.IRBuilder, name: str, axis: str = "x") -> ir.Value:
        """NVPTX's special register `name`, an i32: along `axis`, tid (the thread's index
        in its block), ntid (threads per block), ctaid (the block's index in the grid),
        nctaid (blocks in the grid); with no axis, laneid (the thread's lane in its warp)
        and warpsize."""
        if not self.is_nvptx:
            raise ValueError(f"{self.triple} has no thread or block indices: its kernels "
                             "run counted loops")
        suffix = "" if name in _UNAXED_REGISTERS else f".{axis}"
        return intrinsic(b, f"nvvm.read.ptx.sreg.{name}{suffix}", [], I32)

    def grid_stride(self, b: ir.IRBuilder, axis: str = "x") -> tuple:
        """(start, step), i64: this thread's index in the grid and the grid's thread
        count, so that for_range(b, start, n, step) on every thread covers range(n)
        once."""
        tid, ntid, ctaid, nctaid = (b.zext(self.special_register(b, name, axis), I64)
                                    for name in ("tid", "ntid", "ctaid", "nctaid"))
        return b.add(b.mul(ctaid, ntid), tid), b.mul(ntid, nctaid)


# memory -------------------------------------------------------------------------------
def at(b: ir.IRBuilder, ptr, *offsets) -> ir.Value:
    """ptr + the sum of `offsets` elements, through GEP."""
    index = _value(offsets[0])
    for offset in offsets[1:]:
        index = b.add(index, _value(offset))
    return b.gep(ptr, [index])


def offsets(b: ir.IRBuilder, index, sizes, strides) -> list:
    """Each operand's element offset (i64) at linear `index` over dims of `sizes`, the last
    dim fastest: the sum of coordinate x stride, `strides[j][d]` operand j's along dim d.
    Sizes and strides are ints (compiled in: LLVM folds the divisions by constants, and
    a stride of 0 adds nothing) or i64 values (launch arguments), in any mix."""
    result = [i64(0)] * len(strides)
    rest = index
    for d in reversed(range(len(sizes))):
        coordinate = b.urem(rest, _value(sizes[d])) if d else rest
        if d:
            rest = b.udiv(rest, _value(sizes[d]))
        for j, operand in enumerate(strides):
            if not (isinstance(operand[d], int) and operand[d] == 0):
                result[j] = b.add(result[j], b.mul(coordinate, _value(operand[d])))
    return result


def _vector_pointer(b: ir.IRBuilder, ptr, width: int):
    """An element pointer as a pointer to `width` elements, in its address space."""
    ty = ptr.type
    return b.bitcast(ptr, ir.PointerType(ir.VectorType(ty.pointee, width), ty.addrspace))


def load_vector(b: ir.IRBuilder, ptr, width: int, align: int) -> ir.Value:
    """`width` consecutive elements from the element pointer `ptr`."""
    return b.load(_vector_pointer(b, ptr, width), align=align)


def store_vector(b: ir.IRBuilder, value, ptr, align: int) -> None:
    b.store(value, _vector_pointer(b, ptr, value.type.count), align=align)


def masked_load(b: ir.IRBuilder, ptr, mask, align: int) -> ir.Value:
    """The lanes of `mask` loaded from `ptr` on (the others zero; none read)."""
    vector_ptr = _vector_pointer(b, ptr, mask.type.count)
    ty = vector_ptr.type.pointee
    return intrinsic(b, "masked.load", [vector_ptr, i32(align), mask, ir.Constant(ty, None)],
                     ty, (ty, vector_ptr.type))


def masked_store(b: ir.IRBuilder, value, ptr, mask, align: int) -> None:
    """Store the lanes of `value` that `mask` sets (nothing is written for the others)."""
    vector_ptr = _vector_pointer(b, ptr, mask.type.count)
    intrinsic(b, "masked.store", [value, vector_ptr, i32(align), mask], VOID,
              (value.type, vector_ptr.type))


# lanes --------------------------------------------------------------------------------
def splat(b: ir.IRBuilder, scalar, width: int | None) -> ir.Value:
    """`scalar` in every lane of a vector of `width` (one broadcast instruction:
    insertelement, then a shuffle by zeros); the scalar itself for width None."""
    if width is None:
        return scalar
    ty = ir.VectorType(scalar.type, width)
    first = b.insert_element(ir.Constant(ty, ir.Undefined), scalar, i32(0))
    return b.shuffle_vector(first, ir.Constant(ty, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, width), None))


def lane_mask(b: ir.IRBuilder, count, width: int, first: int = 0) -> ir.Value:
    """The mask of the `width` lanes first, first + 1, ... that are below `count` (an
    integer value of at most 32 bits' magnitude: the elements left). Lanes compare as
    i32: 16 lanes are one AVX-512 compare, where i64 lanes (the pointwise kernels' tails
    before this toolkit) took two."""
    limit = splat(b, count if count.type == I32 else b.trunc(count, I32), width)
    lanes = ir.Constant(ir.VectorType(I32, width), list(range(first, first + width)))
    return b.icmp_signed(">", limit, lanes)


def any_lane(b: ir.IRBuilder, mask) -> ir.Value:
    """Whether any lane of an i1 vector is set (an i1 scalar: itself)."""
    if not isinstance(mask.type, ir.VectorType):
        return mask
    bits = ir.IntType(mask.type.count)
    return b.icmp_unsigned("!=", b.bitcast(mask, bits), ir.Constant(bits, 0))


def lanes_of(b: ir.IRBuilder, vector_value) -> list:
    """The lanes of a vector, as scalars."""
    return [b.extract_element(vector_value, i32(lane))
            for lane in range(vector_value.type.count)]


def vector_of(b: ir.IRBuilder, scalars: list) -> ir.Value:
    """The scalars (of one type) as the lanes of one vector, in order."""
    v = ir.Constant(ir.VectorType(scalars[0].type, len(scalars)), ir.Undefined)
    for lane, x in enumerate(scalars):
        v = b.insert_element(v, x, i32(lane))
    return v


def concatenated(b: ir.IRBuilder, parts: list) -> ir.Value:
    """The vectors `parts` (a power-of-two count, of one type) end to end, as one vector."""
    while len(parts) > 1:
        n = parts[0].type.count
        parts = [b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, 2 * n),
                                                    list(range(2 * n))))
                 for x, y in zip(parts[::2], parts[1::2])]
    return parts[0]


def transposed(b: ir.IRBuilder, rows: list) -> list:
    """The W x W matrix whose row m is the vector rows[m] (W of them, W lanes each, a power
    of two), transposed: vector k holds lane k of every row. log2(W) rounds of two-source
    shuffles, round `bit` swapping that bit of the row number with that bit of the lane
    number (16 x 16 float32: 64 shuffles, 4 a vector)."""
    width, bit = len(rows), 1
    while bit < width:
        low = [k if not k & bit else width + k - bit for k in range(width)]
        high = [k + bit if not k & bit else width + k for k in range(width)]
        swapped = list(rows)
        for a in range(width):
            if not a & bit:
                x, y = rows[a], rows[a | bit]
                swapped[a] = b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, width), low))
                swapped[a | bit] = b.shuffle_vector(x, y, ir.Constant(ir.VectorType(I32, width),
                                                                      high))
        rows, bit = swapped, bit * 2
    return rows


def pairwise(items: list, combine: Callable):
    """combine over `items` (a power-of-two count) as a balanced tree: neighbours first,
    then their results, so a sum's rounding error grows with log2(len(items))."""
    while len(items) > 1:
        items = [combine(x, y) for x, y in zip(items[::2], items[1::2])]
    return items[0]


def pairwise_lanes(b: ir.IRBuilder, vector_value, combine: Callable):
    """pairwise over a vector's lanes (a power-of-two count) with each level one vector
    combine of the even lanes and the odd ones: the same tree of the same pairs, so the
    same result, in log2(W) vector steps instead of W - 1 scalar ones."""
    v, n = vector_value, vector_value.type.count
    while n > 1:
        halves = [b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(
            ir.VectorType(I32, n // 2), list(range(first, n, 2)))) for first in (0, 1)]
        v, n = combine(*halves), n // 2
    return b.extract_element(v, i32(0))


def pairwise_lanes_each(b: ir.IRBuilder, vectors: list, combine: Callable):
    """pairwise_lanes of each of several vectors (a power-of-two count, at most their
    lane count) as one vector of their results, in order. Each level combines the even
    lanes of two vectors with their odd ones (one two-source shuffle each): the same
    pairs as pairwise_lanes takes, so each result is bitwise what it gives, in fewer
    vector steps than reducing the vectors one by one."""
    n, rows = vectors[0].type.count, len(vectors)
    while len(vectors) > 1:  # two vectors' lanes into one: each keeps half its partials
        vectors = [combine(*[b.shuffle_vector(x, y, ir.Constant(
            ir.VectorType(I32, n), list(range(first, 2 * n, 2)))) for first in (0, 1)])
            for x, y in zip(vectors[::2], vectors[1::2])]
    v = vectors[0]
    while n > rows:  # each vector's partials side by side: halve them all at once
        v = combine(*[b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(
            ir.VectorType(I32, n // 2), list(range(first, n, 2)))) for first in (0, 1)])
        n //= 2
    return v


# loops --------------------------------------------------------------------------------
def _blocks(b: ir.IRBuilder, name: str) -> tuple:
    return tuple(b.append_basic_block(f"{name}.{part}") for part in ("head", "body", "done"))


def _open(b: ir.IRBuilder, start, stop, values: list, name: str, span: int = 1) -> tuple:
    """Open a counted loop: its counter and a phi per carried value (from `start` and
    `values` on entry), the builder inside the body, which runs while i + span <= stop;
    (i, phis, head, done). The bound is computed in the head, where LLVM hoists it: so
    the kernels' machine code stayed what it was before this toolkit (with the bound
    before the loop, registers were allocated differently in 71 of 664 kernels)."""
    before = b.block
    head, body, done = _blocks(b, name)
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name=name)
    i.add_incoming(_value(start), before)
    phis = []
    for value in values:
        phi = b.phi(value.type)
        phi.add_incoming(value, before)
        phis.append(phi)
    bound = _value(stop) if span == 1 else b.sub(_value(stop), i64(span - 1))
    b.cbranch(b.icmp_signed("<", i, bound), body, done)
    b.position_at_end(body)
    return i, phis, head, done


def _close(b: ir.IRBuilder, i, step, phis: list, new: list, head, done) -> None:
    """Close a counted loop where its body ended: the next counter and carried values
    back to the head; the builder after the loop."""
    i.add_incoming(b.add(i, _value(step)), b.block)
    for phi, value in zip(phis, new):
        phi.add_incoming(value, b.block)
    b.branch(head)
    b.position_at_end(done)


@contextlib.contextmanager
def for_range(b: ir.IRBuilder, start, stop, step=1, name: str = "i", whole: bool = False):
    """for (i = start; i < stop; i += step) over what the with block emits; yields i.
    `whole` (an int step): only the trips that fit whole, i + step <= stop. After the
    block, i is where the loop stopped: the first index it did not run."""
    i, _, head, done = _open(b, start, stop, [], name, step if whole else 1)
    yield i
    _close(b, i, step, [], [], head, done)


def fold_range(b: ir.IRBuilder, start, stop, step, values: list,
               body: Callable[[ir.Value, list], list], name: str = "i") -> list:
    """for (i = start; i < stop; i += step) values = body(i, values); the values after
    the loop (phis)."""
    i, phis, head, done = _open(b, start, stop, values, name)
    _close(b, i, step, phis, body(i, list(phis)), head, done)
    return phis


def vector_loop(b: ir.IRBuilder, start, stop, width: int, body: Callable,
                unroll: int = 1, numbered: bool = False) -> None:
    """body(i, None) for i = start, start + width, ... while a whole vector fits, with
    `unroll` vectors a trip while they fit (more loads in flight), then body(i, count)
    once for the count < width elements left, if any (for masked loads and stores).
    `numbered`: body also takes the vector's place in its trip (0 to unroll - 1; the
    vectors after the unrolled trips take 0), for accumulators kept in parts."""
    def call(i, count, u):
        return body(i, count, u) if numbered else body(i, count)
    i = start
    if unroll > 1:
        with for_range(b, i, stop, unroll * width, "unrolled", whole=True) as i:
            for u in range(unroll):
                call(b.add(i, i64(u * width)), None, u)
    with for_range(b, i, stop, width, "vectors", whole=True) as i:
        call(i, None, 0)
    with b.if_then(b.icmp_signed("<", i, _value(stop))):
        call(i, b.sub(_value(stop), i), 0)


def for_trips(b: ir.IRBuilder, first: int, trips: int, step: int, body: Callable,
              name: str = "trip") -> None:
    """body(i) for i = first, first + step, ... (`trips` of them, a number known when
    the IR is built): straight-line code for one trip, a loop for more."""
    if trips == 1:
        body(i64(first))
    elif trips > 1:
        with for_range(b, first, first + trips * step, step, name) as i:
            body(i)


@contextlib.contextmanager
def while_loop(b: ir.IRBuilder, condition: Callable[[], ir.Value], name: str = "while"):
    """while (condition()) over what the with block emits: condition() builds its i1
    test in the loop's head, so it runs before every trip."""
    head, body, done = _blocks(b, name)
    b.branch(head)
    b.position_at_end(head)
    b.cbranch(condition(), body, done)
    b.position_at_end(body)
    yield
    b.branch(head)
    b.position_at_end(done)


@contextlib.contextmanager
def claim_loop(b: ir.IRBuilder, counter, count, name: str = "claim"):
    """For every index taken from the i64 at `counter` (an atomic increment, so each
    index goes to one thread) while it is below `count`; yields the index."""
    index = None

    def claim():
        nonlocal index
        index = b.atomic_rmw("add", counter, i64(1), "monotonic")
        return b.icmp_signed("<", index, _value(count))

    with while_loop(b, claim, name):
        yield index


# branches -----------------------------------------------------------------------------
def when(b: ir.IRBuilder, condition, values: list, then: Callable[[list], list]) -> list:
    """then(values) if condition else values, as phis after the branch; a constant
    condition picks at build time (no IR for the branch not taken)."""
    if isinstance(condition, ir.Constant):
        return then(values) if condition.constant else values
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


def choose(b: ir.IRBuilder, condition, if_true: Callable[[], list],
           if_false: Callable[[], list]) -> list:
    """The values of if_true() or if_false(), as phis after the branch; a constant
    condition picks at build time."""
    if isinstance(condition, ir.Constant):
        return if_true() if condition.constant else if_false()
    yes, no, merge = (b.append_basic_block(f"choose.{part}") for part in ("yes", "no", "end"))
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


def equal(b: ir.IRBuilder, x, y) -> ir.Value:
    """x == y for integers or floats, as an i1: a constant when both are constants (so
    that `when` and `choose` on it build one arm), else a comparison."""
    if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
        return ir.Constant(I1, int(x.constant == y.constant))
    if isinstance(x.type, ir.IntType):
        return b.icmp_signed("==", x, y)
    return b.fcmp_ordered("==", x, y)


def smin(b: ir.IRBuilder, x, y) -> ir.Value:
    """The smaller of two signed integers."""
    return b.select(b.icmp_signed("<", x, y), x, y)
