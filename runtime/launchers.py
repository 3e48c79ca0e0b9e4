"""Builtins (runtime/fastcall.py) made once per machine and loaded once per process: one
that reads an ndarray's address, and the launchers of the CPU kernels (one call of a
kernel over every row, on the calling thread or on runtime.pool's threads). Their code
is built by runtime/fastcall_ir.py, imported only when one is built: a launcher on disk
loads without llvmlite."""
from __future__ import annotations

import ctypes
import functools

from runtime.fastcall import available, builtin

_loaded: dict[str, int] = {}  # a builtin's function name -> its code's address



@functools.cache
def address_reader():
    """A builtin `kiln_address(a)`: ndarray a's data pointer as an int, ~60 ns where
    ctypes takes ~0.35 us (eager/tensor.py reads every new CPU tensor's address through it
    once a native kernel has loaded it); None where this interpreter does not allow it.
    Its argument must be an ndarray (unchecked)."""
    if not available():
        return None
    code = _code("kiln_address", _build_address_reader)
    from_pointer = ctypes.cast(ctypes.pythonapi.PyLong_FromVoidPtr, ctypes.c_void_p).value
    return builtin(code, "kiln_address", (from_pointer,))


def _build_address_reader(module) -> None:
    from runtime.fastcall_ir import build_address_reader
    build_address_reader(module)


# kernel launchers -------------------------------------------------------------------


def launcher(address: int, count: int, offsets: int, strides: int, rows: int, inner: int):
    """The fastcall_ir.KERNEL at `address` over every row and element as a builtin of `count` data
    pointers (ints): ~0.3 us less a call than ctypes with prepared arguments. The
    addresses of the offset tables and strides must outlive it. None where this
    interpreter does not allow it (available())."""
    if not available():
        return None
    code = _launcher_code(count, parallel=False)
    return builtin(code, "kiln_launch", (_as_pointer(), address, offsets, strides, rows,
                                         inner))


def parallel_launcher(count: int, table: int, job: int, items: int, run: int, cell: int,
                      threads: int):
    """A builtin of `count` data pointers (ints) that writes them into the pointer table
    at `table` and runs the runtime.pool run_items job at `job` (kiln_pool_items at
    `items`) on `threads` threads through kiln_pool_run at `run`, on the pool that the
    word at `cell` holds (see fastcall_ir.build_parallel_launcher): ~2 us of Python and
    ctypes less a call. It holds the GIL while the job runs; the pool must already have
    `threads` threads. None where this interpreter does not allow it."""
    if not available():
        return None
    code = _launcher_code(count, parallel=True)
    return builtin(code, "kiln_launch_parallel",
                   (_as_pointer(), table, job, items, run, cell, threads))


def _launcher_code(count: int, parallel: bool) -> int:
    name = f"kiln_launch_{'parallel_' if parallel else ''}{count}"
    return _code(name, _BuildLauncher(count, parallel))


def _code(name: str, build) -> int:
    """The address of native function `name`, which `build(module)` makes: compiled once
    per machine (the disk cache keeps it), loaded once per process."""
    code = _loaded.get(name)
    if code is None:
        from runtime.llvm.jit import compiling_here, host_jit
        with compiling_here():
            code = host_jit().load_spec(name, f"{name} fastcall", build, [name])[name]
        _loaded[name] = code
    return code


def _as_pointer() -> int:
    """PyLong_AsVoidPtr's address, the word launchers convert their ints with."""
    return ctypes.cast(ctypes.pythonapi.PyLong_AsVoidPtr, ctypes.c_void_p).value


class _BuildLauncher:
    """load_spec's build of kiln_launch_<count> or kiln_launch_parallel_<count>
    (fastcall_ir's build_launcher or build_parallel_launcher, imported only when it is
    built: a launcher on disk loads without llvmlite)."""

    def __init__(self, count: int, parallel: bool):
        self.count, self.parallel = count, parallel

    def __call__(self, module) -> None:
        from runtime.fastcall_ir import build_launcher, build_parallel_launcher
        (build_parallel_launcher if self.parallel else build_launcher)(module, self.count)
