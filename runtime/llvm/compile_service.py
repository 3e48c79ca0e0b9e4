"""Kernels compiled in the background, by worker processes, while the caller runs on.

The first call of a compiled function used to wait for every kernel it needed: the
2-layer GPT step's 47 kernels took 1.3 s of LLVM after its IR was built. Threads cannot
overlap that work (llvmlite holds one process-wide lock around every LLVM call), so
compiles go to worker processes instead (runtime/llvm/compile_worker.py): the caller builds a
kernel's IR, submits the text and, until the object code is back, runs the kernel's
graph through the reference interpreter (runtime/llvm/jit.py's `deferring`, used by the native
backend). A later call finds the object code, which the JIT writes to the disk cache and
links as if it had compiled it itself. This is the tiering of JIT-compiled runtimes:
interpret first, switch to native code when it is ready.

    KILN_COMPILE_WORKERS=N   worker processes (default: one per core this process may
                             use beyond the first, at least 1, at most 4); 0 compiles
                             every kernel in the calling thread before it runs;
                             "inline" compiles it in the calling thread but runs that
                             call interpreted all the same, as with a worker that is
                             never done in time: the interpreted path, deterministic,
                             for tests

`wait_for_kernels()` blocks until every submitted kernel is back (benchmarks call it
before timing steady-state calls), for WAIT_SECONDS at most: then the workers still
holding kernels are taken as hung and ended, and the caller compiles those kernels
itself. A worker that fails to compile a kernel sends the error back and the caller
compiles that kernel itself (raising LLVM's error where it is real); a worker that dies
takes its kernels with it to the same fate, and the next kernel handed out starts
another in its place, until MAX_WORKER_DEATHS have died (or hung): from then on kernels
compile in the caller, as one warning says. Workers run at a lower priority than the
process they compile for, write each kernel to the disk cache themselves, and exit once
their input is closed (at exit, or when the process dies) and the jobs already sent are
done: a short script's kernels are on disk for its next run. At exit the jobs not yet
sent are sent first, for as long as each worker keeps taking them (one that takes none
for EXIT_STALL_SECONDS is ended, and the rest are dropped: an entry on disk is written
whole or not at all). A worker left without work for CompileService.idle_seconds exits
too (each holds ~130 MB: Python, numpy, kiln, LLVM); the next kernel handed out starts
another.

Messages are pickles with a length prefix, over the workers' stdin and stdout:
    job     (key, a Job pickled: the IR text or the function that builds it, then the
            worker builds the IR too and the caller only plans; speed level, target)
    reply   (key, function names, object code, error or None, seconds per phase)
"""
from __future__ import annotations

import atexit
import os
import pickle
import queue
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass, field, replace
from typing import Callable

from runtime.llvm.wire import receive, send

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_WORKERS = 4
MAX_WORKER_DEATHS = 3  # workers that died or hung before kernels compile in the caller
WAIT_SECONDS = 60.0  # wait_for_kernels() without a timeout: then the caller compiles them
EXIT_STALL_SECONDS = 10.0  # at exit, a worker taking no job this long is ended





INLINE = "inline"


def configured_workers() -> int | str:
    """Worker processes to use: $KILN_COMPILE_WORKERS (a count, or INLINE), or one per
    core this process may use beyond the first (at least 1, at most MAX_WORKERS)."""
    configured = os.environ.get("KILN_COMPILE_WORKERS", "").strip()
    if configured == INLINE:
        return INLINE
    if configured:
        try:
            workers = int(configured)
        except ValueError:
            raise ValueError(f"KILN_COMPILE_WORKERS={configured!r}: expected a whole number "
                             f"of worker processes (0 compiles in the calling thread) or "
                             f"{INLINE!r}") from None
        if workers < 0:
            raise ValueError(f"KILN_COMPILE_WORKERS={workers}: expected 0 or more")
        return workers
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, cores - 1))


@dataclass(frozen=True)
class Job:
    """One kernel to compile: its cache key; its source, LLVM IR text or (module name,
    a picklable function that fills an IR module); LLVM's speed level; the target (CPU
    name and features) and the module's triple and data layout; the kernel cache's
    directory, where the worker writes the entry (so that it lands there even if this
    process exits first); the modules the worker imports before it builds the IR (the
    op records' emitters: ir.records.declaring_modules())."""
    key: str
    source: str | tuple
    speed_level: int
    cpu: str
    features: str
    triple: str
    data_layout: str | None  # None: the worker's TargetMachine's
    cache_dir: str | None = None  # the worker writes the object code there too
    setup: tuple = ()

    def message(self) -> tuple | None:
        """What goes to a worker: (key, the job pickled), or None if the job's source
        function does not pickle (then send the job `with_source` its IR text). The job
        is pickled apart from its key so that a worker that cannot unpickle it (a
        function from a module it cannot import) replies with an error for that key."""
        try:
            return self.key, pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return None

    def with_source(self, source: str | tuple) -> "Job":
        return replace(self, source=source)


@dataclass
class Result:
    """A finished job: the object code and its function names, or the worker's error;
    `seconds` is the worker's time per phase (ir, parse, optimise, machine_code)."""
    functions: tuple = ()
    object_code: bytes = b""
    error: str | None = None
    seconds: dict = field(default_factory=dict)


class _Worker:
    """One worker process and the thread that reads its replies."""

    def __init__(self, service: "CompileService", index: int):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen([sys.executable, "-m", "runtime.llvm.compile_worker",
                                         str(service.idle_seconds)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env=env)
        self.outstanding: dict[str, tuple] = {}  # key -> (its message, what delivers it)
        self.alive = True
        self.failed = False  # it exited with an error, or was ended as hung
        self.sent = 0  # messages written to it
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()  # None: close the input
        threading.Thread(target=service._read, args=(self,), daemon=True,
                         name=f"kiln-compile-reader-{index}").start()
        self._writer = threading.Thread(target=self._write, daemon=True,
                                        name=f"kiln-compile-writer-{index}")
        self._writer.start()

    def send(self, message: tuple) -> None:
        """Queue a job's message for the worker (its writer thread sends it: a pipe holds 64 KB,
        a GEMM kernel's IR more, and the caller must not wait for the worker to read)."""
        self._jobs.put(message)

    def close(self) -> None:
        self._jobs.put(None)

    def finish(self, stall: float) -> None:
        """After `close`, wait until every queued message is written, as long as the
        worker takes one at least every `stall` seconds; end it if it does not."""
        while True:
            sent = self.sent
            self._writer.join(stall)
            if not self._writer.is_alive():
                return
            if self.sent == sent:
                self.end()
                return

    def end(self) -> None:
        """Kill the process (its reader then files its jobs as failed)."""
        try:
            self.process.kill()
        except OSError:
            pass

    def _write(self) -> None:
        stream = self.process.stdin
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    stream.close()
                    return
                send(stream, job)
                self.sent += 1
            except OSError:  # the worker is gone: its reader files its jobs as failed
                return


class InlineService:
    """KILN_COMPILE_WORKERS=inline: no workers; the JIT compiles a deferred kernel at
    once, in the calling thread, and still raises KernelPending, so that the call runs
    interpreted and the next one natively (runtime/llvm/jit.py)."""
    inline = True

    def __init__(self):
        self.pid = os.getpid()
        self.submitted = 0

    def wait(self, timeout: float | None = None) -> bool:
        return True

    def close(self, stall: float | None = None) -> None:
        pass


class CompileService:
    """Worker processes compiling LLVM IR text to object code; `workers` of them, each
    started on the first job that needs it."""
    inline = False
    idle_seconds = 30.0  # a worker without a job this long exits

    def __init__(self, workers: int):
        if workers < 1:
            raise ValueError(f"a compile service needs at least one worker, not {workers}")
        self.size = workers
        self.pid = os.getpid()
        self.deaths = 0  # workers that died or hung
        self._started = 0
        self._workers: list[_Worker] = []
        self._changed = threading.Condition()
        self._results: dict[str, Result | None] = {}  # None: submitted, not back yet
        self.submitted = 0

    def submit(self, message: tuple, deliver: Callable[[Result], None]) -> None:
        """Have the least busy worker compile a job (its `message()`), once per key;
        `deliver(result)` runs in a reader thread when its object code is back (the JIT
        links it there), before `wait` and `result` see the job done."""
        key = message[0]
        with self._changed:
            if key in self._results:
                return
            worker = self._worker()
            if worker is None:  # every worker died: the caller compiles it itself
                self._results[key] = Result(error="no compile worker is running")
                return
            self._results[key] = None
            worker.outstanding[key] = message, deliver
            self.submitted += 1
            worker.send(message)

    def result(self, key: str) -> Result | None:
        """The finished job for `key` that was not delivered (the worker's error; taken:
        a later call does not find it again), or None while it runs. KeyError if there
        is no such job (never submitted, or delivered)."""
        with self._changed:
            found = self._results[key]
            if found is not None:
                del self._results[key]
            return found

    def has(self, key: str) -> bool:
        with self._changed:
            return key in self._results

    def pending(self) -> int:
        """Jobs submitted and not back yet."""
        with self._changed:
            return sum(1 for r in self._results.values() if r is None)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no job is pending (True), or `timeout` seconds pass (False)."""
        with self._changed:
            return self._changed.wait_for(
                lambda: all(r is not None for r in self._results.values()), timeout)

    def compile_pending_here(self) -> None:
        """End the workers that hold jobs not back yet (taken as hung) and compile those
        jobs in this thread, delivering them as the workers' replies would be."""
        with self._changed:
            taken = {}
            for worker in self._workers:
                if worker.alive and worker.outstanding:
                    self._died(f"a kiln compile worker did not finish its "
                               f"{len(worker.outstanding)} kernel(s) in {WAIT_SECONDS} s; "
                               f"it is ended and they compile in this process")
                    taken.update(worker.outstanding)
                    worker.outstanding.clear()
                    worker.alive, worker.failed = False, True
                    worker.end()
        machines: dict = {}  # this thread's TargetMachines
        for key, (message, deliver) in taken.items():
            self._settle(key, _compiled_here(message, machines), deliver)

    def close(self, stall: float | None = None) -> None:
        """Close the workers' input: each exits after the jobs sent to it. With `stall`
        (at exit), first wait while each takes the jobs queued for it (ending one that
        takes none for `stall` seconds)."""
        with self._changed:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()
        if stall is not None:
            for worker in workers:
                worker.finish(stall)

    def _worker(self) -> _Worker | None:
        self._workers = [w for w in self._workers if w.alive]
        idle = [w for w in self._workers if not w.outstanding]
        if idle:
            return idle[0]
        if len(self._workers) < self.size and self.deaths < MAX_WORKER_DEATHS:
            try:
                worker = _Worker(self, self._started)
            except OSError as e:
                warnings.warn(f"kiln could not start a compile worker ({e}); kernels compile "
                              f"in this process", RuntimeWarning, stacklevel=4)
                self.size = len(self._workers)
            else:
                self._started += 1
                self._workers.append(worker)
                return worker
        return min(self._workers, key=lambda w: len(w.outstanding), default=None)

    def _died(self, why: str) -> None:
        """Count a worker that died or hung, warning `why`; once MAX_WORKER_DEATHS have,
        say (once) that no more start. Call with the lock held."""
        self.deaths += 1
        warnings.warn(why, RuntimeWarning)
        if self.deaths == MAX_WORKER_DEATHS:
            warnings.warn(f"{self.deaths} kiln compile workers died or hung: no more start, "
                          f"and kernels compile in this process from now on", RuntimeWarning)

    def _read(self, worker: _Worker) -> None:
        """The reader thread of `worker`: files its replies until its output ends."""
        stream = worker.process.stdout
        while True:
            try:
                reply = receive(stream)
            except (OSError, pickle.UnpicklingError, EOFError):
                reply = None
            if reply is None:
                break
            key, functions, object_code, error, seconds = reply
            with self._changed:
                job = worker.outstanding.pop(key, None)
            if job is not None:  # (None: taken from it, compiled by the caller)
                self._settle(key, Result(tuple(functions), object_code, error, seconds or {}),
                             job[1])
        try:  # its output is closed: it is exiting (outside the lock: a wait)
            worker.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with self._changed:
            self._lost(worker)

    def _settle(self, key: str, result: Result, deliver: Callable) -> None:
        """File a finished job: its object code delivered (`deliver`, which links it in
        the JIT), or the error kept for `result`; then wake the waiters."""
        if result.error is None:
            try:
                deliver(result)
            except Exception as failure:  # noqa: BLE001 - the caller compiles it itself
                result = Result(error=f"delivering it failed: {failure}")
            else:
                result = None  # in the JIT's memory now: nothing to keep here
        with self._changed:
            if result is None:
                self._results.pop(key, None)
            else:
                self._results[key] = result
            self._changed.notify_all()

    def _lost(self, worker: _Worker) -> None:
        """`worker` is gone (its output ended): its jobs fail, so that their callers
        compile them; no more work goes to it (a died one counts towards
        MAX_WORKER_DEATHS). Call with the lock held."""
        if not worker.alive:
            return
        worker.alive = False
        code = worker.process.poll()
        worker.failed = code != 0  # an idle worker leaves with 0
        for key in worker.outstanding:
            self._results[key] = Result(error=f"the compile worker exited (code {code})")
        if worker.failed:
            self._died(f"a kiln compile worker exited (code {code})" + (
                f" with {len(worker.outstanding)} kernel(s) to compile; they compile in "
                f"this process" if worker.outstanding else ""))
        worker.outstanding.clear()
        self._changed.notify_all()


def _compiled_here(message: tuple, machines: dict) -> Result:
    """A job's message compiled in this thread, as a worker would (`machines`: the
    thread's TargetMachines)."""
    from runtime.llvm.compile import compile_job
    try:
        entry = compile_job(pickle.loads(message[1]), machines)
    except Exception as error:  # noqa: BLE001 - kept: the JIT compiles it again, raising it
        return Result(error=f"{type(error).__name__}: {error}")
    return Result(entry.functions, entry.object_code)


_service: CompileService | InlineService | None = None
_service_lock = threading.Lock()


def service() -> CompileService | InlineService | None:
    """This process's compile service, made on first use; None where
    KILN_COMPILE_WORKERS is 0. A process forked from one that had a service makes its
    own (the workers and their pipes belong to the parent)."""
    global _service
    found = _service
    if found is not None and found.pid == os.getpid():
        return found
    with _service_lock:
        if _service is None or _service.pid != os.getpid():
            workers = configured_workers()
            _service = InlineService() if workers == INLINE else \
                CompileService(workers) if workers else None
            if _service is not None:
                atexit.register(_close_at_exit, _service)
        return _service


def _close_at_exit(found: CompileService | InlineService) -> None:
    if found.pid == os.getpid():  # (a forked child inherits the parent's atexit calls)
        found.close(EXIT_STALL_SECONDS)


def reset() -> None:
    """Close the service (if any) so that the next `service()` reads
    KILN_COMPILE_WORKERS again (tests change it)."""
    global _service
    with _service_lock:
        if _service is not None and _service.pid == os.getpid():
            _service.close()
        _service = None


def submitted() -> int:
    """Kernels handed to this process's background workers so far."""
    found = _service
    return found.submitted if found is not None and found.pid == os.getpid() else 0


def pending() -> int:
    """Kernels handed to this process's background workers and not back yet."""
    found = _service
    if found is None or found.pid != os.getpid() or found.inline:
        return 0
    return found.pending()


def wait_for_kernels(timeout: float | None = None) -> bool:
    """Block until every kernel submitted to the background workers is compiled (True),
    or `timeout` seconds pass (False). Without a timeout, wait WAIT_SECONDS (60 s) at
    most: then the workers still holding kernels are taken as hung and ended, and their
    kernels compile in this thread, so that this always returns True with every kernel
    ready. The next call of a compiled function then runs them natively."""
    found = _service
    if found is None or found.pid != os.getpid():
        return True
    if timeout is not None:
        return found.wait(timeout)
    if not found.wait(WAIT_SECONDS):
        found.compile_pending_here()
    return True
