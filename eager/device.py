"""Devices: `cpu`, `cuda[:N]` and `meta` (shapes and dtypes with no data)."""
from __future__ import annotations


class device:  # noqa: N801 - PyTorch's name
    __slots__ = ("type", "index")
    _TYPES = ("cpu", "cuda", "meta")

    def __init__(self, spec, index: int | None = None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        if not isinstance(spec, str):
            raise TypeError(f"device must be a string or eager.device, got {type(spec).__name__}")
        kind, _, idx = spec.partition(":")
        if kind not in self._TYPES:
            raise RuntimeError(f"Expected one of {', '.join(self._TYPES)} device type at start "
                               f"of device string: {spec}")
        if idx:
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{spec}'")
            index = int(idx)
        if kind == "cuda" and index is None:
            index = 0
        self.type = kind
        self.index = index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = device(other)
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


CPU = device("cpu")
META = device("meta")


def get_default_device() -> device:
    """The device factories make tensors on: kiln has no set_default_device, so the CPU."""
    return CPU


def as_device(spec) -> device:
    if spec is None:
        return CPU
    if isinstance(spec, device):
        return spec
    if isinstance(spec, int):
        return device("cuda", spec)
    return device(spec)
