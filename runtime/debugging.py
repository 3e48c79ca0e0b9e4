"""One debug switch: KILN_DEBUG=N (or `with debug(N):`). 1 prints each captured graph and
every graph break; 2 adds the graph after each pass; 3 generated code; 4 assembly."""
from __future__ import annotations

import contextlib
import os
import sys
import threading

_local = threading.local()


def level() -> int:
    forced = getattr(_local, "level", None)
    if forced is not None:
        return forced
    try:
        return int(os.environ.get("KILN_DEBUG", "0") or 0)
    except ValueError:
        return 0


@contextlib.contextmanager
def debug(n: int):
    prev = getattr(_local, "level", None)
    _local.level = n
    try:
        yield
    finally:
        _local.level = prev


def banner(title: str, text: str, at_level: int = 1) -> None:
    """Print `text` under a title line when the debug level is at least `at_level`."""
    if level() >= at_level:
        rule = "=" * max(8, 72 - len(title) - 4)
        print(f"== {title} {rule}\n{text.rstrip()}\n", file=sys.stderr)


def show_kernel(jit, name: str, build, speed_level: int) -> None:
    """At debug level 3, print the LLVM IR that `build` puts in a module called `name`;
    at level 4 its machine assembly too (built again: kernels keep no text)."""
    if level() < 3:
        return
    module = jit.new_module(name)
    build(module)
    banner(f"LLVM IR {name}", str(module), at_level=3)
    banner(f"assembly {name}", jit.assembly(module, speed_level), at_level=4)
