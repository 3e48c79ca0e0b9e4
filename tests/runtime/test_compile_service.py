"""Kernels compiled by background worker processes (runtime/llvm/compile_service.py): the
protocol, the JIT's deferred loads, and a compiled function whose first call runs
interpreted while its kernels compile, then natively; failures fall back to compiling in
the calling process. The rest of the suite runs with KILN_COMPILE_WORKERS=0
(tests/conftest.py)."""
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import eager
from compiler.backends.native.gemm_node import GemmNode
from compiler.backends.native.pointwise import PointwiseNode
from runtime.llvm import cache, compile_service
from runtime.llvm.cache import TMP_PREFIX, KernelCache
from runtime.llvm.compile_service import ROOT, CompileService, Job, configured_workers
from runtime.llvm.jit import HostJit, KernelPending, deferring
from runtime_kernels import ADD_ONE, add_one, add_one_module, unique_name
from tests.processes import reads_proc, running


@pytest.fixture
def workers(tmp_path, monkeypatch):
    """One background worker for this test, and a kernel cache of its own."""
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "1")
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    compile_service.reset()
    yield compile_service.service()
    compile_service.reset()


def _adds_one(address: int) -> None:
    x = np.zeros(4, np.float32)
    ADD_ONE(address)(x.ctypes.data, 1, 3)
    np.testing.assert_array_equal(x, [0, 1, 1, 0])


def _job(jit: HostJit, name: str, source) -> Job:
    return Job(f"test-{name}", source, 2, jit.cpu_name, jit.features, jit.triple,
               str(jit.target_machine.target_data))


def test_a_worker_compiles_ir_text_and_delivers_object_code(workers):
    jit, name = HostJit(), unique_name()
    delivered = []
    workers.submit(_job(jit, name, str(add_one_module(jit, name))).message(),
                   delivered.append)
    assert workers.wait(timeout=60)
    (result,) = delivered
    assert result.error is None and result.functions == (name,)
    assert result.object_code.startswith(b"\x7fELF")
    assert set(result.seconds) == {"ir", "parse", "optimise", "machine_code"}
    with pytest.raises(KeyError):  # delivered: nothing kept for it
        workers.result(f"test-{name}")


def test_ir_the_worker_cannot_compile_comes_back_as_an_error(workers):
    jit = HostJit()
    delivered = []
    workers.submit(_job(jit, "bad", "define void @broken( {").message(), delivered.append)
    assert workers.wait(timeout=60)
    assert delivered == []
    failed = workers.result("test-bad")
    assert "error" in failed.error.lower() and failed.object_code == b""


def test_a_job_that_does_not_pickle_has_no_message():
    jit = HostJit()
    job = _job(jit, "closure", ("name", lambda module: None))
    assert job.message() is None
    assert job.with_source("; text").message()[0] == job.key


def test_deferred_load_raises_pending_then_links_the_workers_object_code(workers):
    jit, name, built = HostJit(), unique_name(), []

    def build(module):  # a closure: its IR text is what the worker gets
        built.append(name)
        add_one(module, name)
    with deferring():
        with pytest.raises(KernelPending):
            jit.load_spec(name, f"add_one {name}", build, [name])
        assert built == [name]  # built here, once
        assert workers.wait(timeout=60)
        assert compile_service.pending() == 0
        address = jit.load_spec(name, f"add_one {name}", build, [name])[name]
    _adds_one(address)
    assert built == [name] and workers.submitted == 1
    assert jit.cache.path(jit.cache_key(f"O3 add_one {name}", kind="kiln-cpu-spec-1")).exists()
    # another process (a new engine) finds the worker's entry on disk: nothing compiles
    again = HostJit()
    assert again.load_spec(name, f"add_one {name}", build, [name])[name]
    assert built == [name]


def no_passwd_entry(uid):
    raise KeyError(f"getpwuid(): uid not found: {uid}")


def test_without_a_cache_directory_a_job_names_none(tmp_path, monkeypatch):
    """HOME unset and no passwd entry: a job named the directory 'None', and the worker
    wrote the entry under that name in its working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "1")
    monkeypatch.delenv("KILN_CACHE_DIR")
    monkeypatch.delenv("HOME")
    monkeypatch.setattr(pwd, "getpwuid", no_passwd_entry)
    cache._warn_without_directory.cache_clear()  # warned once per process
    compile_service.reset()
    name = unique_name()

    def build(module):
        add_one(module, name)
    try:
        with pytest.warns(RuntimeWarning, match="has no directory") as caught, deferring():
            workers, jit = compile_service.service(), HostJit()
            with pytest.raises(KernelPending):
                jit.load_spec(name, f"add_one {name}", build, [name])
            assert workers.wait(timeout=60)
            _adds_one(jit.load_spec(name, f"add_one {name}", build, [name])[name])
        assert sum("has no directory" in str(w.message) for w in caught) == 1
    finally:
        compile_service.reset()
    assert list(tmp_path.iterdir()) == []


def test_outside_deferring_a_load_compiles_here(workers):
    jit, name = HostJit(), unique_name()
    _adds_one(jit.load_spec(name, f"add_one {name}", lambda m: add_one(m, name), [name])[name])
    assert workers.submitted == 0


_fresh = iter(range(5, 1000))


def _mlp_and_inputs():
    """A small MLP and its inputs, with a size and a constant no other test used: the
    kernels compiled in this process before are found in memory (GEMMs are keyed by
    their sizes, elementwise kernels by their graphs)."""
    rng, k = np.random.default_rng(0), next(_fresh)

    def mlp(x, w1, b1, w2):
        return ((x @ w1 + b1).relu() @ w2 * (1.0 + k / 1000)).softmax(-1)
    return mlp, [eager.tensor(rng.standard_normal(shape, dtype=np.float32))
                 for shape in ((7, k), (k, 6), (6,), (6, 3))]


def _kernels(fn):
    entry, = fn.entries.values()
    return list(entry.run.kernels.values())


def test_first_call_runs_interpreted_while_workers_compile_then_natively(workers):
    mlp, inputs = _mlp_and_inputs()
    expected = mlp(*inputs).numpy()
    fn = eager.compile(mlp)
    np.testing.assert_allclose(fn(*inputs).numpy(), expected, rtol=1e-5, atol=1e-6)
    kernels = _kernels(fn)
    assert any(isinstance(k, GemmNode) for k in kernels)
    assert all(k.calls_while_compiling <= 1 for k in kernels)
    assert any(k.calls_while_compiling for k in kernels if isinstance(k, PointwiseNode))
    assert "while background workers compiled them" in fn.explain()
    assert "handed to background compile workers" in fn.explain()
    for _ in range(4):  # a GEMM's epilogue kernel is planned once the GEMM runs
        assert compile_service.wait_for_kernels(timeout=120)
        np.testing.assert_allclose(fn(*inputs).numpy(), expected, rtol=1e-5, atol=1e-6)
    waited = [k.calls_while_compiling for k in kernels]
    assert compile_service.wait_for_kernels(timeout=120)
    fn(*inputs)
    assert [k.calls_while_compiling for k in kernels] == waited  # native now
    assert all(k.artifacts for k in kernels if isinstance(k, PointwiseNode))


def test_compiled_backward_through_workers_matches_eager(workers):
    mlp, inputs = _mlp_and_inputs()
    for t in inputs[1:]:
        t.requires_grad_(True)
    fn = eager.compile(mlp)
    weights = eager.tensor(np.arange(3, dtype=np.float32))
    for step in range(3):
        (fn(*inputs) * weights).sum().backward()
        got = [t.grad.numpy().copy() for t in inputs[1:]]
        for t in inputs[1:]:
            t.grad = None
        (mlp(*inputs) * weights).sum().backward()
        for g, t in zip(got, inputs[1:]):
            np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-4, atol=1e-6)
            t.grad = None
        assert compile_service.wait_for_kernels(timeout=120)


def _started(workers):
    """The worker that a first job starts (its IR does not parse: nothing is linked)."""
    workers.submit(_job(HostJit(), unique_name("start"), "; starts a worker").message(),
                   lambda done: None)
    assert workers.wait(timeout=60)
    return next(w for w in workers._workers if w.alive)


def _killed(worker) -> None:
    """SIGKILL `worker` and wait until its reader has filed it as gone."""
    os.kill(worker.process.pid, signal.SIGKILL)
    worker.process.wait(timeout=60)
    deadline = time.monotonic() + 30
    while worker.alive and time.monotonic() < deadline:  # its reader sees the pipe close
        time.sleep(0.01)
    assert not worker.alive and worker.failed


def _add_one_job(jit: HostJit):
    """An add_one kernel's name, its job's message and a list for its deliveries."""
    name, delivered = unique_name(), []
    return name, _job(jit, name, str(add_one_module(jit, name))).message(), delivered


def test_a_killed_worker_is_replaced_by_a_new_one_for_the_next_kernel(workers):
    first = _started(workers)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (it says the worker exited)
        _killed(first)
    name, message, delivered = _add_one_job(HostJit())
    workers.submit(message, delivered.append)
    assert workers.wait(timeout=60)
    (result,) = delivered  # compiled by a worker, not left to this process
    assert result.functions == (name,) and result.seconds
    (second,) = workers._workers
    assert second.alive and second.process.pid != first.process.pid


def test_the_kernels_of_a_worker_that_dies_come_back_as_errors_for_this_process(workers):
    worker = _started(workers)
    os.kill(worker.process.pid, signal.SIGSTOP)  # holds the job until it is killed
    name, message, delivered = _add_one_job(HostJit())
    workers.submit(message, delivered.append)
    with pytest.warns(RuntimeWarning, match=r"with 1 kernel\(s\) to compile"):
        _killed(worker)
    assert workers.wait(timeout=60) and delivered == []
    assert "the compile worker exited (code -9)" in workers.result(f"test-{name}").error


def test_workers_that_keep_dying_leave_kernels_to_this_process_saying_so_once(workers):
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        for _ in range(compile_service.MAX_WORKER_DEATHS):
            _killed(_started(workers))
        mlp, inputs = _mlp_and_inputs()
        expected = mlp(*inputs).numpy()
        fn = eager.compile(mlp)
        for _ in range(3):
            np.testing.assert_allclose(fn(*inputs).numpy(), expected, rtol=1e-5, atol=1e-6)
            assert compile_service.wait_for_kernels(timeout=60)
    given_up = [w for w in warned if "no more start" in str(w.message)]
    assert len(given_up) == 1 and workers._workers == []
    kernels = _kernels(fn)  # compiled here, each before its first call
    assert all(k.calls_while_compiling == 0 for k in kernels)
    assert all(k.artifacts for k in kernels if isinstance(k, PointwiseNode))


def test_waiting_without_a_timeout_ends_a_hung_worker_and_compiles_its_kernels_here(
        workers, monkeypatch):
    monkeypatch.setattr(compile_service, "WAIT_SECONDS", 1.0)
    worker = _started(workers)
    jit, name, built = HostJit(), unique_name(), []

    def build(module):
        built.append(name)
        add_one(module, name)
    os.kill(worker.process.pid, signal.SIGSTOP)
    try:
        with deferring(), pytest.raises(KernelPending):
            jit.load_spec(name, f"add_one {name}", build, [name])
        waited = []
        waiter = threading.Thread(target=lambda: waited.append(
            compile_service.wait_for_kernels()), daemon=True)
        with pytest.warns(RuntimeWarning, match="did not finish its 1 kernel"):
            waiter.start()
            waiter.join(timeout=120)
        assert waited == [True] and compile_service.pending() == 0
        assert worker.process.wait(timeout=60) == -signal.SIGKILL  # ended, not left stopped
    finally:
        if worker.process.poll() is None:  # a failure left it stopped: the waiter ends
            worker.process.kill()
    with deferring():  # linked by the wait: found in memory, nothing compiled again
        _adds_one(jit.load_spec(name, f"add_one {name}", build, [name])[name])
    assert built == [name]
    assert jit.cache.path(jit.cache_key(f"O3 add_one {name}", kind="kiln-cpu-spec-1")).exists()


def _exit_right_after_handing_out(tmp_path, count: int, *flags: str):
    """Run compile_service_exit.py: (its worker's pid, the keys of the kernels it handed
    out, its stderr) once it has exited (it must, well within the harness's bound)."""
    env = dict(os.environ, KILN_COMPILE_WORKERS="1", KILN_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests", "runtime")]))
    script = os.path.join(ROOT, "tests", "runtime", "compile_service_exit.py")
    with open(tmp_path / "stderr", "w+") as stderr:  # a file: the worker inherits it
        done = subprocess.run([sys.executable, script, str(count), *flags], env=env,
                              stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=300)
        stderr.seek(0)
        errors = stderr.read()
    assert done.returncode == 0, errors
    pid, *keys = done.stdout.split()
    return int(pid), keys, errors


def _gone(pid: int) -> bool:
    """Whether worker `pid`, left by a process that exited, exits too (killed if not)."""
    deadline = time.monotonic() + 120  # generous: it compiles what it was sent first
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if running(pid):
        os.kill(pid, signal.SIGKILL)  # not left behind by a failing test
        return False
    return True


@reads_proc
def test_kernels_handed_out_just_before_exit_reach_the_disk_cache(tmp_path):
    pid, keys, stderr = _exit_right_after_handing_out(tmp_path, 200)
    assert "Traceback" not in stderr
    assert len(keys) == 200 and _gone(pid)
    cache = KernelCache(tmp_path / "cache")
    assert all(cache.read(key) is not None for key in keys)
    assert not list(tmp_path.glob(f"cache/**/{TMP_PREFIX}*"))


@reads_proc
def test_a_stopped_worker_at_exit_is_ended_leaving_whole_entries_or_none(tmp_path):
    pid, keys, stderr = _exit_right_after_handing_out(tmp_path, 200, "--stopped")
    assert "Traceback" not in stderr
    assert len(keys) == 200 and _gone(pid)  # not left stopped for ever
    cache = KernelCache(tmp_path / "cache")
    assert all(cache.read(key) is not None for key in keys if cache.path(key).exists())
    assert not list(tmp_path.glob(f"cache/**/{TMP_PREFIX}*"))


def test_no_workers_means_no_service(monkeypatch):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", "0")
    compile_service.reset()
    try:
        assert compile_service.service() is None
        assert compile_service.wait_for_kernels() and compile_service.submitted() == 0
        assert compile_service.pending() == 0
    finally:
        compile_service.reset()


@pytest.mark.parametrize("value", ["two", "-1"])
def test_a_bad_worker_count_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv("KILN_COMPILE_WORKERS", value)
    with pytest.raises(ValueError, match="KILN_COMPILE_WORKERS"):
        configured_workers()


def test_the_default_leaves_a_core_to_the_caller(monkeypatch):
    monkeypatch.delenv("KILN_COMPILE_WORKERS")
    cores = len(os.sched_getaffinity(0))
    assert configured_workers() == max(1, min(compile_service.MAX_WORKERS, cores - 1))


def test_a_service_needs_a_worker():
    with pytest.raises(ValueError, match="at least one worker"):
        CompileService(0)


def test_the_benchmarks_settle_a_compiled_function_until_every_kernel_is_native(workers):
    from benchmarks.harness import settle
    mlp, inputs = _mlp_and_inputs()
    fn = eager.compile(mlp)
    fn(*inputs)
    kernels = _kernels(fn)
    assert any(k.calls_while_compiling for k in kernels)
    settle(lambda: fn(*inputs))
    waited = [k.calls_while_compiling for k in kernels]
    fn(*inputs)
    assert [k.calls_while_compiling for k in kernels] == waited


def test_lower_compiles_its_kernels_itself(workers):
    import compiler
    mlp, inputs = _mlp_and_inputs()
    fn = eager.compile(mlp)
    fn(*inputs)  # handed to the worker
    lowered = compiler.lower(fn, *inputs)
    assert lowered.kernels and all("define" in k.llvm_ir for k in lowered.kernels)
    assert any(isinstance(k, PointwiseNode) and k.artifacts for k in _kernels(fn))


def test_an_idle_worker_exits_and_another_starts_for_the_next_kernel(workers, monkeypatch):
    monkeypatch.setattr(workers, "idle_seconds", 0.2)
    jit = HostJit()
    for round in range(2):
        name, delivered = unique_name(), []
        workers.submit(_job(jit, name, str(add_one_module(jit, name))).message(),
                       delivered.append)
        assert workers.wait(timeout=60) and delivered[0].functions == (name,)
        (worker,) = workers._workers
        assert worker.process.wait(timeout=30) == 0  # left without work
        deadline = time.monotonic() + 30
        while worker.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not worker.alive and not worker.failed
