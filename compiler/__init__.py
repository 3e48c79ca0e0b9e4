"""kiln's compiler: capture regions of Python functions into the IR and run them through
a backend, with guards, a cache, graph breaks and eager fallback.

    @compiler.compile            # also eager.compile
    def f(x, w): return eager.relu(x @ w)
"""
from __future__ import annotations

from compiler import interpreter
from compiler.api import RECOMPILE_LIMIT, CompileCheckError, CompiledFunction
from runtime.debugging import debug
from compiler.lower import Lowered, lower


def compile(fn=None, *, backend: str = "native", fullgraph: bool = False,  # noqa: A001
            dynamic: bool | None = None, check: bool = False):
    """Compile a function or an nn.Module (its forward); usable bare or with options."""
    options = dict(backend=backend, fullgraph=fullgraph, dynamic=dynamic, check=check)
    if fn is None:
        return lambda f: compile(f, **options)
    from eager.nn import Module
    if isinstance(fn, Module):
        return CompiledModule(fn, **options)
    return CompiledFunction(fn, **options)


def cache_clear() -> int:
    """Empty the on-disk kernel cache ($KILN_CACHE_DIR, default ~/.cache/kiln); returns
    the number of entries removed. Also `python -m runtime.llvm.cache clear`."""
    from runtime.llvm.cache import clear
    return clear()


def cache_info():
    """Where the kernel cache is, how many entries and bytes it holds, its size cap."""
    from runtime.llvm.cache import info
    return info()


class CompiledModule:
    """A module whose calls run its forward compiled; attributes reach the module."""

    def __init__(self, module, **options):
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_compiled", CompiledFunction(module.forward, module=module,
                                                               **options))

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def explain(self) -> str:
        return self._compiled.explain()

    def __getattr__(self, name):
        return getattr(self._orig_mod, name)

    def __setattr__(self, name, value):
        setattr(self._orig_mod, name, value)

    def __repr__(self) -> str:
        return f"CompiledModule({self._orig_mod!r})"


def wait_for_kernels(timeout: float | None = None) -> bool:
    """Block until the kernels handed to background compile workers are compiled (True),
    or `timeout` seconds pass (False); without a timeout, at most 60 s, then the kernels
    still pending compile in this thread (True): runtime/llvm/compile_service.py."""
    from runtime.llvm import compile_service  # loaded by the first kernel handed out
    return compile_service.wait_for_kernels(timeout)


__all__ = ["compile", "lower", "Lowered", "cache_clear", "cache_info", "CompiledFunction",
           "CompiledModule",
           "CompileCheckError", "debug", "interpreter", "RECOMPILE_LIMIT", "wait_for_kernels"]
