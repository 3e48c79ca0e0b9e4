"""The repository's layers, lowest first: ir < runtime < eager < compiler < benchmarks. No
module imports one of a higher layer, at module level or inside a function, but where
ALLOWED says why; and no import circle joins modules of runtime, or runtime's
sub-packages, or the layers themselves (tests/eager/test_import_layers.py orders eager's
own modules)."""
from __future__ import annotations

import functools

import networkx as nx

from tests.imports import ROOT, imports, module_name

LAYERS = ("ir", "runtime", "eager", "compiler", "benchmarks")
RANK = {layer: i for i, layer in enumerate(LAYERS)}

ALLOWED = {
    # (importer, imported): why it goes up a layer
    ("eager", "compiler"): "eager.compile() is torch.compile: it loads the compiler on "
                           "first use, as torch.compile loads dynamo",
}

RUNTIME_PARTS = ("runtime.llvm", "runtime.cpu", "runtime.cuda")
"""runtime's sub-packages; its other modules (pool, fastcall, layout ...) are its base."""


@functools.cache
def _edges() -> tuple:
    """(importer, imported, line) over every module of the layers."""
    return tuple((module_name(path), imported, line)
                 for layer in LAYERS for path in sorted((ROOT / layer).rglob("*.py"))
                 for imported, line, _ in imports(path) if imported.partition(".")[0] in RANK)


def _graph(part) -> nx.DiGraph:
    """Every import as an edge between the parts `part(module)` names (None: left out)."""
    graph = nx.DiGraph()
    for importer, imported, _ in _edges():
        a, b = part(importer), part(imported)
        if a is not None and b is not None and a != b and \
                (importer.partition(".")[0], imported.partition(".")[0]) not in ALLOWED:
            graph.add_edge(a, b)
    return graph


def _circles(graph: nx.DiGraph) -> list[list[str]]:
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def _runtime_part(module: str) -> str | None:
    if not module.startswith("runtime."):
        return None
    return next((p for p in RUNTIME_PARTS if module == p or module.startswith(p + ".")),
                "runtime (base)")


def test_no_module_imports_a_higher_layer():
    upward = [f"{importer} imports {imported} (line {line})"
              for importer, imported, line in _edges()
              if RANK[imported.partition(".")[0]] > RANK[importer.partition(".")[0]]
              and (importer, imported.partition(".")[0]) not in ALLOWED]
    assert upward == []


def test_every_allowed_upward_import_is_still_made():
    made = {(importer, imported.partition(".")[0]) for importer, imported, _ in _edges()}
    assert sorted(set(ALLOWED) - made) == []


def test_the_layers_import_each_other_in_one_direction():
    assert _circles(_graph(lambda m: m.partition(".")[0])) == []


def test_no_import_circle_among_runtime_modules():
    assert _circles(_graph(lambda m: m if m.startswith("runtime.") else None)) == []


def test_runtime_parts_import_each_other_in_one_direction():
    """llvm (the toolkit, JIT and cache) under cpu and cuda; neither of those imports the
    other's code generators through a circle."""
    assert _circles(_graph(_runtime_part)) == []


def test_ir_imports_nothing_of_the_project_but_itself():
    others = [f"{importer} imports {imported}" for importer, imported, _ in _edges()
              if importer.startswith("ir") and not imported.startswith("ir")]
    assert others == []


def test_import_eager_loads_no_code_generator():
    """`import eager` (its time is a benchmark) loads none of llvmlite, networkx or the
    compiler: the native layer loads with the first kernel."""
    import subprocess
    import sys
    code = ("import sys, eager; print(sorted(m for m in ('llvmlite', 'networkx', 'compiler', "
            "'runtime.llvm.jit', 'runtime.cpu.kernel_ir') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    assert done.stdout.strip() == "[]"
