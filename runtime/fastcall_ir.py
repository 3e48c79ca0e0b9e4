"""The IR side of runtime/fastcall.py: `Entry` builds a METH_FASTCALL function in
llvmlite IR (its arguments' data pointers, its words, its return value), and
`build_launcher` the launcher of the native backend's kernels. Kept apart so that
calling a builtin whose code is on disk loads no llvmlite."""
from __future__ import annotations

import llvmlite.ir as ir

from runtime.addresses import ARRAY_DATA_OFFSET
from runtime.fastcall import HIDDEN_WORDS
from runtime.llvm.toolkit import I8, I8P, I64, VOID, at, define, i64

FASTCALL = ir.FunctionType(I8P, [I8P, I8P.as_pointer(), I64])


class Entry:
    """A METH_FASTCALL function `name` being built (its code at `b`): `arrays(count)`
    gives the data pointers of its `count` ndarray arguments (after checking there are
    that many), `words(count)` the words given to `builtin`, `give(index)` returns
    argument `index`."""

    def __init__(self, module: ir.Module, name: str):
        self.module, self.name = module, name
        self.fn, self.b = define(module, name, FASTCALL)
        self.self_, self.args, self.count = self.fn.args

    def arrays(self, count: int) -> list:
        """The data pointers (i8*) of arguments 0 .. count-1; a call with another number
        of arguments raises TypeError here."""
        self._expect(count, f"{count} arrays")
        return [self._data(self._argument(index)) for index in range(count)]

    def ints(self, count: int, as_pointer, arrays: int = 0) -> list:
        """Arguments 0 .. count-1, Python ints (addresses), as i8* through CPython's
        PyLong_AsVoidPtr (`as_pointer`: its address, an i64 word), then the data
        pointers of `arrays` ndarray arguments after them; a call with another number of
        arguments raises TypeError here."""
        self._expect(count + arrays, f"{count} ints and {arrays} arrays" if arrays else
                     f"{count} ints")
        b = self.b
        convert = b.inttoptr(as_pointer, ir.FunctionType(I8P, [I8P]).as_pointer())
        return [b.call(convert, [self._argument(index)]) for index in range(count)] + \
            [self._data(self._argument(count + index)) for index in range(arrays)]

    def _expect(self, count: int, what: str) -> None:
        """Raise TypeError (`what` the function takes) unless there are `count` arguments."""
        b = self.b
        wrong, right = (self.fn.append_basic_block(name) for name in ("wrong", "right"))
        b.cbranch(b.icmp_signed("!=", self.count, i64(count)), wrong, right)
        b.position_at_end(wrong)
        set_error, type_error = self._words(HIDDEN_WORDS)
        text = f"{self.name}() takes {what}\0".encode()
        message = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(text)),
                                    f"{self.name}.message")
        message.global_constant, message.linkage = True, "internal"
        message.initializer = ir.Constant(message.type.pointee, bytearray(text))
        set_type = ir.FunctionType(VOID, [I8P, I8P])
        b.call(b.inttoptr(set_error, set_type.as_pointer()),
               [b.inttoptr(type_error, I8P), b.bitcast(message, I8P)])
        b.ret(ir.Constant(I8P, None))
        b.position_at_end(right)

    def words(self, count: int) -> list:
        """The first `count` words given to `builtin`, as i64."""
        return self._words(HIDDEN_WORDS + count)[HIDDEN_WORDS:]

    def _words(self, count: int) -> list:
        b = self.b
        base = b.bitcast(self._data(self.self_), I64.as_pointer())
        return [b.load(at(b, base, i)) for i in range(count)]

    def give(self, index: int) -> None:
        """Return argument `index`, its reference count incremented (a new reference)."""
        b = self.b
        obj = self._argument(index)
        count = b.bitcast(obj, I64.as_pointer())
        b.store(b.add(b.load(count), i64(1)), count)
        b.ret(obj)

    def give_new(self, obj) -> None:
        """Return `obj`, a new reference the function made (through the C API)."""
        self.b.ret(obj)

    def _argument(self, index: int):
        return self.b.load(at(self.b, self.args, index))

    def _data(self, obj):
        b = self.b
        slot = at(b, obj, ARRAY_DATA_OFFSET)
        return b.load(b.bitcast(slot, I8P.as_pointer()), align=8)


KERNEL = ir.FunctionType(VOID, [I8P] * 3 + [I64] * 4)
"""The native backend's row and elementwise kernels: (data pointers, row offset tables,
inner strides, row start, row end, inner start, inner end); see runtime/cpu/kernel_ir.py."""


def build_launcher(module: ir.Module, count: int) -> None:
    """`kiln_launch_<count>`(count - 1 ints, an ndarray): the inputs' data pointers
    (Python ints) and the output's (read from the array) into a table on the stack, then
    one call of a KERNEL over every row and element; its words are PyLong_AsVoidPtr's
    address, the kernel's, its offset tables', its strides', the rows and the inner
    size. Returns its first argument."""
    entry = Entry(module, f"kiln_launch_{count}")
    b = entry.b
    table = b.alloca(ir.ArrayType(I8P, count), name="pointers")
    as_pointer, kernel, offsets, strides, rows, inner = entry.words(6)
    for index, pointer in enumerate(entry.ints(count - 1, as_pointer, arrays=1)):
        b.store(pointer, b.gep(table, [i64(0), i64(index)]))
    b.call(b.inttoptr(kernel, KERNEL.as_pointer()),
           [b.bitcast(table, I8P), b.inttoptr(offsets, I8P), b.inttoptr(strides, I8P),
            i64(0), rows, i64(0), inner])
    entry.give(0)


def build_address_reader(module: ir.Module) -> None:
    """`kiln_address`(an ndarray): its data pointer as a Python int, made by
    PyLong_FromVoidPtr (its address: the one word)."""
    entry = Entry(module, "kiln_address")
    b = entry.b
    (pointer,) = entry.arrays(1)
    (from_pointer,) = entry.words(1)
    make = b.inttoptr(from_pointer, ir.FunctionType(I8P, [I8P]).as_pointer())
    entry.give_new(b.call(make, [pointer]))


def build_parallel_launcher(module: ir.Module, count: int) -> None:
    """`kiln_launch_parallel_<count>`(count - 1 ints, an ndarray): the data pointers (the
    inputs' Python ints, the output array's) into a Launch's pointer table, which its
    runtime.pool items read, the counters of its
    run_items job zeroed, and the job run: on the pool at runtime.pool's current cell,
    or alone on this thread where that holds none (a child after fork). Its words are
    PyLong_AsVoidPtr's address, the table's, the job's, kiln_pool_items', kiln_pool_run's,
    the current cell's and the thread count. Returns its first argument."""
    from runtime.pool import CLAIM_FIRST, ITEMS_SLOTS, TASK
    entry = Entry(module, f"kiln_launch_parallel_{count}")
    b = entry.b
    as_pointer, table, job, items, run, cell, threads = entry.words(7)
    slots = b.inttoptr(table, I8P.as_pointer())
    for index, pointer in enumerate(entry.ints(count - 1, as_pointer, arrays=1)):
        b.store(pointer, at(b, slots, index))
    counters = b.inttoptr(job, I64.as_pointer())
    for slot in range(CLAIM_FIRST, ITEMS_SLOTS):
        b.store(i64(0), at(b, counters, slot))
    task, context = b.inttoptr(items, TASK.as_pointer()), b.inttoptr(job, I8P)
    pool = b.load(b.inttoptr(cell, I64.as_pointer()))
    alone, shared, done = (entry.fn.append_basic_block(n) for n in ("alone", "shared", "done"))
    b.cbranch(b.icmp_unsigned("==", pool, i64(0)), alone, shared)
    b.position_at_end(alone)
    b.call(task, [context, i64(0), i64(1)])
    b.branch(done)
    b.position_at_end(shared)
    run_type = ir.FunctionType(VOID, [I64.as_pointer(), TASK.as_pointer(), I8P, I64])
    b.call(b.inttoptr(run, run_type.as_pointer()),
           [b.inttoptr(pool, I64.as_pointer()), task, context, threads])
    b.branch(done)
    b.position_at_end(done)
    entry.give(0)
