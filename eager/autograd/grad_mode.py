"""Grad mode: `no_grad`, `enable_grad`, `set_grad_enabled` (context managers and
decorators). Turning grad off masks the Autograd dispatch keys for this thread."""
from __future__ import annotations

import functools

from eager.dispatcher import AUTOGRAD_MASK, tls


def is_grad_enabled() -> bool:
    return tls.grad_enabled


def _set(enabled: bool) -> None:
    tls.grad_enabled = enabled
    tls.exclude = (tls.exclude & ~AUTOGRAD_MASK) | (0 if enabled else AUTOGRAD_MASK)


class _GradMode:
    """A context manager that is also a decorator, with or without parentheses
    (`@no_grad()` or `@no_grad`, as in PyTorch)."""
    enabled = True

    def __new__(cls, fn=None):
        mode = super().__new__(cls)
        return mode if fn is None else mode(fn)

    def __enter__(self):
        self._prev = tls.grad_enabled
        _set(self.enabled)
        return self

    def __exit__(self, *exc):
        _set(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):  # noqa: N801 - PyTorch's name
    enabled = False


class enable_grad(_GradMode):  # noqa: N801
    enabled = True


class set_grad_enabled(_GradMode):  # noqa: N801
    """Takes effect when made, like PyTorch's, so it also works as a plain call."""

    def __new__(cls, mode: bool):
        return object.__new__(cls)

    def __init__(self, mode: bool):
        self._prev = tls.grad_enabled
        self.enabled = bool(mode)
        _set(self.enabled)

    def __enter__(self):
        return self

    def __call__(self, fn):
        mode = self.enabled

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        _set(self._prev)
        return wrapper


inference_mode = no_grad
