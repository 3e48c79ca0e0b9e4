"""The suites: every case runs through the harness on tiny sizes and every contender that
is available here passes the correctness gate, checked and then timed once (ONCE). No
timing is asserted.

Sizes are shrunk by patching each suite's size constants; torch runs on one thread so a
busy neighbour cannot stall its thread pool. torch.compile is left out (as in --quick)
except in the slow test, because its first call takes ~20 s.
"""
import dataclasses

import pytest
from bench_helpers import ONCE

from benchmarks import (bf16, compile_overhead, conv, elementwise, gemm, registry, reductions,
                        train)
from benchmarks.contenders import SLOW_TO_START, Lineup
from benchmarks.harness import run_case, run_suite

NEW_SUITES = ["elementwise", "reductions", "gemm", "conv", "mlp_train", "transformer_train",
              "compile_overhead", "bf16"]


@pytest.fixture
def tiny_sizes(monkeypatch):
    for module, name, value in (
            (elementwise, "QUICK_ROWS", 3), (elementwise, "COLUMNS", 16),
            (reductions, "QUICK_SHAPE", (6, 10)),
            (gemm, "QUICK_SQUARES", (8,)), (gemm, "QUICK_SQUARES_F64", (9,)),
            (gemm, "QUICK_AWKWARD", ((32, 8, 4),)), (gemm, "QUICK_BATCHED", (2, 4, 3, 5)),
            (gemm, "LINEAR", (4, 6, 5)), (conv, "QUICK", (2, 3, 6, 4)),
            (train, "BATCHES", 2), (train, "MLP_HIDDEN", 16), (train, "MLP_BATCH", 8),
            (train, "D_MODEL", 16), (train, "HEADS", 2), (train, "CONTEXT", 8),
            (train, "TEXT_BATCH", 2), (compile_overhead, "COMPILES", 3),
            (bf16, "QUICK_SQUARES", (8,))):
        monkeypatch.setattr(module, name, value)


def test_the_new_suites_are_registered_and_runnable_here():
    assert set(NEW_SUITES) <= set(registry.SUITES)
    for name in NEW_SUITES:
        assert registry.SUITES[name].why_skipped() is None, name


def test_a_module_can_hold_several_suites():
    assert registry.SUITES["mlp_train"].module == "benchmarks.train:mlp_cases"
    assert registry.SUITES["transformer_train"].module == "benchmarks.train:transformer_cases"


@pytest.mark.parametrize("name", NEW_SUITES)
def test_every_case_passes_the_correctness_gate(name, tiny_sizes):
    result = run_suite(registry.SUITES[name], Lineup(threads=1, quick=True), ONCE)
    assert result.status == "ran" and result.cases
    for case in result.cases:
        for outcome in case.outcomes:
            assert outcome.status in ("ok", "skipped"), (case.case.name, outcome)
            if outcome.status == "ok":
                assert len(outcome.times) == (ONCE.self_timed_rounds if case.case.self_timed
                                              else ONCE.rounds)
    ran = {o.contender for c in result.cases for o in c.outcomes if o.status == "ok"}
    assert "kiln eager" in ran or "kiln compiled" in ran
    if name == "gemm":
        assert {"kiln GEMM", "kiln compiled", "numpy"} <= ran


def test_quick_leaves_torch_compile_out_with_the_reason():
    assert Lineup(quick=True).why_skipped("torch.compile") == SLOW_TO_START["torch.compile"]
    assert "left out (--compare none)" in Lineup(torch="off").why_skipped("torch.compile")
    assert Lineup(quick=True).why_skipped("kiln compiled") is None


def test_training_starts_both_libraries_from_the_same_loss(tiny_sizes):
    """The first step's loss agrees across libraries (each is checked against float64)."""
    pytest.importorskip("torch")
    for case in train.mlp_cases(quick=True) + train.transformer_cases(quick=True):
        kiln, per_tensor, compiled, whole_step, torch = (impl.build()().item()
                                                         for impl in case.impls)
        assert kiln == per_tensor  # the first loss comes before any step
        assert compiled == pytest.approx(kiln, rel=1e-5)
        assert whole_step == pytest.approx(kiln, rel=1e-5)
        assert kiln == pytest.approx(torch, rel=1e-4)
        assert kiln == pytest.approx(case.expected(), rel=1e-4)


@pytest.mark.slow
def test_torch_compile_passes_the_gate(tiny_sizes):
    """torch.compile's first call starts inductor (~20 s); later ones take about 1 s."""
    pytest.importorskip("torch")
    lineup = Lineup(threads=1)
    if lineup.why_skipped("torch.compile"):
        pytest.skip(lineup.why_skipped("torch.compile"))
    add = elementwise.cases(quick=True)[1]
    cases = [case for case in [add, *compile_overhead.cases(quick=True)]
             if any(impl.contender == "torch.compile" for impl in case.impls)]
    # every case but the warm-disk-cache first call (inductor's own caches would need a
    # run of their own to fill) has a torch.compile contender
    checked = {case.name for case in cases}
    assert [case.name for case in compile_overhead.cases(quick=True)
            if case.name not in checked] == ["first call in a fresh process, warm disk cache"]
    for case in cases:  # the other contenders' gates are test_every_case_passes_...'s
        alone = dataclasses.replace(case, impls=[impl for impl in case.impls
                                                 if impl.contender == "torch.compile"])
        for outcome in run_case(alone, lineup, ONCE).outcomes:
            assert outcome.status == "ok", outcome


def test_fusion_suite_reports_what_the_passes_buy():
    from benchmarks import fusion
    text = fusion.notes(quick=True)
    assert "GELU chain" in text and "6 -> 1" in text  # six eager kernels become one
    assert "layer norm rows" in text and "-> 1 " in text


def test_compile_overhead_reports_memory_per_compile_from_fresh_processes(tiny_sizes):
    text = compile_overhead.notes(quick=False)
    assert "over 3 compiles" in text
    assert "compiled " in text and "from disk cache " in text and "MB per 1000" in text
    assert "measured without --quick" in compile_overhead.notes(quick=True)


def test_quick_leaves_full_only_contenders_out_with_the_reason(tiny_sizes):
    (case,) = [c for c in compile_overhead.cases(quick=True)
               if c.name == "first call in a fresh process, empty kernel cache"]
    native = next(i for i in case.impls if i.label.endswith("until all native"))
    native.build = lambda: pytest.fail("a full-only contender was built under --quick")
    case.impls[:] = [native]
    (outcome,) = run_case(case, Lineup(threads=1, quick=True), ONCE).outcomes
    assert outcome.status == "skipped" and outcome.reason.startswith("left out of --quick: ")


def test_fresh_processes_cache_bytecode_as_an_installed_package_has_it(monkeypatch, tmp_path):
    """The first call a user meets: kiln's sources compiled to bytecode once, whatever
    PYTHONDONTWRITEBYTECODE says here."""
    from benchmarks import first_call
    seen = []

    def run(argv, env, **kwargs):
        seen.append(env)
        return type("Done", (), {"stdout": '{"seconds": 0.5}\n'})()
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(first_call.subprocess, "run", run)
    assert first_call.fresh_process("kiln", "six_ops", str(tmp_path)) == 0.5
    first_call.fresh_process("kiln", "six_ops", str(tmp_path))
    assert "PYTHONDONTWRITEBYTECODE" not in seen[0]
    assert seen[0]["PYTHONPYCACHEPREFIX"] == seen[1]["PYTHONPYCACHEPREFIX"]  # one folder
    assert seen[0]["KILN_CACHE_DIR"] == str(tmp_path)
    from benchmarks import eager_overhead
    seen.clear()
    monkeypatch.setattr(eager_overhead.subprocess, "run", lambda argv, env, **kw: seen.append(
        env) or type("Done", (), {"returncode": 0, "stdout": "0.1\n"})())
    assert eager_overhead._import_time("eager")() == 0.1
    assert "PYTHONDONTWRITEBYTECODE" not in seen[0] and "PYTHONPYCACHEPREFIX" in seen[0]


@pytest.mark.slow
def test_model_scale_processes_start_kiln_and_pytorch_from_the_same_model(monkeypatch):
    """The models suite's gate: a GPT step in a kiln process (under the alias) and in a
    PyTorch one, each from the numpy weights, give the same first loss; a disagreeing
    process fails its round."""
    pytest.importorskip("torch")
    from benchmarks import models
    ours = models.run_process("kiln", "gpt_step", "eager", 1, steps=1, warmup=0)
    theirs = models.run_process("torch", "gpt_step", "eager", 1, steps=1, warmup=0)
    assert abs(ours["first_loss"] - theirs["first_loss"]) < 1e-4 * theirs["first_loss"]
    assert len(ours["times"]) == 1 and ours["times"][0] > 0
    resnet = [models.run_process(library, "resnet_step", "eager", 1, steps=1, warmup=0)
              for library in ("kiln", "torch")]  # examples/resnet.py, the same on both
    assert abs(resnet[0]["first_loss"] - resnet[1]["first_loss"]) < 1e-4 * resnet[1]["first_loss"]
    monkeypatch.setattr(models, "run_process", lambda *args: ours)
    losses = {"torch eager": theirs["first_loss"]}
    round_ = models._process_impl("kiln eager", "kiln", "gpt_step", "eager", 1, losses).build()
    assert round_() == ours["times"][0]
    losses["torch eager"] *= 1.01
    with pytest.raises(AssertionError, match="not the same model and data"):
        round_()


def test_model_scale_cases_run_at_one_thread_and_every_core_and_only_in_the_full_run():
    from benchmarks import models
    made = models.cases(quick=True)
    assert len(made) == len(models.WORKLOADS) * len(models.thread_counts())
    assert all(impl.full_only for case in made for impl in case.impls)
    assert {case.rounds for case in made} == {models.ROUNDS}


def test_the_bfloat16_table_names_kiln_s_product_path(monkeypatch):
    """On an AVX512-BF16 CPU kiln's bfloat16 line says vdpbf16ps; elsewhere (or with the
    switch off) it says the operands are widened to a float32 FMA kernel."""
    import numpy as np

    from runtime.cpu.gemm import config
    from runtime.cpu.gemm.kernels import dot_products

    def kiln_labels():
        case = bf16.square(np.random.default_rng(0), 8)
        return [i.label for i in case.impls if i.label.startswith("kiln eager, bfloat16")]
    want = "vdpbf16ps" if dot_products() else "widened, float32 FMA"
    assert kiln_labels() == [f"kiln eager, bfloat16 ({want})"]
    monkeypatch.setattr(config, "BF16_DOT", False)
    assert kiln_labels() == ["kiln eager, bfloat16 (widened, float32 FMA)"]


def test_the_quick_bf16_run_leaves_the_transformer_step_to_the_full_run():
    quick = [case.name for case in bf16.cases(quick=True)]
    full = [case.name for case in bf16.cases(quick=False)]
    transformer = train.transformer_training().name
    assert transformer in full and transformer not in quick
    assert train.mlp_training().name in quick
