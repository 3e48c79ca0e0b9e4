"""torch.jit, for code written to be scriptable: kiln has no TorchScript, and runs such
code as the Python it is.

`script(fn_or_module)` and `trace(fn_or_module, example_inputs)` return their argument
itself, unchanged (kiln's compiler is `torch.compile`); `is_scripting()` and
`is_tracing()` are False; `ignore`, `unused`, `export`, `interface` and the overload
markers are decorators that return what they decorate. Saving and loading TorchScript
archives, `freeze`, `fork`/`wait` are not supported: NotSupportedYet naming each.
`annotations` is the submodule of TorchScript's type names (so this module does without
`from __future__ import annotations`, which would take its name).
"""
from typing import Final  # noqa: F401 - torch.jit.Final

from eager import _missing
from eager.jit import annotations  # noqa: F401 - torch.jit.annotations


class ScriptModule:
    """Never made by kiln (script() returns the module itself): isinstance checks say no."""


class ScriptFunction:
    """Never made by kiln (script() returns the function itself): isinstance checks say no."""


def script(obj, optimize=None, _frames_up: int = 0, _rcb=None, example_inputs=None):
    """`obj` itself: kiln runs a function or module as Python."""
    return obj


def trace(func, example_inputs=None, *args, **kwargs):
    """`func` itself (a function or module): kiln records no trace."""
    return func


def trace_module(mod, inputs, *args, **kwargs):
    return mod


def script_if_tracing(fn):
    return fn


_script_if_tracing = script_if_tracing  # the name torchvision uses


def is_scripting() -> bool:
    return False


def is_tracing() -> bool:
    return False


def ignore(drop=False, **kwargs):
    """`@ignore` or `@ignore(drop=True)`: the function itself."""
    return drop if callable(drop) else _itself


def unused(fn):
    return fn


def export(fn):
    return fn


def interface(obj):
    return obj


def annotate(the_type, the_value):
    return the_value


def _itself(fn):
    return fn


_overload = _overload_method = _itself

save = _missing.not_supported("torch.jit", "save")
load = _missing.not_supported("torch.jit", "load")
freeze = _missing.not_supported("torch.jit", "freeze")
fork = _missing.not_supported("torch.jit", "fork")
wait = _missing.not_supported("torch.jit", "wait")

# PyTorch's other names kiln lacks: NotSupportedYet (eager/_missing.py)
__getattr__ = _missing.module_getattr("torch.jit", "eager.jit")
