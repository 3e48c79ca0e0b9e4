"""A background compile worker (runtime/llvm/compile_service.py starts it): reads jobs (LLVM IR
text or the function that builds it, speed level, target) from stdin, compiles each to
object code exactly as the host JIT does (runtime/llvm/jit.py's compile_object), writes it to
the job's kernel cache directory and replies on stdout, until stdin ends; a reply that
cannot be written (the process that asked has exited) ends it quietly.

    python -m runtime.llvm.compile_worker [IDLE_SECONDS]    # exit after that long without a job
"""
from __future__ import annotations

import os
import pickle
import select
import sys

from runtime.llvm.cache import KernelCache
from runtime.llvm.compile import compile_clock, compile_job
from runtime.llvm.wire import receive, send

NICENESS = 10
PHASES = ("ir", "parse", "optimise", "machine_code")


def serve(jobs, replies, idle: float | None = None) -> None:
    """Compile every job read from `jobs` (an unbuffered stream) and write its reply to
    `replies` (while the process reading them is there); return at the end of `jobs`,
    or when no job came for `idle` seconds."""
    machines, caches = {}, {}
    while True:
        if idle is not None and not select.select([jobs], [], [], idle)[0]:
            return
        message = receive(jobs)
        if message is None:
            return
        key, pickled = message
        before = compile_clock()
        try:
            job = pickle.loads(pickled)
            entry = compile_job(job, machines)
            if job.cache_dir is not None:
                cache = caches.get(job.cache_dir)
                if cache is None:
                    cache = caches[job.cache_dir] = KernelCache(job.cache_dir)
                cache.write(key, entry)
            spent = compile_clock() - before
            reply = (key, entry.functions, entry.object_code, None,
                     {phase: getattr(spent, phase) for phase in PHASES})
        except Exception as error:  # noqa: BLE001 - sent back: the caller compiles it itself
            reply = (key, (), b"", f"{type(error).__name__}: {error}", None)
        if replies is not None:
            try:
                send(replies, reply)
            except BrokenPipeError:  # the process that asked exited: the jobs it sent
                replies = None       # are still compiled, for its disk cache


def main() -> int:
    replies = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies on the reply stream
    try:  # the process it compiles for comes first (numpy's BLAS threads spin-wait for
        os.nice(NICENESS)  # a core: beside an equal worker, a 0.1 ms product took 30)
    except (AttributeError, OSError):
        pass
    try:
        idle = float(sys.argv[1]) if len(sys.argv) > 1 else None
        serve(sys.stdin.buffer.raw, replies, idle)
    except KeyboardInterrupt:  # the terminal's ^C reaches the whole process group
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
