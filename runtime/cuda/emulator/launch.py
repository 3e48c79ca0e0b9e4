"""Run a CUDA kernel's LLVM IR on the host: the very llvmlite `ir.Function` that
runtime/cuda/nvptx.py turns into PTX, over numpy arrays, so every CUDA kernel's results are
tested against numpy on machines without a GPU.

    launch(kernel, grid, block, args, *, dynamic_shared_bytes=0)
        grid, block: an int or up to 3 ints; args: one per parameter, a numpy array (or
        (array, element offset)) for a pointer, read and written in place; an int or
        float for a scalar
    EmulationError
        an out-of-bounds or misaligned access, barrier divergence, a warp collective
        whose lanes never meet, an unknown instruction or intrinsic, bad arguments: the
        message names the kernel, the block and thread, the instruction and the values

How it runs (runtime/cuda/emulator/): each kernel is translated once (cached per function)
into Python closures, one per instruction (program.py); a thread is a generator over
them that stops at barriers and warp collectives (collectives.py). Blocks run one after
another; a block's threads run phase by phase: every thread runs until it finishes or
reaches a collective, a warp collective resolves once all the lanes of its mask are
there, a barrier once every thread of the block is at that same barrier. Threads that
finish while others wait at a barrier, or wait at different barriers, are barrier
divergence: an EmulationError, never a hang. Memory (memory.py): each argument array,
each shared global (one per block, refilled with 0xFF bytes: NaN floats and -1 integers
show a read before any write), each constant global is a region; a pointer is an
address in one, and every load and store is checked against its region's bytes.
Values (values.py): integers wrap at their width; every f32 operation is rounded to
float32 (fma rounded once); f64 is Python's float.

What it does not model:
- memory ordering and races: within a phase threads run one after another, in order of
  their thread index, so a race between threads of a block (or between blocks, which
  run in order of blockIdx) gives one of its possible results without any error;
  atomics are trivially atomic;
- warp divergence and timing, independent thread scheduling, occupancy and every
  other performance figure;
- the precision of approximate instructions (ex2.approx, tanh.approx, rsqrt.approx,
  div.approx): they are computed in float64 and rounded once to float32, so a GPU may
  differ in the last bits; nor flush-to-zero of subnormals (.ftz), nor LLVM's
  contraction of fmul + fadd into fma where `contract` allows it (ptxas may fuse too);
- calls of non-intrinsic functions, constant expressions (FormattedConstant), opaque
  pointers, textures, surfaces, clusters; device globals do not persist between
  launches;
- a shuffle source lane that did not take part gives the reader's own value (undefined
  on a GPU).

Speed, measured on one core of the development machine (Python 3.11): about 4 million
LLVM instructions a second (a grid-stride add of 200,000 float32s, 13 instructions an
element, in 0.64 s; a 256-thread block tree reduction with 9 barriers, ~24 us a thread).
Translating a small kernel takes under a millisecond; it is done once per function.
"""
from __future__ import annotations

import threading
import weakref

import llvmlite.ir as ir

from runtime.cuda.emulator.collectives import WARP
from runtime.cuda.emulator.memory import Region, bind_pointer, bind_scalar, global_region
from runtime.cuda.emulator.program import Program
from runtime.cuda.emulator.values import EmulationError

__all__ = ["launch", "EmulationError"]

_programs = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_AXES = "xyz"


def launch(kernel: ir.Function, grid, block, args, *, dynamic_shared_bytes: int = 0) -> None:
    """Run `kernel` over `grid` blocks of `block` threads on the host, with `args`."""
    with _lock:
        program = _program(kernel)
        grid, block = _dims(kernel, "grid", grid), _dims(kernel, "block", block)
        if block[0] * block[1] * block[2] > 1024:
            raise EmulationError(f"kernel {kernel.name!r}: a block of {block} has more "
                                 "than 1024 threads")
        try:
            template, shared = _bind(program, args, dynamic_shared_bytes)
            for axis, count in zip(_AXES, block):
                template[program.slots[f"ntid.{axis}"]] = count
            for axis, count in zip(_AXES, grid):
                template[program.slots[f"nctaid.{axis}"]] = count
            template[program.slots["warpsize"]] = WARP
            for z in range(grid[2]):
                for y in range(grid[1]):
                    for x in range(grid[0]):
                        for region in shared:
                            region.raw[:] = b"\xff" * region.nbytes
                        _Block(program, template, block, (x, y, z)).run()
        finally:
            program.memory.reset()  # the arrays are the caller's again


def _program(kernel) -> Program:
    """The translated kernel, made once (again if its blocks changed since)."""
    if not isinstance(kernel, ir.Function) or not kernel.blocks:
        raise EmulationError(f"launch needs an llvmlite ir.Function with a body, not "
                             f"{kernel!r}")
    shape = tuple(len(block.instructions) for block in kernel.blocks)
    cached = _programs.get(kernel)
    if cached is None or cached[0] != shape:
        cached = (shape, Program(kernel))
        _programs[kernel] = cached
    return cached[1]


def _dims(kernel, what: str, dims) -> tuple:
    values = (dims,) if not isinstance(dims, (tuple, list)) else tuple(dims)
    if not 1 <= len(values) <= 3 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise EmulationError(f"kernel {kernel.name!r}: {what} must be a positive int or "
                             f"up to 3 of them, not {dims!r}")
    return values + (1,) * (3 - len(values))


def _bind(program: Program, args, dynamic_shared_bytes: int) -> tuple:
    """The launch's register template (arguments, globals' addresses) and the shared
    regions to refill for each block."""
    fn, memory = program.function, program.memory
    memory.reset()
    args = list(args)
    if len(args) != len(fn.args):
        raise EmulationError(f"kernel {fn.name!r} takes {len(fn.args)} arguments "
                             f"({', '.join(str(a.type) for a in fn.args)}), given {len(args)}")
    template = list(program.template)
    try:
        for index, (param, slot, given) in enumerate(zip(fn.args, program.params, args)):
            name = f"parameter {param.name!r}" if param.name else f"parameter {index}"
            if isinstance(param.type, ir.PointerType):
                template[slot] = bind_pointer(memory, name, param.type.pointee, given)
            else:
                template[slot] = bind_scalar(name, param.type, given)
    except EmulationError as error:
        raise EmulationError(f"kernel {fn.name!r}: {error}") from None
    shared, dynamic = [], None
    for variable, slot in program.globals.items():
        region, kind = global_region(variable)
        if kind == "dynamic":
            if dynamic is None:
                dynamic = Region("dynamic shared memory", bytearray(dynamic_shared_bytes))
                shared.append(dynamic)
                dynamic.address = memory.add(dynamic)
            template[slot] = dynamic.address
            continue
        if kind == "shared":
            shared.append(region)
        template[slot] = memory.add(region)
    return template, shared


class _Block:
    """One block's threads, run phase by phase (see the module's docstring)."""

    def __init__(self, program: Program, template: list, dims: tuple, ctaid: tuple):
        self.program, self.dims, self.ctaid = program, dims, ctaid
        slots = program.slots
        block_template = list(template)
        for axis, index in zip(_AXES, ctaid):
            block_template[slots[f"ctaid.{axis}"]] = index
        tid = [slots[f"tid.{axis}"] for axis in _AXES]
        lane = slots["laneid"]
        self.threads = []
        for z in range(dims[2]):
            for y in range(dims[1]):
                for x in range(dims[0]):
                    r = list(block_template)
                    r[tid[0]], r[tid[1]], r[tid[2]] = x, y, z
                    r[lane] = len(self.threads) % WARP
                    self.threads.append(_Thread(program.thread(r), (x, y, z),
                                                len(self.threads)))

    def run(self) -> None:
        runnable = [(thread, None) for thread in self.threads]
        while True:
            for thread, value in runnable:
                self._advance(thread, value)
            runnable = self._resolve_warps()
            if runnable:
                continue
            live = [thread for thread in self.threads if not thread.done]
            if not live:
                return
            runnable = self._resolve_barrier(live)

    def _advance(self, thread, value) -> None:
        try:
            thread.wait = thread.generator.send(value)
        except StopIteration:
            thread.done, thread.wait = True, None
        except EmulationError as error:
            raise self._error(thread, error) from None
        except (ArithmeticError, ValueError, TypeError, IndexError, KeyError) as error:
            raise self._error(thread, f"the emulator failed ({type(error).__name__}: "
                                      f"{error})", error) from error

    def _error(self, thread, error, cause=None) -> EmulationError:
        where = _failing_instruction(self.program, (cause or error).__traceback__)
        at = f"`{str(where).strip()}`: " if where is not None else ""
        return EmulationError(f"kernel {self.program.name!r}, block {self.ctaid}, thread "
                              f"{thread.coords}: {at}{error}")

    def _resolve_warps(self) -> list:
        groups = {}
        for thread in self.threads:
            if thread.wait is not None and thread.wait[0].scope == "warp":
                key = (thread.linear // WARP, id(thread.wait[0]))
                groups.setdefault(key, []).append(thread)
        runnable, count = [], len(self.threads)
        for (warp, _), members in groups.items():
            collective = members[0].wait[0]
            lanes = {thread.linear % WARP: thread for thread in members}
            mask = 0
            for thread in members:
                mask |= thread.wait[1][0]
            needed = [lane for lane in range(WARP)
                      if mask >> lane & 1 and warp * WARP + lane < count]
            if any(lane not in lanes for lane in needed):
                continue
            results = collective.resolve({lane: t.wait[1] for lane, t in lanes.items()})
            for lane, thread in lanes.items():
                thread.wait = None
                runnable.append((thread, results[lane]))
        return runnable

    def _resolve_barrier(self, live: list) -> list:
        first = live[0].wait[0]
        if len(live) == len(self.threads) and first.scope == "block" and all(
                thread.wait[0] is first for thread in live):
            results = first.resolve([thread.wait[1] for thread in live])
            for thread in live:
                thread.wait = None
            return list(zip(live, results))
        raise EmulationError(self._stuck(live))

    def _stuck(self, live: list) -> str:
        """Why no thread can go on: who waits where, who finished."""
        places = {}
        for thread in self.threads:
            place = "have finished" if thread.done else f"wait at {thread.wait[0].describe()}"
            places.setdefault(place, []).append(thread.linear)
        what = "barrier divergence" if any(t.wait[0].scope == "block" for t in live) else \
            "warp collective whose lanes never all arrive"
        parts = [f"threads {_ranges(linear)} {place}" for place, linear in places.items()]
        return (f"kernel {self.program.name!r}, block {self.ctaid}: {what}: "
                + "; ".join(parts) + " (threads by linear index in the block)")


class _Thread:
    __slots__ = ("generator", "coords", "linear", "wait", "done")

    def __init__(self, generator, coords: tuple, linear: int):
        self.generator, self.coords, self.linear = generator, coords, linear
        self.wait, self.done = None, False


def _ranges(numbers: list) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    spans, start = [], numbers[0]
    for previous, number in zip(numbers, numbers[1:] + [None]):
        if number != previous + 1 if number is not None else True:
            spans.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = number
    return ", ".join(spans)


def _failing_instruction(program: Program, traceback):
    """The instruction whose step raised, read from the thread generator's frame."""
    while traceback is not None and traceback.tb_frame.f_code is not Program.thread.__code__:
        traceback = traceback.tb_next
    if traceback is None or traceback.tb_next is None:
        return None
    local, callee = traceback.tb_frame.f_locals, traceback.tb_next.tb_frame.f_code
    block, step, collective = local.get("block"), local.get("step"), local.get("collective")
    if block is not None and callee is block.leave.__code__:
        return program.origin.get(block.leave)
    if step is not None and callee is step.__code__:
        return program.origin.get(step)
    if collective is not None:
        return collective.instr
    return None
