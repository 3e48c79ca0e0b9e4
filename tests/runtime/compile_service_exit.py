"""Run by test_compile_service.py in a fresh process (KILN_CACHE_DIR and
KILN_COMPILE_WORKERS=1 from the environment): hands COUNT add-one kernels to the
background compile worker and exits at once, printing the worker's pid and then each
kernel's cache key, a line each.

    compile_service_exit.py COUNT [--stopped]    --stopped: SIGSTOP the worker first
"""
import os
import signal
import sys

from runtime.llvm import compile_service
from runtime.llvm.jit import HostJit, KernelPending, deferring
from runtime_kernels import add_one, unique_name


def main(count: int, stopped: bool) -> None:
    compile_service.EXIT_STALL_SECONDS = 2.0  # (a stopped worker: no need to wait long)
    jit, keys = HostJit(), []
    with deferring():
        for _ in range(count):
            name = unique_name()
            try:  # a closure: its IR text is what the worker gets
                jit.load_spec(name, f"add_one {name}", lambda m, n=name: add_one(m, n), [name])
            except KernelPending as pending:
                keys.append(pending.args[0])
            if len(keys) == 1:
                (worker,) = compile_service.service()._workers
                print(worker.process.pid, flush=True)
                if stopped:
                    os.kill(worker.process.pid, signal.SIGSTOP)
    print("\n".join(keys), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), "--stopped" in sys.argv[2:])
