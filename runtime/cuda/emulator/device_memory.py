"""The emulated CUDA device's memory (runtime/cuda/emulated.py): one numpy uint8 array
per allocation at a made-up address, 256-byte aligned, never 0, never reused, with a gap
after each block, so a pointer anywhere in a block (or one past its end) names that block
and offset, and a freed pointer names none. New memory holds 0xFF bytes (NaN floats, -1
integers), so a read before any write shows.

    DeviceMemory    allocate, release, span (the bytes at a pointer), block_at,
                    whereabouts (why a pointer names no memory), used bytes per device
    kernel_value    a kernel argument's bytes as the emulator takes it: integers,
                    floats, and pointers as (block viewed as the element type, offset)

The table checks nothing of the CUDA API (sizes, contexts): the driver does, and turns
a Fault into the CudaError a GPU's driver gives.
"""
from __future__ import annotations

import bisect
import struct
from collections import OrderedDict

import llvmlite.ir as ir
import numpy as np

_ALIGN, _GAP, _FIRST_ADDRESS = 256, 256, 0x7F0000000000
_FREED_KEPT = 4096  # freed blocks remembered, to say "freed" in an error
_ELEMENT = {ir.HalfType: np.float16, ir.FloatType: np.float32, ir.DoubleType: np.float64}
_INTEGER = {8: np.uint8, 16: np.int16, 32: np.int32, 64: np.int64}
_SCALAR = {ir.HalfType: "<e", ir.FloatType: "<f", ir.DoubleType: "<d"}


class Fault(Exception):
    """A pointer argument names no live memory (`misaligned`: it does, off its element
    size); the message says where it points."""

    def __init__(self, message: str, misaligned: bool = False):
        super().__init__(message)
        self.misaligned = misaligned


class DeviceMemory:
    """The blocks of every device of one emulated driver."""

    def __init__(self, devices: int):
        self._blocks: dict[int, tuple] = {}  # address -> (uint8 array, device)
        self._starts: list[int] = []         # the blocks' addresses, in order
        self._freed: OrderedDict = OrderedDict()  # address -> bytes, of freed blocks
        self.used = [0] * devices
        self._next_address = _FIRST_ADDRESS

    def __len__(self) -> int:
        return len(self._blocks)

    def allocate(self, ordinal: int, nbytes: int) -> int:
        address = self._next_address
        self._next_address = -(-(address + nbytes) // _ALIGN) * _ALIGN + _GAP
        self._blocks[address] = (np.full(nbytes, 0xFF, np.uint8), ordinal)
        self._starts.append(address)
        self.used[ordinal] += nbytes
        return address

    def release(self, pointer: int) -> bool:
        """Free the block at `pointer`; False when no block starts there."""
        block = self._blocks.pop(pointer, None)
        if block is None:
            return False
        del self._starts[bisect.bisect_left(self._starts, pointer)]
        self.used[block[1]] -= block[0].size
        self._freed[pointer] = block[0].size
        if len(self._freed) > _FREED_KEPT:
            self._freed.popitem(last=False)
        return True

    def block_at(self, pointer: int, nbytes: int):
        """(block, byte offset) when pointer .. pointer + nbytes lies in a live block
        (one past its end for no bytes), else None."""
        index = bisect.bisect_right(self._starts, pointer) - 1
        if index < 0:
            return None
        start = self._starts[index]
        data = self._blocks[start][0]
        offset = pointer - start
        return (data, offset) if offset + nbytes <= data.size else None

    def span(self, pointer: int, nbytes: int) -> np.ndarray | None:
        """The `nbytes` at `pointer` as a view of its block; None unless they lie in one."""
        found = self.block_at(pointer, nbytes)
        if found is None:
            return None
        data, offset = found
        return data[offset:offset + nbytes]

    def whereabouts(self, pointer: int, nbytes: int) -> str:
        """Why `pointer` names no memory: past a block's end, freed, or never allocated."""
        index = bisect.bisect_right(self._starts, pointer) - 1
        if index >= 0:
            start = self._starts[index]
            size = self._blocks[start][0].size
            if pointer - start <= size:
                return (f"which runs past the end of the block of {size} bytes at "
                        f"{start:#x} (from byte {pointer - start})")
        for start, size in self._freed.items():
            if start <= pointer <= start + size:
                return f"which points into the block of {size} bytes at {start:#x}, freed"
        return "which points into no allocation of this device"

    def kernel_value(self, ty: ir.Type, raw: bytes):
        """The emulator's value of a kernel parameter of type `ty` from its bytes;
        TypeError for a type the emulator cannot pass, Fault for a bad pointer."""
        if isinstance(ty, ir.PointerType):
            return self._pointer_value(ty.pointee, int.from_bytes(raw, "little"))
        if isinstance(ty, ir.IntType):
            return int.from_bytes(raw, "little") & ((1 << ty.width) - 1)
        if type(ty) in _SCALAR:
            return struct.unpack(_SCALAR[type(ty)], raw)[0]
        raise TypeError(f"the emulator cannot pass a {ty}")

    def _pointer_value(self, pointee: ir.Type, address: int):
        dtype = np.dtype(_element_type(pointee))
        if address == 0:  # null: any access through it is an error
            return np.empty(0, dtype), 0
        found = self.block_at(address, 0)
        if found is None:
            raise Fault(f"{address:#x}, {self.whereabouts(address, 0)}")
        data, offset = found
        if offset % dtype.itemsize:
            raise Fault(f"{address:#x}, byte {offset} of its block: not a multiple of "
                        f"{dtype.itemsize}, the size of its {pointee}", misaligned=True)
        return data[:data.size - data.size % dtype.itemsize].view(dtype), offset // dtype.itemsize


def _element_type(pointee: ir.Type):
    """The numpy type a pointer parameter's memory is viewed as (bytes for aggregates)."""
    if isinstance(pointee, ir.VectorType):
        pointee = pointee.element
    if type(pointee) in _ELEMENT:
        return _ELEMENT[type(pointee)]
    if isinstance(pointee, ir.IntType):
        from runtime.cuda.emulator.values import size_of
        return _INTEGER.get(size_of(pointee) * 8, np.uint8)
    return np.uint8
