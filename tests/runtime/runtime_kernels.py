"""Small kernels for the runtime tests: `void NAME(float* x, i64 start, i64 end)` adding
one to x[start:end], and a ctypes binding for it (a range covered twice or not at all
shows in the result); and one that needs every kind of relocation the ELF loader
applies (relocations_module). `object_code` is what the kernel cache stores for a
module."""
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


def relocations_module(name: str) -> str:
    """IR text of `i64 NAME(char* s, i64 i)`, table[i] + strlen(s), and of
    `NAME_strlen()`, strlen's address: a constant table (.rodata, PC-relative), a call to
    libc (out of 32-bit reach: through a stub) and an external address (a GOT slot)."""
    return f"""
@table = private unnamed_addr constant [4 x i64] [i64 10, i64 20, i64 30, i64 40]
declare i64 @strlen(ptr)
define i64 @"{name}"(ptr %s, i64 %i) {{
  %slot = getelementptr [4 x i64], ptr @table, i64 0, i64 %i
  %entry = load volatile i64, ptr %slot
  %length = call i64 @strlen(ptr %s)
  %sum = add i64 %entry, %length
  ret i64 %sum
}}
define ptr @"{name}_strlen"() {{
  ret ptr @strlen
}}
"""


def relocations_kernel_results(addresses: dict[str, int], name: str) -> list[int]:
    """What the kernels of relocations_module(name) at `addresses` give: NAME(b"hello", i)
    for each i, then whether NAME_strlen() is libc's strlen (1 or 0)."""
    kernel = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64)(
        addresses[name])
    libc_strlen = ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
    strlen = ctypes.CFUNCTYPE(ctypes.c_void_p)(addresses[name + "_strlen"])()
    return [kernel(b"hello", i) for i in range(4)] + [int(strlen == libc_strlen)]


RELOCATIONS_KERNEL_RESULTS = [15, 25, 35, 45, 1]
