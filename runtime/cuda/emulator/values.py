"""How the CUDA emulator holds LLVM values in Python, and the data layout it lays memory
out by.

    integers   Python ints in 0 .. 2**width - 1 (i1 is 0 or 1): wrap-around is one `&`
               and unsigned compares are Python's; signed readings go through `signed`
    floats     Python floats; an f32 value is always one a float32 can hold (every f32
               result passes through round_f32), f64 values are Python's own
    pointers   ints: the emulator's addresses (memory.py), so GEP is integer arithmetic
    vectors    tuples of their lanes; structs (cmpxchg's result) tuples of their fields

Sizes and alignments follow NVPTX's data layout (natural alignment, pointers 8 bytes).
"""
from __future__ import annotations

import struct
from array import array

import llvmlite.ir as ir


class EmulationError(RuntimeError):
    """A CUDA kernel did what a GPU would not run correctly (an out-of-bounds access,
    barrier divergence), used something the emulator does not know, or was launched with
    bad arguments; the message names the kernel, the instruction and the values."""


_f32_box = array("f", [0.0])


def round_f32(x: float) -> float:
    """x rounded to the nearest float32 (a C cast: overflow gives inf, NaN stays NaN)."""
    _f32_box[0] = x
    return _f32_box[0]


_HALF = struct.Struct("<e")


def round_f16(x: float) -> float:
    try:
        return _HALF.unpack(_HALF.pack(x))[0]
    except OverflowError:
        return float("inf") if x > 0 else float("-inf")


def signed(value: int, width: int) -> int:
    """The signed reading of a `width`-bit value held unsigned."""
    sign = 1 << (width - 1)
    return (value ^ sign) - sign


def is_float(ty: ir.Type) -> bool:
    return isinstance(ty, (ir.HalfType, ir.FloatType, ir.DoubleType))


def float_rounding(ty: ir.Type):
    """The function that rounds a Python float to `ty`'s precision (None for f64)."""
    if isinstance(ty, ir.FloatType):
        return round_f32
    if isinstance(ty, ir.HalfType):
        return round_f16
    return None


def size_of(ty: ir.Type) -> int:
    """The bytes `ty` takes in memory, padding included (LLVM's alloc size)."""
    if isinstance(ty, ir.IntType):
        return max(1, 1 << (max(ty.width, 8) - 1).bit_length() >> 3)
    if isinstance(ty, ir.PointerType):
        return 8
    if is_float(ty):
        return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}[type(ty)]
    if isinstance(ty, ir.VectorType):
        raw = ty.count * size_of(ty.element)
        return -(-raw // align_of(ty)) * align_of(ty)
    if isinstance(ty, ir.ArrayType):
        return ty.count * size_of(ty.element)
    if isinstance(ty, (ir.LiteralStructType, ir.IdentifiedStructType)):
        offsets = field_offsets(ty)
        end = offsets[-1] + size_of(ty.elements[-1]) if ty.elements else 0
        return -(-end // align_of(ty)) * align_of(ty)
    raise EmulationError(f"the emulator does not know the memory layout of type {ty}")


def align_of(ty: ir.Type) -> int:
    if isinstance(ty, ir.VectorType):
        raw = ty.count * size_of(ty.element)
        return 1 << (raw - 1).bit_length()
    if isinstance(ty, ir.ArrayType):
        return align_of(ty.element)
    if isinstance(ty, (ir.LiteralStructType, ir.IdentifiedStructType)):
        return 1 if ty.packed else max((align_of(e) for e in ty.elements), default=1)
    return size_of(ty)


def field_offsets(ty) -> list:
    """The byte offset of each field of a struct type."""
    offsets, at = [], 0
    for element in ty.elements:
        if not ty.packed:
            at = -(-at // align_of(element)) * align_of(element)
        offsets.append(at)
        at += size_of(element)
    return offsets


# scalar types as struct formats: the memory views' formats and bitcast's byte images
_INT_FORMATS = {1: "B", 8: "B", 16: "H", 32: "I", 64: "Q"}
_FLOAT_FORMATS = {ir.HalfType: "e", ir.FloatType: "f", ir.DoubleType: "d"}


def scalar_format(ty: ir.Type) -> str:
    """The struct format character of a scalar type held in memory."""
    if isinstance(ty, ir.IntType) and ty.width in _INT_FORMATS:
        return _INT_FORMATS[ty.width]
    if isinstance(ty, ir.PointerType):
        return "Q"
    if is_float(ty):
        return _FLOAT_FORMATS[type(ty)]
    raise EmulationError(f"the emulator does not load or store values of type {ty}")


def to_bytes(ty: ir.Type, value) -> bytes:
    """The little-endian memory image of a value of type `ty`."""
    if isinstance(ty, (ir.VectorType, ir.ArrayType)):
        image = b"".join(to_bytes(ty.element, lane) for lane in value)
        return image.ljust(size_of(ty), b"\0")
    if isinstance(ty, (ir.LiteralStructType, ir.IdentifiedStructType)):
        image = bytearray(size_of(ty))
        for offset, element, field in zip(field_offsets(ty), ty.elements, value):
            part = to_bytes(element, field)
            image[offset:offset + len(part)] = part
        return bytes(image)
    return struct.pack("<" + scalar_format(ty), value)


def from_bytes(ty: ir.Type, image: bytes):
    """The value of type `ty` whose memory image is `image` (the reverse of to_bytes)."""
    if isinstance(ty, (ir.VectorType, ir.ArrayType)):
        step = size_of(ty.element)
        return tuple(from_bytes(ty.element, image[i * step:(i + 1) * step])
                     for i in range(ty.count))
    if isinstance(ty, (ir.LiteralStructType, ir.IdentifiedStructType)):
        return tuple(from_bytes(element, image[offset:offset + size_of(element)])
                     for offset, element in zip(field_offsets(ty), ty.elements))
    value = struct.unpack("<" + scalar_format(ty), image)[0]
    return value & 1 if isinstance(ty, ir.IntType) and ty.width == 1 else value


def zero(ty: ir.Type):
    """The zero value of `ty` (also what undef and zeroinitializer become)."""
    if isinstance(ty, (ir.VectorType, ir.ArrayType)):
        return (zero(ty.element),) * ty.count
    if isinstance(ty, (ir.LiteralStructType, ir.IdentifiedStructType)):
        return tuple(zero(element) for element in ty.elements)
    return 0.0 if is_float(ty) else 0


def constant_value(constant: ir.Constant):
    """The emulator's value of an LLVM constant (not a global's address: memory.py)."""
    ty, value = constant.type, constant.constant
    if isinstance(constant, ir.FormattedConstant):
        raise EmulationError(f"the constant expression {constant.get_reference()} is "
                             "not supported: build it with the IRBuilder instead")
    if value is None or value is ir.Undefined:
        return zero(ty)
    if isinstance(ty, (ir.VectorType, ir.ArrayType, ir.LiteralStructType,
                       ir.IdentifiedStructType)):
        if isinstance(value, (bytes, bytearray)):
            return tuple(value)
        elements = ty.elements if not isinstance(ty, (ir.VectorType, ir.ArrayType)) \
            else [ty.element] * ty.count
        return tuple(constant_value(v if isinstance(v, ir.Constant) else ir.Constant(t, v))
                     for v, t in zip(value, elements))
    if isinstance(ty, ir.IntType):
        return int(value) & ((1 << ty.width) - 1)
    if is_float(ty):
        rounding = float_rounding(ty)
        return rounding(float(value)) if rounding else float(value)
    if isinstance(ty, ir.PointerType):
        return 0
    raise EmulationError(f"the emulator does not know constants of type {ty}")
