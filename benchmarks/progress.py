"""A progress line on stderr, so stdout holds only the results.

On a terminal one line is rewritten in place with every step and detail; elsewhere (a
log, a pipe) each step is one plain line and details are left out.
"""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, stream=None, enabled: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.live = enabled and getattr(self.stream, "isatty", lambda: False)()
        self._step = ""
        self._start = time.perf_counter()
        self._width = 0

    def step(self, text: str) -> None:
        """A new unit of work, e.g. a case of a suite."""
        self._step = text
        if self.live:
            self._show(text)
        elif self.enabled:
            print(f"[{self._elapsed()}] {text}", file=self.stream, flush=True)

    def detail(self, text: str) -> None:
        """What the current step is doing right now (terminal only)."""
        if self.live:
            self._show(f"{self._step} | {text}" if self._step else text)

    def done(self) -> None:
        if self.live:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def _show(self, text: str) -> None:
        line = f"[{self._elapsed()}] {text}"[:119]
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def _elapsed(self) -> str:
        return f"{time.perf_counter() - self._start:5.1f}s"
