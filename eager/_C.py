"""PyTorch's private `torch._C` names that kiln has: the dispatch-table dumps the
walkthrough reads (`_dispatch_dump_table`), and the dispatch-key names libraries touch
(torchvision: DispatchKey, DispatchKeySet, _ExcludeDispatchKeyGuard, _log_api_usage_once).

torch._C.DispatchKey names PyTorch's keys; the ones kiln's dispatcher has (CPU, CUDA,
Meta, Tracer, the Autograd keys) stand for them, and excluding one of the others
(Autocast, Functionalize, Python, ...) excludes nothing, as no kiln kernel sits there."""
from __future__ import annotations

import contextlib
import enum

from eager import dispatcher

# PyTorch's keys that libraries name, beyond kiln's own (dispatcher.DispatchKey)
_PYTORCH_ONLY_KEYS = (
    "Undefined", "XPU", "MPS", "PrivateUse1", "BackendSelect", "Python", "PythonTLSSnapshot",
    "Functionalize", "ADInplaceOrView", "AutogradOther", "AutogradXPU", "AutogradMPS",
    "AutogradPrivateUse1", "CompositeExplicitAutograd",
    "CompositeExplicitAutogradNonFunctional", "Autocast", "AutocastXPU", "AutocastMPS", "AutocastPrivateUse1", "PreDispatch", "FuncTorchBatched",
    "FuncTorchDynamicLayerFrontMode", "FuncTorchDynamicLayerBackMode", "Batched", "Sparse",
    "SparseCPU", "SparseCUDA", "Dense", "Conjugate", "Negative", "ZeroTensor")

DispatchKey = enum.Enum("DispatchKey", [(name, name) for name in (
    *dispatcher.DispatchKey.__members__, *_PYTORCH_ONLY_KEYS)], module=__name__)
DispatchKey.__doc__ = "PyTorch's dispatch keys by name (kiln's dispatcher has some of them)."


def _kiln_keys(key: DispatchKey) -> tuple[dispatcher.DispatchKey, ...]:
    """The runtime keys of kiln's dispatcher that `key` stands for (Autograd: all three)."""
    if key.name == "Autograd":
        return dispatcher.AUTOGRAD_KEYS
    kiln = dispatcher.DispatchKey.__members__.get(key.name)
    return (kiln,) if kiln in dispatcher.RUNTIME_KEYS else ()


class DispatchKeySet:
    """A set of dispatch keys: `DispatchKeySet(DispatchKey.CPU)` or by name."""

    def __init__(self, *keys):
        self._keys = frozenset(DispatchKey[k if isinstance(k, str) else k.name]
                               for k in keys)

    @classmethod
    def _of(cls, keys) -> DispatchKeySet:
        made = cls()
        made._keys = frozenset(keys)
        return made

    def has(self, key) -> bool:
        return DispatchKeySet(key)._keys <= self._keys

    def add(self, key) -> DispatchKeySet:
        return self | DispatchKeySet(key)

    def remove(self, key) -> DispatchKeySet:
        return self - DispatchKeySet(key)

    def __or__(self, other: DispatchKeySet) -> DispatchKeySet:
        return DispatchKeySet._of(self._keys | other._keys)

    def __and__(self, other: DispatchKeySet) -> DispatchKeySet:
        return DispatchKeySet._of(self._keys & other._keys)

    def __sub__(self, other: DispatchKeySet) -> DispatchKeySet:
        return DispatchKeySet._of(self._keys - other._keys)

    def __eq__(self, other) -> bool:
        return isinstance(other, DispatchKeySet) and self._keys == other._keys

    def __hash__(self) -> int:
        return hash(self._keys)

    def __repr__(self) -> str:
        order = list(DispatchKey)
        return f"DispatchKeySet({', '.join(k.name for k in sorted(self._keys, key=order.index))})"


class _ExcludeDispatchKeyGuard:
    """`with _ExcludeDispatchKeyGuard(keyset):` calls skip kiln's kernels for those keys
    on this thread (as dispatcher.exclude_keys); it takes effect at `with`, as PyTorch's."""

    def __init__(self, keyset: DispatchKeySet):
        self._keys = tuple(k for key in keyset._keys for k in _kiln_keys(key))
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        self._stack.enter_context(dispatcher.exclude_keys(*self._keys))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()


def _log_api_usage_once(event: str) -> None:
    """PyTorch reports API use to its own telemetry; kiln has none."""


def _dispatch_dump(name: str) -> str:
    """The kernels registered for an op, per key (aliases included)."""
    return dispatcher.find(name).dump_registrations()


def _dispatch_dump_table(name: str) -> str:
    """The computed dispatch table: which kernel runs for each runtime key."""
    return dispatcher.find(name).dump_table()
