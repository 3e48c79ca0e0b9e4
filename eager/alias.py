"""Run PyTorch programs on kiln unmodified: `import torch` gives kiln's `eager`, and every
module name under it, `torch.X.Y`, gives kiln's module `eager.X.Y` itself (one module
object per name, never a second copy: `torch.nn.modules.conv.Conv2d is torch.nn.Conv2d`,
so isinstance checks hold). The `torch` distribution's metadata says the PyTorch API kiln
follows: `importlib.metadata.version("torch") == torch.__version__ == "2.13.0+kiln.0.1.0"`
(libraries read it: transformers refuses torch < 2.6).

    python -m eager.alias script.py [args ...]     run a script with torch -> eager
    with eager.alias.torch_is_eager(): ...         the same inside a block (the real
                                                   torch modules, if any, come back after)

A `torch.X` module that kiln has no `eager.X` for is a ModuleNotFoundError naming it; a
PyTorch name kiln lacks raises NotSupportedYet naming it (eager/_missing.py).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.metadata
import importlib.util
import pathlib
import runpy
import sys
import types

from eager.torch_version import __version__


def _is_torch(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


class TorchIsEager(importlib.abc.MetaPathFinder):
    """A meta-path finder answering for `torch` and every `torch.*` name with kiln's
    module of the same name under `eager`, and for the `torch` distribution's metadata.

    A name kiln has no module for raises ModuleNotFoundError here rather than finding
    nothing: the finders after this one would otherwise load the real PyTorch's module
    of that name, on top of kiln's."""

    def find_spec(self, fullname: str, path=None, target=None):
        if not _is_torch(fullname):
            return None
        kiln_name = "eager" + fullname[len("torch"):]
        parent, _, child = kiln_name.rpartition(".")
        held = vars(sys.modules[parent]).get(child) if parent else None
        if held is not None and not isinstance(held, types.ModuleType):
            what = "class" if isinstance(held, type) else type(held).__name__
            raise ModuleNotFoundError(f"No module named {fullname!r}: in kiln as in PyTorch, "
                                      f"{fullname} is a {what}, not a module", name=fullname)
        kiln_spec = importlib.util.find_spec(kiln_name)
        if kiln_spec is None:
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: kiln has no {fullname} yet (the torch alias "
                f"gives kiln's {kiln_name} for it, and there is none)", name=fullname)
        return importlib.util.spec_from_loader(
            fullname, _SameModule(kiln_name), origin=kiln_spec.origin,
            is_package=kiln_spec.submodule_search_locations is not None)

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        if context.name is None or context.name.lower() == "torch":
            yield KilnAsTorch()


class _SameModule(importlib.abc.Loader):
    """Loads `torch.X.Y` as the module object `eager.X.Y` (imported if it is not yet)."""

    def __init__(self, kiln_name: str):
        self.kiln_name = kiln_name
        self.kiln_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.kiln_name)
        self.kiln_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # the import system has just given the module the torch name's spec: it keeps its
        # own (its name, what importlib.reload reads)
        module.__spec__ = self.kiln_spec


class KilnAsTorch(importlib.metadata.Distribution):
    """The `torch` distribution while the alias is on: kiln, versioned as the PyTorch
    API it follows."""

    def read_text(self, filename: str) -> str | None:
        if filename in ("METADATA", "PKG-INFO"):
            return (f"Metadata-Version: 2.1\nName: torch\nVersion: {__version__}\n"
                    f"Summary: kiln standing in for PyTorch (python -m eager.alias)\n")
        if filename == "top_level.txt":
            return "torch\n"
        return None

    def locate_file(self, path) -> pathlib.Path:
        return pathlib.Path(__file__).resolve().parents[1] / path


@contextlib.contextmanager
def torch_is_eager():
    """Inside the block `import torch...` gives kiln's modules, and the `torch`
    distribution is kiln's; after it, the finder is gone and whatever torch modules were
    loaded before come back."""
    saved = {name: module for name, module in sys.modules.items() if _is_torch(name)}
    for name in saved:
        del sys.modules[name]
    finder = TorchIsEager()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if _is_torch(n)]:
            del sys.modules[name]
        sys.modules.update(saved)


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if argv else 2)
    sys.argv = argv
    with torch_is_eager():
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
