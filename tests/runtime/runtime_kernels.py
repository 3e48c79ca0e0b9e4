"""A small kernel for the runtime tests, `void NAME(float* x, i64 start, i64 end)` adding
one to x[start:end], and a ctypes binding for it: a range covered twice or not at all
shows in the result. `object_code` is what the kernel cache stores for a module."""
import ctypes
import uuid

import llvmlite.ir as ir

ADD_ONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def unique_name(stem: str = "add_one") -> str:
    """Function names are global to the one engine a test process shares."""
    return f"{stem}_{uuid.uuid4().hex[:12]}"


def add_one_module(jit, name: str) -> ir.Module:
    module = jit.new_module(name)
    add_one(module, name)
    return module


def add_one(module: ir.Module, name: str) -> None:
    """Define the kernel NAME in `module`."""
    f32, i64 = ir.FloatType(), ir.IntType(64)
    kernel = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(), i64, i64]),
                         name)
    x, start, end = kernel.args
    entry, loop, done = (kernel.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed("<", start, end), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64, "i")
    i.add_incoming(start, entry)
    slot = b.gep(x, [i], source_etype=f32)
    b.store(b.fadd(b.load(slot, typ=f32), ir.Constant(f32, 1.0)), slot)
    following = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, end), loop, done)
    b.position_at_end(done)
    b.ret_void()


def object_code(jit, module: ir.Module) -> bytes:
    """`module` optimised and compiled for this host, as the kernel cache stores it."""
    return jit.target_machine.emit_object(jit.optimise(module))
