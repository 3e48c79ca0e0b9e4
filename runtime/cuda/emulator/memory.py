"""The CUDA emulator's memory: every buffer a kernel can reach (an argument array, a block's
shared memory, a constant global, a thread's alloca) is a Region, and a pointer is an int
address `region index << 40 | (offset + 2**39)`. GEP is then integer arithmetic modulo
2**64, and every load and store decodes the region and checks the offset against it:
an access outside any region's bytes (before or after an array, through null, through a
pointer into another region that strayed) is an EmulationError naming the region (the
parameter), the byte offset, the element and the region's size.
"""
from __future__ import annotations

import struct

import llvmlite.ir as ir
import numpy as np

from runtime.cuda.emulator.values import (EmulationError, constant_value, from_bytes,
                                          round_f16, scalar_format, size_of, to_bytes)

SHIFT = 40
MIDDLE = 1 << (SHIFT - 1)
LOW = (1 << SHIFT) - 1
ADDRESS = (1 << 64) - 1
_VIEW_FORMATS = "BHIQfd"


class Region:
    """One buffer: its bytes, a memory view per scalar format, and how to name it."""

    def __init__(self, name: str, buffer, readonly: bool = False, dtype=None,
                 given_at: int = 0):
        raw = memoryview(buffer).cast("B")
        self.name, self.nbytes, self.readonly = name, raw.nbytes, readonly or raw.readonly
        self.dtype, self.given_at, self.raw = dtype, given_at, raw
        self.views = {}
        for fmt in _VIEW_FORMATS:
            size = struct.calcsize(fmt)
            self.views[fmt] = raw[:raw.nbytes - raw.nbytes % size].cast(fmt)

    def describe(self) -> str:
        if self.dtype is None:
            return f"{self.name} ({self.nbytes} bytes)"
        count = self.nbytes // self.dtype.itemsize
        where = f", given at element {self.given_at}" if self.given_at else ""
        return f"{self.name} (an array of {count} {self.dtype.name}, {self.nbytes} bytes{where})"


class Memory:
    """The regions of one launch; addresses index them. Region 0 is null's."""

    def __init__(self):
        self.regions = [Region("the null pointer", b"")]

    def add(self, region: Region, offset: int = 0) -> int:
        """Register `region`; the address of its byte `offset`."""
        self.regions.append(region)
        return ((len(self.regions) - 1) << SHIFT) + MIDDLE + offset

    def reset(self) -> None:
        del self.regions[1:]

    def allocate(self, name: str, nbytes: int) -> int:
        """A fresh region of `nbytes` undefined bytes (filled with 0xFF: NaN as floats,
        -1 as integers, so a read before a write shows)."""
        return self.add(Region(name, bytearray(b"\xff" * nbytes)))

    def locate(self, address: int):
        """(region, byte offset) of an address; region None when it names none."""
        index, offset = address >> SHIFT, (address & LOW) - MIDDLE
        if 0 < index < len(self.regions) and -MIDDLE < offset:
            return self.regions[index], offset
        return None, address

    def fault(self, address: int, size: int, verb: str, why: str = "") -> EmulationError:
        region, offset = self.locate(address)
        if address >> SHIFT == 0:
            return EmulationError(f"{verb} {size} bytes through the null pointer "
                                  f"(address {address:#x})")
        if region is None:
            return EmulationError(f"{verb} {size} bytes at address {address:#x}, which "
                                  "points into no argument, shared or constant memory")
        element = ""
        if region.dtype is not None:
            element = f" (element {offset / region.dtype.itemsize:g})"
        reason = why or "out of bounds"
        return EmulationError(f"{verb} {size} bytes at byte offset {offset}{element} of "
                              f"{region.describe()}: {reason}")

    def loader(self, ty: ir.Type, align: int | None = None):
        """A function address -> value of type `ty`, checked; `align` is the load's
        stated alignment (the type's natural one when None)."""
        size = size_of(ty)
        align = min(align or natural_align(ty), 16)
        if isinstance(ty, ir.VectorType):
            load_lane, step, count = self.loader(ty.element, 1), size_of(ty.element), ty.count
            check = self._checker(step * count, align, "reads")

            def load_vector(address):
                check(address)
                return tuple(load_lane(address + i * step) for i in range(count))
            return load_vector
        fmt = scalar_format(ty)
        if fmt == "e" or align < size:
            check, unpack = self._checker(size, align, "reads"), struct.Struct("<" + fmt)

            def load_packed(address):
                region, offset = check(address)
                return unpack.unpack_from(region.raw, offset)[0]
            return load_packed
        regions, fault = self.regions, self.fault
        shift, bit = size.bit_length() - 1, isinstance(ty, ir.IntType) and ty.width == 1

        def load(address):
            index, offset = address >> SHIFT, (address & LOW) - MIDDLE
            if 0 < index < len(regions):
                region = regions[index]
                if 0 <= offset <= region.nbytes - size and not offset & (size - 1):
                    value = region.views[fmt][offset >> shift]
                    return value & 1 if bit else value
            raise fault(address, size, "reads", _misaligned(address, size))
        return load

    def storer(self, ty: ir.Type, align: int | None = None):
        """A function (address, value) -> None storing a value of type `ty`, checked."""
        size = size_of(ty)
        align = min(align or natural_align(ty), 16)
        if isinstance(ty, ir.VectorType):
            store_lane, step = self.storer(ty.element, 1), size_of(ty.element)
            check = self._checker(step * ty.count, align, "writes")

            def store_vector(address, value):
                check(address)
                for i, lane in enumerate(value):
                    store_lane(address + i * step, lane)
            return store_vector
        fmt = scalar_format(ty)
        check = self._checker(size, align, "writes")
        if fmt == "e" or align < size:
            pack = struct.Struct("<" + fmt)
            rounding = round_f16 if fmt == "e" else (lambda value: value)

            def store_packed(address, value):
                region, offset = check(address)
                pack.pack_into(region.raw, offset, rounding(value))
            return store_packed
        shift = size.bit_length() - 1

        def store(address, value):
            region, offset = check(address)
            region.views[fmt][offset >> shift] = value
        return store

    def _checker(self, size: int, align: int, verb: str):
        """A function address -> (region, offset) that raises unless `size` bytes there
        lie in one region (and, for writes, a writable one), at an offset `align`
        divides."""
        regions, fault = self.regions, self.fault

        def check(address):
            index, offset = address >> SHIFT, (address & LOW) - MIDDLE
            if 0 < index < len(regions):
                region = regions[index]
                if 0 <= offset <= region.nbytes - size and not offset % align:
                    if verb == "writes" and region.readonly:
                        raise fault(address, size, verb, "the memory is read-only")
                    return region, offset
            raise fault(address, size, verb, _misaligned(address, align))
        return check


def natural_align(ty: ir.Type) -> int:
    """The alignment a GPU access of `ty` needs: its size, up to 16 bytes (a vector
    access is one instruction only when the whole vector is aligned)."""
    size = size_of(ty)
    return min(1 << (size - 1).bit_length(), 16)


def _misaligned(address: int, align: int) -> str:
    offset = (address & LOW) - MIDDLE
    if offset % align and offset >= 0:
        return f"misaligned: a {align}-byte access needs an offset that {align} divides"
    return ""


def bind_pointer(memory: Memory, name: str, pointee: ir.Type, given) -> int:
    """The address of a pointer argument: an array, or (array, element offset)."""
    array, offset = given if isinstance(given, tuple) and len(given) == 2 else (given, 0)
    if not isinstance(array, np.ndarray):
        raise EmulationError(f"{name} is a pointer ({pointee}*) and needs a numpy array "
                             f"or (array, element offset), not {type(given).__name__}")
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise EmulationError(f"{name} must be a contiguous array (the kernel reads "
                             "memory in order); pass np.ascontiguousarray(...)")
    _check_element(name, pointee, array.dtype)
    if not isinstance(offset, (int, np.integer)) or not 0 <= offset <= array.size:
        raise EmulationError(f"{name}: the element offset {offset!r} is outside the "
                             f"array of {array.size}")
    region = Region(name, array.reshape(-1, order="A").view(np.uint8),
                    readonly=not array.flags.writeable, dtype=array.dtype,
                    given_at=int(offset))
    return memory.add(region, int(offset) * array.dtype.itemsize)


def _check_element(name: str, pointee: ir.Type, dtype: np.dtype) -> None:
    """A pointer to a scalar type takes arrays of that type's size and kind (i8* any)."""
    if isinstance(pointee, ir.VectorType):
        pointee = pointee.element
    if isinstance(pointee, ir.IntType) and pointee.width == 8:
        return
    kind = "f" if isinstance(pointee, (ir.HalfType, ir.FloatType, ir.DoubleType)) else \
        "iub" if isinstance(pointee, ir.IntType) else None
    if kind is None:
        return
    if dtype.kind not in kind or dtype.itemsize != size_of(pointee):
        raise EmulationError(f"{name} points to {pointee} but the array holds "
                             f"{dtype.name}")


def bind_scalar(name: str, ty: ir.Type, given):
    """A scalar argument as the emulator holds it; EmulationError if it does not fit."""
    if isinstance(ty, ir.IntType):
        if isinstance(given, (bool, np.bool_)) or not isinstance(given, (int, np.integer)):
            raise EmulationError(f"{name} is an {ty} and needs an int, not {given!r}")
        value = int(given)
        if not -(1 << (ty.width - 1)) <= value < (1 << ty.width):
            raise EmulationError(f"{name}: {value} does not fit in an {ty}")
        return value & ((1 << ty.width) - 1)
    if isinstance(ty, (ir.HalfType, ir.FloatType, ir.DoubleType)):
        if not isinstance(given, (int, float, np.integer, np.floating)):
            raise EmulationError(f"{name} is a {ty} and needs a number, not {given!r}")
        return from_bytes(ty, to_bytes(ty, float(given))) if not isinstance(
            ty, ir.DoubleType) else float(given)
    raise EmulationError(f"{name} has type {ty}, which the emulator cannot pass")


def global_region(variable: ir.GlobalVariable) -> tuple:
    """(region, kind) for a global variable. Kind "shared" (addrspace 3): the caller
    gives each block its own contents; "dynamic" (extern shared memory, [0 x T]): sized
    by the launch, one region for all such globals; "constant" or "global": its
    initialiser's bytes (zeros without one), read-only when constant."""
    ty, space, name = variable.type.pointee, variable.type.addrspace, f"@{variable.name}"
    if space == 3:
        if isinstance(ty, ir.ArrayType) and ty.count == 0:
            return None, "dynamic"
        return Region(f"shared memory {name}", bytearray(size_of(ty))), "shared"
    init = variable.initializer
    image = bytes(size_of(ty)) if init is None or init is ir.Undefined else \
        to_bytes(ty, constant_value(init))
    kind = "constant" if variable.global_constant or space == 4 else "global"
    return Region(f"{kind} {name}", bytearray(image), readonly=kind == "constant"), kind
