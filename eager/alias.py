"""Run PyTorch programs on kiln unmodified: `import torch` (and torch.nn,
torch.nn.functional, torch.optim, torch.optim.lr_scheduler, torch.utils.data, ...)
resolves to kiln's eager modules.

    python -m eager.alias script.py [args ...]     run a script with torch -> eager
    with eager.alias.torch_is_eager(): ...         the same inside a block (the real
                                                   torch modules, if any, come back after)

A PyTorch name kiln lacks raises NotImplementedError naming it (eager/_missing.py).
"""
from __future__ import annotations

import contextlib
import importlib
import runpy
import sys

MODULES = {"torch": "eager", "torch.nn": "eager.nn", "torch.nn.functional": "eager.nn.functional",
           "torch.nn.init": "eager.nn.init", "torch.nn.utils": "eager.nn.utils",
           "torch.optim": "eager.optim", "torch.optim.lr_scheduler": "eager.optim.lr_scheduler",
           "torch.utils": "eager.utils", "torch.utils.data": "eager.utils.data",
           "torch.autograd": "eager.autograd", "torch.cuda": "eager.cuda",
           "torch.profiler": "eager.profiler", "torch.testing": "eager.testing"}


@contextlib.contextmanager
def torch_is_eager():
    """Inside the block `import torch...` gives kiln's modules."""
    saved = {name: module for name, module in sys.modules.items()
             if name == "torch" or name.startswith("torch.")}
    for name in saved:
        del sys.modules[name]
    sys.modules.update({name: importlib.import_module(target)
                        for name, target in MODULES.items()})
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
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
