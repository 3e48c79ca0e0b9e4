"""torch.torch_version: `__version__` and TorchVersion, the string that compares as a
version.

kiln's `torch.__version__` is "<PyTorch version>+kiln.<kiln version>", e.g.
"2.13.0+kiln.0.1.0": the public part is the PyTorch whose names and behaviour kiln
follows (the one its tests compare with), so a library checking it (transformers refuses
torch < 2.6) sees the API it gets; the local part says that it is kiln, and which.
"""
from __future__ import annotations

import re

from eager._torch_tensor_names import TORCH_VERSION

KILN_VERSION = "0.1.0"

# PEP 440's public version (release, pre-, post- and dev-release) and local part
_VERSION = re.compile(r"v?(?P<release>\d+(?:\.\d+)*)"
                      r"(?:[-_.]?(?P<pre>a|b|rc)(?P<pre_n>\d*))?"
                      r"(?:[-_.]?post(?P<post>\d*))?"
                      r"(?:[-_.]?dev(?P<dev>\d*))?"
                      r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?", re.IGNORECASE)
_PRE = {"a": 0, "b": 1, "rc": 2}


def _sort_key(text: str) -> tuple | None:
    """PEP 440's order: 2.6.dev0 < 2.6a1 < 2.6rc1 < 2.6 < 2.6+local < 2.6.post1 < 2.13."""
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        return None
    release = tuple(int(p) for p in m["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    if m["pre"]:
        pre = (0, _PRE[m["pre"].lower()], int(m["pre_n"] or 0))
    else:
        pre = (-1,) if m["dev"] is not None and m["post"] is None else (1,)
    post = (-1,) if m["post"] is None else (int(m["post"] or 0),)
    dev = (1,) if m["dev"] is None else (0, int(m["dev"] or 0))
    local = () if m["local"] is None else tuple(
        (1, int(p)) if p.isdigit() else (0, p.lower()) for p in re.split(r"[-_.]", m["local"]))
    return release, pre, post, dev, local


class TorchVersion(str):
    """A version string that compares with strings and tuples as versions, as PyTorch's
    does: `TorchVersion("2.13.0") >= "2.6"` is True (as text it would be False). A string
    that is no version compares as text."""

    def _compare(self, other, op):
        if isinstance(other, tuple):
            other = ".".join(str(p) for p in other)
        mine, theirs = _sort_key(self), _sort_key(other) if isinstance(other, str) else None
        if mine is None or theirs is None:
            return getattr(str, op)(self, other)
        return getattr(mine, op)(theirs)

    def __lt__(self, other):
        return self._compare(other, "__lt__")

    def __le__(self, other):
        return self._compare(other, "__le__")

    def __gt__(self, other):
        return self._compare(other, "__gt__")

    def __ge__(self, other):
        return self._compare(other, "__ge__")

    def __eq__(self, other):
        return self._compare(other, "__eq__")

    def __ne__(self, other):
        return self._compare(other, "__ne__")

    __hash__ = str.__hash__


__version__ = TorchVersion(f"{TORCH_VERSION.partition('+')[0]}+kiln.{KILN_VERSION}")
