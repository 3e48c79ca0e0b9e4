"""Choosing the CPU target: LLVM's features of a named CPU, forced features, refusing
unknown names and targets this machine cannot run, and KILN_CPU reaching the code the
host JIT generates."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import llvmlite.ir as ir
import numpy as np
import pytest

from runtime.llvm import target
from runtime.llvm.jit import HostJit
from runtime.llvm.target import CpuTargetError

ROOT = Path(__file__).resolve().parents[2]
AVX512 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


def test_a_named_cpu_has_the_features_llvm_gives_it():
    haswell = target.named("haswell")
    assert {"avx", "avx2", "fma", "bmi2", "f16c", "sse4.2"} <= haswell.enabled
    assert not haswell.enabled & AVX512
    assert haswell.vector_width == 8 and haswell.name == "haswell"
    assert AVX512 <= target.named("skylake-avx512").enabled
    assert target.named("skylake-avx512").vector_width == 16
    assert target.named("x86-64").vector_width == 4


def test_the_inliner_reads_this_machines_features_as_llvm_detects_them():
    """The probe behind `named`, run on the host's own CPU and feature string, agrees
    feature for feature with LLVM's detection of this CPU."""
    assert target.named(None).enabled == target.host().enabled


def test_forced_features_go_on_top_of_the_cpu():
    narrowed = target.named("skylake-avx512", "-avx512f")
    assert not narrowed.enabled & AVX512  # what needs AVX-512F goes with it
    assert narrowed.vector_width == 8 and narrowed.name == "skylake-avx512,-avx512f"
    assert "avx512f" in target.named("haswell", " +avx512f ").enabled


@pytest.mark.parametrize("cpu, forced, message", [
    ("notacpu", "", "LLVM knows no CPU named 'notacpu'"),
    ("haswell", "+notafeature", "LLVM knows no feature named 'notafeature'"),
    ("haswell", "avx2", "item 'avx2' must be \\+name or -name"),
])
def test_an_unknown_name_is_an_error_naming_it(cpu, forced, message):
    with pytest.raises(CpuTargetError, match=message):
        target.named(cpu, forced)


def test_a_target_needing_features_this_machine_lacks_is_refused_naming_them():
    avx2_machine = target.named("znver3")
    with pytest.raises(CpuTargetError, match="cannot run code for znver4: it lacks .*avx512f"
                                             ".*KILN_CPU_FEATURES=.*-avx512f"):
        target.require_runnable(target.named("znver4"), avx2_machine)
    target.require_runnable(target.named("haswell"), avx2_machine)


def test_the_machine_compiles_for_the_target(tmp_path, monkeypatch):
    """The same <16 x float> add becomes zmm code for an AVX-512 CPU and ymm code for an
    AVX2 one; the AVX2 code runs here and adds."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    haswell = target.named("haswell")
    jits = {cpu: HostJit(target=target.named(cpu)) for cpu in ("haswell", "skylake-avx512")}
    module = _add_lanes_module(jits["haswell"], "kiln_test_target_add_lanes")
    assert "zmm" not in jits["haswell"].assembly(module)
    assert "ymm" in jits["haswell"].assembly(module)
    assert "zmm" in jits["skylake-avx512"].assembly(module)
    try:
        target.require_runnable(haswell, target.host())
    except CpuTargetError as lacking:
        pytest.skip(str(lacking))
    address = jits["haswell"].load(module)["kiln_test_target_add_lanes"]
    data = np.arange(16, dtype=np.float32)
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)(data.ctypes.data)
    np.testing.assert_array_equal(data, 2 * np.arange(16))


def test_the_cache_key_follows_the_target():
    jits = [HostJit(target=target.named(cpu)) for cpu in ("haswell", "znver3")]
    module = _add_lanes_module(jits[0], "kiln_test_target_keyed")
    assert jits[0].cache_key(module) != jits[1].cache_key(module)


def _add_lanes_module(jit, name):
    """void name(<16 x float>* x): x += x."""
    module = jit.new_module(name)
    v16 = ir.VectorType(ir.FloatType(), 16)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType(v16)]), name)
    b = ir.IRBuilder(fn.append_basic_block())
    x = b.load(fn.args[0], align=4)
    b.store(b.fadd(x, x), fn.args[0], align=4)
    b.ret_void()
    return module


PROGRAM = """
from runtime.llvm import jit, target
from benchmarks import limits
print(target.selected().name, jit.vector_width(), jit.host_jit().cpu_name)
print("zmm" in jit.host_jit().assembly(limits.build_fma_kernel(16, chains=2)))
"""


def run_with(**env):
    return subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(ROOT), **env))


def test_kiln_cpu_reaches_the_engine_and_its_code():
    done = run_with(KILN_CPU="haswell", KILN_CPU_FEATURES="")
    if "lacks" in done.stderr:
        pytest.skip("this machine cannot run haswell code")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["haswell", "8", "haswell", "False"]


def test_kiln_cpu_features_alone_narrow_this_machine():
    done = run_with(KILN_CPU="", KILN_CPU_FEATURES="-avx512f")
    assert done.returncode == 0, done.stderr
    name, width, cpu, zmm = done.stdout.split()
    assert name == f"{target.host().cpu},-avx512f" and width in ("4", "8") and zmm == "False"


def test_an_unknown_kiln_cpu_stops_with_its_name():
    done = run_with(KILN_CPU="notacpu")
    assert done.returncode != 0
    assert "CpuTargetError: KILN_CPU=notacpu: LLVM knows no CPU named 'notacpu'" in done.stderr
    assert "is not a recognized processor" not in done.stderr  # LLVM's own warning is eaten


def test_ci_runs_the_readmes_tests_then_the_code_generators_for_avx2():
    script = (ROOT / ".ci" / "run").read_text().replace("\\\n", " ")
    commands = [line.split() for line in script.splitlines() if "pytest" in line]
    readme = (ROOT / "README.md").read_text()
    assert len(commands) == 2 and " ".join(commands[0]) in readme
    environment, *command = commands[1]
    assert environment == "KILN_CPU=haswell" and command[:4] == ["python", "-m", "pytest", "-q"]
    files = {found.name for pattern in command[4:] for path in ROOT.glob(pattern)
             for found in (path.rglob("test_*.py") if path.is_dir() else [path])}
    assert {"test_vmath.py", "test_native.py", "test_gemm.py", "test_gemm_small.py"} <= files


def test_the_target_is_remembered_on_disk_and_read_back_without_llvm(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    measured = target._remembered()
    cpu = os.environ.get("KILN_CPU") or target.host().cpu  # (the haswell pass names one)
    assert measured == target._measure() and measured["target"]["cpu"] == cpu

    def refuse():
        raise AssertionError("LLVM was asked again")
    monkeypatch.setattr(target, "_measure", refuse)
    assert target._remembered() == measured


@pytest.mark.parametrize("payload", [b"not json", b'{"target": 1}',
                                     b'{"target": {"cpu": 1, "features": "", "enabled": [],'
                                     b' "forced": ""}, "triple": "", "llvm_version": ""}'])
def test_remembered_facts_that_are_not_what_kiln_writes_are_measured_again(
        tmp_path, monkeypatch, payload):
    from runtime.llvm import cache
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    key = target.remembered_key()
    (tmp_path / f"{key}{cache.SUFFIX}").write_bytes(cache.encode(key, cache.Entry((), payload)))
    assert target._remembered() == target._measure()


def test_the_remembered_targets_key_follows_kiln_cpu_and_its_features(monkeypatch):
    keys = set()
    for cpu, features in (("", ""), ("haswell", ""), ("", "-avx512f")):
        monkeypatch.setenv("KILN_CPU", cpu)
        monkeypatch.setenv("KILN_CPU_FEATURES", features)
        keys.add(target.remembered_key())
    assert len(keys) == 3 and None not in keys
