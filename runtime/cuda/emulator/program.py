"""An llvmlite kernel function translated once into Python closures, so that one emulated
thread runs at Python speed with no per-instruction dispatch on opcodes.

Every SSA value gets a slot in a thread's register list (a Python list): arguments,
instructions and thread indices, and constants, whose values are filled in once into the
template that each thread's list copies. An instruction becomes a `step(r)` closure that
reads its operands' slots and writes its own (`r[d] = fn(r[a], r[b])`); casts that change
nothing (zext, pointer casts, fpext) and the index intrinsics take no step: their value
is their operand's slot. A basic block is its steps cut into segments at the warp and
block collectives (barriers, shuffles, votes), and a `leave(r)` closure that moves the
successor's phi values (all read, then all written) and returns the next block.
`Program.thread(r)` is a generator: it yields (collective, this thread's contribution) at
each collective and receives its result, so the scheduler can run a block's threads
phase by phase.
"""
from __future__ import annotations

import llvmlite.ir as ir
from llvmlite.ir import instructions

from runtime.cuda.emulator import collectives, operations
from runtime.cuda.emulator.memory import ADDRESS, Memory
from runtime.cuda.emulator.values import (EmulationError, constant_value, field_offsets,
                                          signed, size_of)

SPECIAL = ("scratch",) + tuple(f"{name}.{axis}" for name in ("tid", "ntid", "ctaid", "nctaid")
                               for axis in "xyz") + ("warpsize", "laneid")
_SREG = "llvm.nvvm.read.ptx.sreg."
_NO_OPS = ("llvm.assume", "llvm.lifetime.", "llvm.dbg.", "llvm.prefetch",
           "llvm.experimental.noalias", "llvm.nvvm.membar", "llvm.nvvm.fence")


class Block:
    __slots__ = ("name", "segments", "leave")


class Program:
    """One kernel, translated: its blocks, register template, parameters' and globals'
    slots, and the instruction each step came from (for error messages)."""

    def __init__(self, function: ir.Function):
        self.function, self.name = function, function.name
        self.memory = Memory()
        self.slots = {name: index for index, name in enumerate(SPECIAL)}
        self.template = [0] * len(SPECIAL)
        self.constants, self.aliases, self.globals = {}, {}, {}
        self.origin = {}  # step or leave closure -> its instruction
        self.params = [self.slot(arg) for arg in function.args]
        self.blocks = {block: Block() for block in function.blocks}
        for block in function.blocks:
            for instr in block.instructions:
                alias = self._alias(instr)
                if alias is not None:
                    self.aliases[instr] = alias
        for block in function.blocks:
            self._translate(block)
        self.entry = self.blocks[function.blocks[0]]

    def thread(self, r: list):
        """Run one thread on its registers `r`: a generator that yields (collective,
        contribution) at each collective and takes the collective's result back."""
        block = self.entry
        while block is not None:
            for steps, collective in block.segments:
                for step in steps:
                    step(r)
                if collective is not None:
                    r[collective.dest] = yield collective, collective.payload(r)
            block = block.leave(r)

    # slots ----------------------------------------------------------------------------
    def slot(self, value) -> int:
        """The register slot holding `value`."""
        key = value
        if isinstance(value, ir.Constant):
            key = ("constant", str(value.type), value.get_reference())
        elif value in self.aliases:
            alias = self.aliases[value]
            return self.slots[alias] if isinstance(alias, str) else self.slot(alias)
        if key not in self.slots:
            self.slots[key] = len(self.template)
            self.template.append(None)
            if isinstance(value, ir.Constant):
                self.template[-1] = constant_value(value)
            elif isinstance(value, ir.GlobalVariable):
                self.globals[value] = self.slots[key]
            elif isinstance(value, ir.Function):
                raise EmulationError(f"kernel {self.name!r}: the function @{value.name} "
                                     "is used as a value; the emulator only calls "
                                     "intrinsics")
        return self.slots[key]

    def _alias(self, instr):
        """The value (or special register name) an instruction merely passes on."""
        if isinstance(instr, instructions.CastInstr) and operations.cast(
                instr.opname, instr.operands[0].type, instr.type) is None:
            return instr.operands[0]
        if isinstance(instr, instructions.CallInstr) and instr.callee.name.startswith(_SREG):
            name = instr.callee.name[len(_SREG):]
            if name not in self.slots:
                raise self.error(instr, f"unknown special register {name}")
            return name
        return None

    def error(self, instr, message: str) -> EmulationError:
        return EmulationError(f"kernel {self.name!r}: `{str(instr).strip()}`: {message}")

    # blocks ---------------------------------------------------------------------------
    def _translate(self, block: ir.Block) -> None:
        compiled = self.blocks[block]
        compiled.name = block.name
        segments, steps = [], []
        for instr in block.instructions[:-1]:
            if instr in self.aliases or isinstance(instr, (instructions.PhiInstr, instructions.Comment)):
                continue
            made = self._step(instr)
            if isinstance(made, collectives.Collective):
                segments.append((steps, made))
                steps = []
            elif made is not None:
                self.origin[made] = instr
                steps.append(made)
        segments.append((steps, None))
        compiled.segments = tuple(segments)
        compiled.leave = self._leave(block, block.instructions[-1])
        self.origin[compiled.leave] = block.instructions[-1]

    def _jump(self, source: ir.Block, target: ir.Block):
        """r -> the compiled target, after moving the target's phi values from `source`."""
        compiled, pairs = self.blocks[target], []
        for instr in target.instructions:
            if isinstance(instr, instructions.PhiInstr):
                incoming = [value for value, block in instr.incomings if block is source]
                if not incoming:
                    raise self.error(instr, f"no incoming value from block {source.name}")
                pairs.append((self.slot(instr), self.slot(incoming[0])))
        if not pairs:
            return lambda r: compiled
        if len(pairs) == 1:
            (dest, src), = pairs

            def move_one(r):
                r[dest] = r[src]
                return compiled
            return move_one
        dests, srcs = zip(*pairs)

        def move(r):
            values = [r[src] for src in srcs]
            for dest, value in zip(dests, values):
                r[dest] = value
            return compiled
        return move

    def _leave(self, block: ir.Block, instr):
        if isinstance(instr, instructions.Ret):
            return lambda r: None
        if isinstance(instr, instructions.Branch):
            return self._jump(block, instr.operands[0])
        if isinstance(instr, instructions.ConditionalBranch):
            condition = self.slot(instr.operands[0])
            yes, no = self._jump(block, instr.operands[1]), self._jump(block, instr.operands[2])
            return lambda r: yes(r) if r[condition] else no(r)
        if isinstance(instr, instructions.SwitchInstr):
            value, default = self.slot(instr.value), self._jump(block, instr.default)
            cases = {constant_value(case): self._jump(block, target)
                     for case, target in instr.cases}
            return lambda r: cases.get(r[value], default)(r)
        if isinstance(instr, instructions.Unreachable):
            def unreachable(r):
                raise EmulationError("reached `unreachable`")
            return unreachable
        raise self.error(instr, f"the block {block.name} does not end in a terminator the "
                         "emulator knows (ret, br, switch, unreachable)")

    # instructions ---------------------------------------------------------------------
    def _step(self, instr):
        """The step closure of one instruction, a Collective, or None (nothing to do)."""
        if isinstance(instr, instructions.CallInstr):
            return self._call(instr)
        maker = _MAKERS.get(instr.opname)
        if maker is None and instr.opname in operations.BINARY_OPS:
            maker = _binary
        if maker is None:
            raise self.error(instr, f"the emulator does not know the instruction "
                             f"{instr.opname!r}")
        try:
            return maker(self, instr)
        except EmulationError as error:
            raise self.error(instr, str(error)) from None

    def _call(self, instr):
        name = instr.callee.name
        if not isinstance(instr.callee, ir.Function):
            raise self.error(instr, "calls through pointers and inline assembly are not "
                             "emulated")
        collective = collectives.make(name, instr, self)
        if collective is not None:
            return collective
        if name.startswith(_NO_OPS):
            return None
        fn = operations.math_intrinsic(name, instr.type) if name.startswith("llvm.") else None
        if fn is None:
            what = "intrinsic" if name.startswith("llvm.") else "function (only intrinsics)"
            raise self.error(instr, f"unknown {what} {name}: the emulator cannot run it")
        return compute(fn, self.slot(instr), [self.slot(arg) for arg in instr.args])


def compute(fn, dest: int, sources: list):
    """The step r[dest] = fn(*(r[s] for s in sources))."""
    if len(sources) == 1:
        a, = sources

        def step1(r):
            r[dest] = fn(r[a])
        return step1
    if len(sources) == 2:
        a, b = sources

        def step2(r):
            r[dest] = fn(r[a], r[b])
        return step2
    if len(sources) == 3:
        a, b, c = sources

        def step3(r):
            r[dest] = fn(r[a], r[b], r[c])
        return step3

    def step(r):
        r[dest] = fn(*[r[s] for s in sources])
    return step


def _binary(program, instr):
    fn = operations.binary(instr.opname, instr.type)
    return compute(fn, program.slot(instr), [program.slot(op) for op in instr.operands])


def _unary(program, instr):
    fn = operations.lanewise(lambda x: -x, instr.type)
    return compute(fn, program.slot(instr), [program.slot(instr.operands[0])])


def _compare(program, instr):
    return compute(operations.compare(instr), program.slot(instr),
                   [program.slot(op) for op in instr.operands])


def _cast(program, instr):
    fn = operations.cast(instr.opname, instr.operands[0].type, instr.type)
    return compute(fn, program.slot(instr), [program.slot(instr.operands[0])])


def _select(program, instr):
    dest, (c, a, b) = program.slot(instr), map(program.slot, instr.operands)
    if isinstance(instr.cond.type, ir.VectorType):
        return compute(lambda m, x, y: tuple(p if k else q for k, p, q in zip(m, x, y)),
                       dest, [c, a, b])

    def select(r):
        r[dest] = r[a] if r[c] else r[b]
    return select


def _load(program, instr):
    return compute(program.memory.loader(instr.type, instr.align), program.slot(instr),
                   [program.slot(instr.operands[0])])


def _store(program, instr):
    value, pointer = instr.operands
    store = program.memory.storer(value.type, instr.align)
    v, p = program.slot(value), program.slot(pointer)

    def step(r):
        store(r[p], r[v])
    return step


def _gep(program, instr):
    """Address arithmetic: constant indices fold into one byte offset; variable ones
    (sign-extended, as GEP reads them) are scaled by their element's size."""
    ty, offset, terms = instr.source_etype, 0, []
    for position, index in enumerate(instr.indices):
        if position > 0:
            if isinstance(ty, (ir.LiteralStructType, ir.IdentifiedStructType)):
                field = index.constant
                offset += field_offsets(ty)[field]
                ty = ty.elements[field]
                continue
            ty = ty.element
        scale, width = size_of(ty), index.type.width
        if isinstance(index, ir.Constant):
            offset += signed(int(index.constant) & ((1 << width) - 1), width) * scale
        else:
            terms.append((program.slot(index), scale, width))
    dest, base = program.slot(instr), program.slot(instr.pointer)
    if not terms:
        return compute(lambda p: (p + offset) & ADDRESS, dest, [base])
    if len(terms) == 1 and terms[0][2] == 64:  # modulo 2**64 an unsigned i64 is signed
        (i, scale, _), = terms

        def gep64(r):
            r[dest] = (r[base] + r[i] * scale + offset) & ADDRESS
        return gep64

    def gep(r):
        address = r[base] + offset
        for i, scale, width in terms:
            address += signed(r[i], width) * scale
        r[dest] = address & ADDRESS
    return gep


def _alloca(program, instr):
    count = constant_value(instr.operands[0]) if instr.operands else 1
    nbytes, allocate = size_of(instr.allocated_type) * count, program.memory.allocate
    name = f"the local %{instr.name or 'alloca'}"
    return compute(lambda: allocate(name, nbytes), program.slot(instr), [])


def _extract_element(program, instr):
    return compute(lambda vector, index: vector[index], program.slot(instr),
                   [program.slot(op) for op in instr.operands])


def _insert_element(program, instr):
    return compute(lambda vector, value, index: vector[:index] + (value,) + vector[index + 1:],
                   program.slot(instr), [program.slot(op) for op in instr.operands])


def _shuffle_vector(program, instr):
    first, second, mask = instr.operands
    picks = [0 if lane is ir.Undefined else int(lane.constant) for lane in mask.constant] \
        if isinstance(mask.constant, list) else [0] * instr.type.count
    return compute(lambda x, y: tuple((x + y)[k] for k in picks), program.slot(instr),
                   [program.slot(first), program.slot(second)])


def _extract_value(program, instr):
    indices = list(instr.indices)

    def extract(aggregate):
        for index in indices:
            aggregate = aggregate[index]
        return aggregate
    return compute(extract, program.slot(instr), [program.slot(instr.aggregate)])


def _insert_value(program, instr):
    indices = list(instr.indices)

    def insert(aggregate, value, path=indices):
        head, rest = path[0], path[1:]
        inner = insert(aggregate[head], value, rest) if rest else value
        return aggregate[:head] + (inner,) + aggregate[head + 1:]
    return compute(insert, program.slot(instr),
                   [program.slot(instr.aggregate), program.slot(instr.value)])


def _atomic(program, instr):
    pointer, value = instr.operands
    load = program.memory.loader(value.type)
    store = program.memory.storer(value.type)
    combine = operations.atomic(instr.operation, value.type)

    def rmw(address, operand):
        old = load(address)
        store(address, combine(old, operand))
        return old
    return compute(rmw, program.slot(instr), [program.slot(pointer), program.slot(value)])


def _cmpxchg(program, instr):
    pointer, expected, new = instr.operands
    load, store = program.memory.loader(new.type), program.memory.storer(new.type)

    def exchange(address, wanted, value):
        old = load(address)
        if old == wanted:
            store(address, value)
        return (old, int(old == wanted))
    return compute(exchange, program.slot(instr), [program.slot(op) for op in instr.operands])


def _nothing(program, instr):
    return None


_MAKERS = {
    "fneg": _unary, "icmp": _compare, "fcmp": _compare, "select": _select,
    "load": _load, "store": _store, "getelementptr": _gep, "alloca": _alloca,
    "extractelement": _extract_element, "insertelement": _insert_element,
    "shufflevector": _shuffle_vector, "extractvalue": _extract_value,
    "insertvalue": _insert_value, "atomicrmw": _atomic, "cmpxchg": _cmpxchg,
    "fence": _nothing,
    **{name: _cast for name in ("trunc", "zext", "sext", "fptrunc", "fpext", "fptoui",
                                "fptosi", "uitofp", "sitofp", "ptrtoint", "inttoptr",
                                "bitcast", "addrspacecast")},
}
