"""docs/ARCHITECTURE.md is a short map, and what it states that code can check is checked:
the layers, the dispatch keys' order, the passes' order and the paths it names."""
from __future__ import annotations

import re

from compiler.passes import PIPELINE
from eager.dispatcher import RUNTIME_KEYS
from tests.imports import ROOT
from tests.test_layering import LAYERS

MAP = (ROOT / "docs" / "ARCHITECTURE.md").read_text()


def _stated(prefix: str, separator: str) -> list[str]:
    (line,) = [ln for ln in MAP.splitlines() if ln.startswith(prefix)]
    return [part.strip() for part in line[len(prefix):].split(separator)]


def test_the_map_is_short():
    assert len(MAP.splitlines()) <= 250


def test_the_layers_are_the_ones_the_layering_test_enforces():
    assert _stated("Layers, lowest first:", "<") == list(LAYERS)


def test_the_dispatch_keys_are_in_the_dispatchers_order():
    order = [k.name for k in sorted(RUNTIME_KEYS, reverse=True)]
    assert _stated("Dispatch keys, highest priority first:", ",") == order


def test_the_passes_are_in_the_pipelines_order():
    assert _stated("Passes, in order:", ",") == [name for name, _ in PIPELINE]


def test_every_path_it_names_exists():
    named = set(re.findall(r"`((?:ir|runtime|eager|compiler|benchmarks|tests|docs)/[\w/.*<>-]+)`",
                           MAP))
    missing = [path for path in sorted(named) if "<" not in path and "*" not in path
               and not (ROOT / path).exists()]
    assert missing == []
