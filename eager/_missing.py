"""PyTorch names kiln does not have yet: asking for one raises NotSupportedYet, which
names it and says so (a NotImplementedError, and an AttributeError too, so hasattr() and
getattr(x, name, default) still answer "no"), instead of a bare AttributeError.

The names are PyTorch's public names per namespace, listed in eager/_torch_names.py for
the PyTorch version the tests compare with. `python -m eager._missing` (with PyTorch
installed) writes that file again, and eager/_torch_signatures.py (Module's methods,
torch.utils' submodules, keyword arguments: eager/_missing_signatures.py), and
docs/MISSING.md, the list of what kiln lacks; `--docs-only` writes only the doc.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMESPACES = {  # PyTorch's namespace -> kiln's module (or class) that stands for it
    "torch": "eager", "torch.Tensor": "eager.Tensor", "torch.nn": "eager.nn",
    "torch.nn.functional": "eager.nn.functional", "torch.nn.init": "eager.nn.init",
    "torch.nn.utils": "eager.nn.utils", "torch.optim": "eager.optim",
    "torch.optim.lr_scheduler": "eager.optim.lr_scheduler", "torch.utils.data":
        "eager.utils.data", "torch.cuda": "eager.cuda", "torch.autograd": "eager.autograd",
    "torch.hub": "eager.hub", "torch.jit": "eager.jit", "torch.fx": "eager.fx",
    "torch.compiler": "eager.compiler", "torch.onnx": "eager.onnx",
    "torch.ao.quantization": "eager.ao.quantization"}


def _torch_version_and_names() -> tuple[str, dict]:
    """eager/_torch_names.py's table (~0.35 ms to load: on the first missing name)."""
    from eager._torch_names import NAMES, TORCH_VERSION
    return TORCH_VERSION, NAMES


class NotSupportedYet(NotImplementedError, AttributeError):
    """A PyTorch name kiln does not have yet."""


def _not_supported(qualified_name: str) -> NotSupportedYet:
    return NotSupportedYet(f"{qualified_name} is not supported by kiln yet (PyTorch has it; "
                           f"kiln's list of what it lacks: docs/MISSING.md)")


def missing(namespace: str, name: str, owner: str) -> AttributeError:
    """The error for `owner.name`: NotSupportedYet where PyTorch's `namespace` has the
    name, else the plain AttributeError Python would raise."""
    if name in _torch_version_and_names()[1].get(namespace, ()):
        return _not_supported(f"{namespace}.{name}")
    return AttributeError(f"{owner} has no attribute {name!r}")


def not_supported(namespace: str, name: str):
    """A stand-in for PyTorch's function `namespace.name`, which kiln has not: a library
    may import it (its module loads: a missing name would stop the import), and calling
    it raises NotSupportedYet naming it. docs/MISSING.md lists it as lacking."""
    def stand_in(*args, **kwargs):
        raise _not_supported(f"{namespace}.{name}")
    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.not_supported_yet = True
    return stand_in


def lacking_class(namespace: str, name: str, base: type = object) -> type:
    """A stand-in for PyTorch's class `namespace.name`, which kiln has not: a library may
    import it, subclass it and test `isinstance(x, it)` (never true: kiln makes none), and
    making one raises NotSupportedYet naming it."""
    def __init__(self, *args, **kwargs):
        raise _not_supported(f"{namespace}.{name}")
    stand_in = type(name, (base,), {"__init__": __init__, "__module__": namespace,
                                    "__doc__": f"{namespace}.{name}: not in kiln yet"})
    stand_in.not_supported_yet = True
    return stand_in


def module_getattr(namespace: str, module: str):
    """A module's __getattr__ for the names it does not define."""
    def __getattr__(name: str):
        raise missing(namespace, name, f"module {module!r}")
    return __getattr__


class _Lacking:
    """Stands, in a class, for one PyTorch attribute kiln lacks: reading it raises
    NotSupportedYet. A class-level stand-in rather than a `__getattr__`: a class with
    `__getattr__` has every attribute read of its instances take the slow generic path
    (CPython does not specialise them), which cost Tensor ~20% of a tiny op. It defines
    no `__set__`, so an attribute an instance sets for itself wins over it."""
    __slots__ = ("namespace", "name")

    def __init__(self, namespace: str, name: str):
        self.namespace, self.name = namespace, name

    def __get__(self, obj, cls=None):
        owner = f"'{type(obj).__name__}' object" if obj is not None else \
            f"type object '{cls.__name__}'"
        raise missing(self.namespace, self.name, owner)


def stand_in_for_lacking_tensor_names(cls: type) -> None:
    """Give `cls` (Tensor) a stand-in for each public torch.Tensor name it lacks. (Only
    Tensor's names are loaded for it: the rest of the table waits for a missing name.)"""
    from eager._torch_tensor_names import TENSOR_NAMES
    has = set().union(*(vars(c) for c in cls.__mro__))  # (no getattr: no exceptions)
    for name in TENSOR_NAMES:
        if name not in has and not name.startswith("_"):
            setattr(cls, name, _Lacking("torch.Tensor", name))


def lacking() -> dict[str, list[str]]:
    """Per namespace, PyTorch's names that kiln's counterpart does not have."""
    names = _torch_version_and_names()[1]
    return {namespace: sorted(n for n in names.get(namespace, ())
                              if not _has(kiln_counterpart(namespace), n))
            for namespace in NAMESPACES}


def kiln_counterpart(namespace: str):
    """kiln's module (or class) that stands for PyTorch's `namespace`."""
    import importlib
    holder = importlib.import_module(NAMESPACES[namespace].partition(".Tensor")[0])
    return holder.Tensor if NAMESPACES[namespace].endswith(".Tensor") else holder


def _has(holder, name: str) -> bool:
    try:
        value = getattr(holder, name)
    except AttributeError:
        return False
    return not getattr(value, "not_supported_yet", False)


def missing_markdown() -> str:
    """docs/MISSING.md's text."""
    version, names_per_namespace = _torch_version_and_names()
    lines = ["# PyTorch names kiln does not have yet", "",
             f"Generated by `python -m eager._missing` from PyTorch {version}'s public "
             f"names; asking kiln for one raises `NotImplementedError` naming it "
             f"(eager/_missing.py). The sections after the namespaces' are read from "
             f"PyTorch's signatures (eager/_missing_signatures.py): Module's methods, "
             f"torch.utils' submodules and the keyword arguments kiln refuses (a "
             f"`TypeError`). tests/eager/test_missing_names.py and "
             f"tests/eager/test_missing_signatures.py keep this list true.", ""]
    for namespace, names in lacking().items():
        total = len(names_per_namespace.get(namespace, ()))
        lines += [f"## {namespace} ({len(names)} of {total} missing)", ""]
        lines += [", ".join(f"`{n}`" for n in names) if names else "(none)", ""]
    from eager._missing_signatures import markdown_sections
    return "\n".join(lines + markdown_sections())


def _torch_names() -> dict[str, list[str]]:
    import importlib
    names = {}
    for namespace in NAMESPACES:
        module_name, _, attribute = namespace.partition(".Tensor")
        holder = importlib.import_module(module_name)
        if namespace.endswith(".Tensor"):
            holder = holder.Tensor
        names[namespace] = sorted(
            name for name in dir(holder) if not name.startswith("_")
            and ((namespace, name) in _OWN_OR_IMPORTED
                 or not _imported_for_itself(namespace, getattr(holder, name, None))))
    return names


# names PyTorch defines itself only where a package is missing (torch.hub's fallback tqdm
# class, tqdm's own where tqdm is installed): public names either way
_OWN_OR_IMPORTED = {("torch.hub", "tqdm")}


def _imported_for_itself(namespace: str, value) -> bool:
    """Whether `value` is something PyTorch's module imported for its own use rather than
    one of its names: a module other than its submodules (os, math, torch itself), or an
    object of the standard library or typing (Any, Path, partial)."""
    import types
    if isinstance(value, types.ModuleType):
        return not value.__name__.startswith(namespace + ".")
    module = getattr(value, "__module__", None)
    return (isinstance(module, str) and module.partition(".")[0] not in ("torch", "builtins")
            and not isinstance(value, (bool, int, float, str)))


def _write() -> None:
    import torch
    names = _torch_names()
    tensor = names.pop("torch.Tensor")
    body = ",\n".join(f"    {ns!r}: frozenset({sorted(v)!r})" for ns, v in names.items())
    (ROOT / "eager" / "_torch_names.py").write_text(
        f'"""PyTorch {torch.__version__}\'s public names per namespace (written by '
        f'`python -m eager._missing`)."""\n# flake8: noqa\n'
        f'from eager._torch_tensor_names import TENSOR_NAMES, TORCH_VERSION\n\n'
        f'NAMES = {{\n{body},\n    "torch.Tensor": TENSOR_NAMES,\n}}\n')
    (ROOT / "eager" / "_torch_tensor_names.py").write_text(
        f'"""PyTorch {torch.__version__}\'s version and public torch.Tensor names (written '
        f'by `python -m eager._missing`; loaded by `import eager`, the rest of the table in '
        f'eager/_torch_names.py only at a missing name)."""\n# flake8: noqa\n'
        f'TORCH_VERSION = {torch.__version__!r}\n'
        f'TENSOR_NAMES = frozenset({sorted(tensor)!r})\n')
    print(f"wrote eager/_torch_names.py and eager/_torch_tensor_names.py "
          f"({sum(map(len, names.values())) + len(tensor)} names)")


if __name__ == "__main__":
    if "--docs-only" not in sys.argv:
        _write()
        from eager._missing_signatures import write_snapshot
        write_snapshot()
        import importlib
        for written in ("eager._torch_tensor_names", "eager._torch_names",
                        "eager._torch_signatures"):
            if written in sys.modules:
                importlib.reload(sys.modules[written])
    (ROOT / "docs" / "MISSING.md").write_text(missing_markdown())
    print("wrote docs/MISSING.md")
